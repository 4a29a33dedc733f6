#!/usr/bin/env bash
# Build nats-server once, from its Go module (github.com/nats-io/nats-server/v2), and cache it
# outside the repository, as helm is (hack/lib/go_install.sh says how). `--check` builds nothing
# and exits 1 when nats-server is not built. Cold, on 2 shared cores: about 35 s once the modules
# are downloaded; `make nats` times it. Its go.mod has no replace directive: `go install` builds it
# exactly as released, and its version is a constant of its source.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../lib/go_install.sh"
go_install_cached nats-server v2.15.2 github.com/nats-io/nats-server/v2 "-s -w" "$here/build.sh" "${1:-}"
