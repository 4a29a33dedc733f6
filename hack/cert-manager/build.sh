#!/usr/bin/env bash
# Build cert-manager's controller (self-signed and CA issuers only) and cainjector once, as small
# mains of this module over cert-manager's exported packages (controller/main.go and
# cainjector/main.go say why and what they leave out), and cache them outside the repository, as
# hack/kube/build.sh does the control plane. The last stdout line is the directory holding
# cert-manager-controller and cert-manager-cainjector; the CRDs of the same release are copied
# beside it, into crds/. `--check` builds nothing and exits 1 when they are not built; exit 3
# when go is missing. Cold: see docs/development.md.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
CERT_MANAGER_VERSION=v1.21.2  # keep in step with go.mod
cache="${COLOCATION_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/colocation}"
out="$cache/cert-manager-$CERT_MANAGER_VERSION"
bin="$out/bin"
inputs_hash="$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" "$here"/*/main.go | sha256sum | cut -c1-16)"
stamp="$out/.built-$inputs_hash"

if [[ -f "$stamp" ]]; then
    echo "$bin"
    exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
    echo "build-cert-manager: not built yet (run hack/cert-manager/build.sh)" >&2
    exit 1
fi
command -v go >/dev/null || { echo "build-cert-manager: go is not on the PATH; cert-manager is built with Go" >&2; exit 3; }
mkdir -p "$bin"
export GOFLAGS="${GOFLAGS:-} -mod=mod -trimpath"
total_start=$(date +%s)
echo "build-cert-manager: building cert-manager $CERT_MANAGER_VERSION's controller and cainjector into $bin" >&2
cd "$here"
build() {  # build NAME DIR: with a line every 30 s, so a cold build never looks hung
    local start pid
    start=$(date +%s)
    echo "build-cert-manager: $1" >&2
    go build -ldflags "-s -w" -o "$bin/$1" "./$2" &
    pid=$!
    # tail returns when the build exits, timeout after 30 s.
    while ! timeout 30 tail --pid="$pid" -f /dev/null; do
        echo "build-cert-manager:   ... $1, $(( $(date +%s) - start )) s" >&2
    done
    wait "$pid" || { echo "build-cert-manager: $1 failed" >&2; exit 1; }
    echo "build-cert-manager: $1 done in $(( $(date +%s) - start )) s" >&2
}
build cert-manager-controller controller
build cert-manager-cainjector cainjector
module_dir="$(go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)"
rm -rf "$bin/crds"
mkdir -p "$bin/crds"
cp "$module_dir"/deploy/crds/cert-manager.io_*.yaml "$bin/crds/"
chmod u+w "$bin"/crds/*.yaml
rm -f "$out"/.built-*
touch "$stamp"
echo "build-cert-manager: built in $(( $(date +%s) - total_start )) s" >&2
echo "$bin"
