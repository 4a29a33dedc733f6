#!/usr/bin/env bash
# Build helm once, from its Go module (helm.sh/helm/v4), and cache it outside the repository, the
# way hack/kube/build.sh caches the control plane. Prints progress on stderr and the binary's path
# on the last line of stdout. A warm cache returns at once: the stamp is a hash of this script.
# `--check` builds nothing and exits 1 when helm is not built. Cold, on 2 shared cores: see
# docs/install.md ("Install with Helm"); `make helm` times it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
HELM_VERSION=v4.3.1
cache="${COLOCATION_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/colocation}"
out="$cache/helm-$HELM_VERSION"
bin="$out/bin"
stamp="$out/.built-$(sha256sum "$here/build.sh" | cut -c1-16)"

if [[ -f "$stamp" && -x "$bin/helm" ]]; then
    echo "$bin/helm"
    exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
    echo "build-helm: not built yet (run hack/helm/build.sh or make helm)" >&2
    exit 1
fi
command -v go >/dev/null || { echo "build-helm: go is not on the PATH; helm $HELM_VERSION is built with Go" >&2; exit 3; }
mkdir -p "$bin"

total_start=$(date +%s)
echo "build-helm: building helm $HELM_VERSION (helm.sh/helm/v4) into $bin" >&2
# Outside any module, so the repository's go.mod files (hack/kube's) play no part; `go install
# pkg@version` resolves helm's own go.mod exactly as released.
cd /
export GOFLAGS=-trimpath
echo "build-helm: downloading modules and compiling (a line every 30 s)" >&2
# `helm version` reports the tag: helm's release builds set it the same way.
env GOBIN="$bin" go install -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" &
build=$!
# tail returns when the build exits, timeout after 30 s: a cold build never looks hung.
while ! timeout 30 tail --pid="$build" -f /dev/null; do
    echo "build-helm:   ... still building, $(( $(date +%s) - total_start )) s" >&2
done
wait "$build" || { echo "build-helm: go install helm.sh/helm/v4/cmd/helm@$HELM_VERSION failed" >&2; exit 1; }
rm -f "$out"/.built-*
touch "$stamp"
echo "build-helm: built in $(( $(date +%s) - total_start )) s" >&2
echo "$bin/helm"
