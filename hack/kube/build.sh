#!/usr/bin/env bash
# Build the real control plane once and cache it outside the repository:
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl   (k8s.io/kubernetes, this module)
#   etcd    (go.etcd.io/etcd/server/v3 at the release Kubernetes pins, this module)
#   kwok    (sigs.k8s.io/kwok, its own module: the staging replaces here would override its dependencies)
# Prints progress on stderr and the binaries' directory on the last line of stdout. A warm cache
# returns at once: the stamp is a hash of every input. `--check` builds nothing and exits 1 when
# the binaries are not built. Cold, on 2 cores: about 10 minutes (docs/development.md, "The real control plane").
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
KUBE_VERSION=v1.36.3
KWOK_VERSION=v0.8.0
cache="${COLOCATION_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/colocation}"
out="$cache/kubernetes-$KUBE_VERSION"
bin="$out/bin"
inputs_hash="$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" "$here"/*/main.go | sha256sum | cut -c1-16)"
stamp="$out/.built-$inputs_hash"

if [[ -f "$stamp" ]]; then
    echo "$bin"
    exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
    echo "build-kube: not built yet (run hack/kube/build.sh)" >&2
    exit 1
fi
command -v go >/dev/null || { echo "build-kube: go is not on the PATH; the control plane needs Go 1.26" >&2; exit 3; }
mkdir -p "$bin"
export GOFLAGS="${GOFLAGS:-} -mod=mod -trimpath"
minor="$(cut -d. -f2 <<<"$KUBE_VERSION")"
kube_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kube_ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done

steps=7
step() {  # step N WHAT COMMAND...: run it with a line every 30 s, so a cold build never looks hung
    local n="$1" what="$2"; shift 2
    local start ticker
    start=$(date +%s)
    echo "build-kube: [$n/$steps] $what" >&2
    (while sleep 30; do echo "build-kube:   ... $what, $(( $(date +%s) - start )) s" >&2; done) &
    ticker=$!
    if ! "$@"; then
        kill "$ticker" 2>/dev/null || true
        echo "build-kube: $what failed" >&2
        exit 1
    fi
    kill "$ticker" 2>/dev/null || true
    wait "$ticker" 2>/dev/null || true
    echo "build-kube: [$n/$steps] $what done in $(( $(date +%s) - start )) s" >&2
}
kube_binary() { go build -ldflags "$kube_ldflags" -o "$bin/$1" "./$1"; }

total_start=$(date +%s)
echo "build-kube: building Kubernetes $KUBE_VERSION, etcd and kwok $KWOK_VERSION into $bin" >&2
cd "$here"
step 1 "download Go modules" go mod download
step 2 "etcd" go build -ldflags "-s -w" -o "$bin/etcd" ./etcd
step 3 "kube-apiserver" kube_binary kube-apiserver
step 4 "kube-controller-manager" kube_binary kube-controller-manager
step 5 "kube-scheduler" kube_binary kube-scheduler
step 6 "kubectl" kube_binary kubectl
cd /
step 7 "kwok" env GOBIN="$bin" GOFLAGS=-trimpath go install -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
rm -f "$out"/.built-*
touch "$stamp"
echo "build-kube: built in $(( $(date +%s) - total_start )) s" >&2
echo "$bin"
