# Sourced by hack/helm/build.sh, hack/nats/build.sh and hack/prometheus/build.sh: build Go programs
# with `go install PACKAGE@VERSION` and cache them outside the repository, in
# $cache/NAME-VERSION/bin. Prints progress on stderr and the path of NAME's binary on the last line
# of stdout. A warm cache returns at once: the stamp is a hash of the calling script and of this
# one. `--check` builds nothing and exits 1 when the programs are not built; exit 3 when go is missing.
#
# go_install_cached NAME VERSION PACKAGES LDFLAGS CALLER [--check]
#   PACKAGES: one package, or several of the same module separated by spaces (all built into one
#   bin/; the first one is NAME). GO_INSTALL_TAGS, when set: the build tags, separated by commas.
go_install_cached() {
    local name="$1" version="$2" package="$3" ldflags="$4" caller="$5" mode="${6:-}"
    local -a packages
    read -r -a packages <<<"$package"
    local cache="${COLOCATION_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/colocation}"
    local out="$cache/$name-$version"
    local bin="$out/bin"
    local stamp
    stamp="$out/.built-$(cat "$caller" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)"
    local pkg program built=1
    for pkg in "${packages[@]}"; do
        program="$pkg"
        [[ "$program" =~ /v[0-9]+$ ]] && program="${program%/*}"  # go install drops a major version suffix
        [[ -x "$bin/${program##*/}" ]] || built=0
    done
    if [[ -f "$stamp" && "$built" == 1 ]]; then
        echo "$bin/$name"
        return 0
    fi
    if [[ "$mode" == "--check" ]]; then
        echo "build-$name: not built yet (run $caller)" >&2
        return 1
    fi
    command -v go >/dev/null || { echo "build-$name: go is not on the PATH; $name $version is built with Go" >&2; return 3; }
    mkdir -p "$bin"
    local total_start
    total_start=$(date +%s)
    echo "build-$name: building $name $version ($package) into $bin" >&2
    # Outside any module, so the repository's go.mod files (hack/kube's) play no part; `go install
    # pkg@version` resolves the program's own go.mod exactly as released.
    (
        cd /
        export GOFLAGS=-trimpath
        echo "build-$name: downloading modules and compiling (a line every 30 s)" >&2
        env GOBIN="$bin" go install -ldflags "$ldflags" ${GO_INSTALL_TAGS:+-tags "$GO_INSTALL_TAGS"} \
            "${packages[@]/%/@$version}" &
        local build=$!
        # tail returns when the build exits, timeout after 30 s: a cold build never looks hung.
        while ! timeout 30 tail --pid="$build" -f /dev/null; do
            echo "build-$name:   ... still building, $(( $(date +%s) - total_start )) s" >&2
        done
        wait "$build" || { echo "build-$name: go install $package at $version failed" >&2; exit 1; }
    ) || return 1
    rm -f "$out"/.built-*
    touch "$stamp"
    echo "build-$name: built in $(( $(date +%s) - total_start )) s" >&2
    echo "$bin/$name"
}
