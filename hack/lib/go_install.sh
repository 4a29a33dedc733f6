# Sourced by hack/helm/build.sh and hack/nats/build.sh: build one Go program with `go install
# PACKAGE@VERSION` and cache it outside the repository, in $cache/NAME-VERSION/bin. Prints
# progress on stderr and the binary's path on the last line of stdout. A warm cache returns at
# once: the stamp is a hash of the calling script and of this one. `--check` builds nothing and
# exits 1 when the program is not built; exit 3 when go is missing.
#
# go_install_cached NAME VERSION PACKAGE LDFLAGS CALLER [--check]
go_install_cached() {
    local name="$1" version="$2" package="$3" ldflags="$4" caller="$5" mode="${6:-}"
    local cache="${COLOCATION_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/colocation}"
    local out="$cache/$name-$version"
    local bin="$out/bin"
    local stamp
    stamp="$out/.built-$(cat "$caller" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)"
    if [[ -f "$stamp" && -x "$bin/$name" ]]; then
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
        env GOBIN="$bin" go install -ldflags "$ldflags" "$package@$version" &
        local build=$!
        # tail returns when the build exits, timeout after 30 s: a cold build never looks hung.
        while ! timeout 30 tail --pid="$build" -f /dev/null; do
            echo "build-$name:   ... still building, $(( $(date +%s) - total_start )) s" >&2
        done
        wait "$build" || { echo "build-$name: go install $package@$version failed" >&2; exit 1; }
    ) || return 1
    rm -f "$out"/.built-*
    touch "$stamp"
    echo "build-$name: built in $(( $(date +%s) - total_start )) s" >&2
    echo "$bin/$name"
}
