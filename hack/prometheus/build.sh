#!/usr/bin/env bash
# Build prometheus and promtool once, from their Go module (github.com/prometheus/prometheus), and
# cache them outside the repository, as helm is (hack/lib/go_install.sh says how). The last stdout
# line is prometheus's path; promtool is beside it. `--check` builds nothing and exits 1 when they
# are not built. Cold: see docs/development.md; `make prometheus` times it.
# v0.316.0 is Prometheus 3.16.0. Its go.mod has no replace or exclude directive: `go install`
# builds it as released. Without the builtinassets tag there is no web UI (and no npm step); the
# tests use the HTTP API only. remove_all_sd leaves out every service discovery but file, HTTP and
# static, and with them the cloud SDKs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../lib/go_install.sh"
module=github.com/prometheus/prometheus
GO_INSTALL_TAGS=remove_all_sd go_install_cached prometheus v0.316.0 "$module/cmd/prometheus $module/cmd/promtool" \
    "-s -w -X github.com/prometheus/common/version.Version=3.16.0" "$here/build.sh" "${1:-}"
