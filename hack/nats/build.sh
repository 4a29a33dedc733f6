#!/usr/bin/env bash
# Build nats-server once, from its Go module (github.com/nats-io/nats-server/v2), and cache it
# outside the repository, the way hack/helm/build.sh caches helm. Prints progress on stderr and the
# binary's path on the last line of stdout. A warm cache returns at once: the stamp is a hash of
# this script. `--check` builds nothing and exits 1 when nats-server is not built. Cold, on 2
# shared cores: about 35 s once the modules are downloaded; `make nats` times it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
NATS_VERSION=v2.15.2
cache="${COLOCATION_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/colocation}"
out="$cache/nats-server-$NATS_VERSION"
bin="$out/bin"
stamp="$out/.built-$(sha256sum "$here/build.sh" | cut -c1-16)"

if [[ -f "$stamp" && -x "$bin/nats-server" ]]; then
    echo "$bin/nats-server"
    exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
    echo "build-nats: not built yet (run hack/nats/build.sh or make nats)" >&2
    exit 1
fi
command -v go >/dev/null || { echo "build-nats: go is not on the PATH; nats-server $NATS_VERSION is built with Go" >&2; exit 3; }
mkdir -p "$bin"

total_start=$(date +%s)
echo "build-nats: building nats-server $NATS_VERSION (github.com/nats-io/nats-server/v2) into $bin" >&2
# Outside any module, so the repository's go.mod files play no part: its go.mod has no replace
# directive, so `go install pkg@version` builds it exactly as released.
cd /
export GOFLAGS=-trimpath
echo "build-nats: downloading modules and compiling (a line every 30 s)" >&2
env GOBIN="$bin" go install -ldflags "-s -w" "github.com/nats-io/nats-server/v2@$NATS_VERSION" &
build=$!
# tail returns when the build exits, timeout after 30 s: a cold build never looks hung.
while ! timeout 30 tail --pid="$build" -f /dev/null; do
    echo "build-nats:   ... still building, $(( $(date +%s) - total_start )) s" >&2
done
wait "$build" || { echo "build-nats: go install github.com/nats-io/nats-server/v2@$NATS_VERSION failed" >&2; exit 1; }
rm -f "$out"/.built-*
touch "$stamp"
echo "build-nats: built in $(( $(date +%s) - total_start )) s" >&2
echo "$bin/nats-server"
