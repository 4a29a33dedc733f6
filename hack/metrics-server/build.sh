#!/usr/bin/env bash
# Build metrics-server once, from its Go module (sigs.k8s.io/metrics-server), and cache it outside
# the repository, as helm is (hack/lib/go_install.sh says how). `--check` builds nothing and exits 1
# when metrics-server is not built. Cold: see docs/development.md; `make metrics-server` times it.
# v0.9.0's go.mod has no replace or exclude directive: `go install` builds it as released. Its
# version is client-go's (k8s.io/client-go/pkg/version), set here as its Makefile sets it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../lib/go_install.sh"
go_install_cached metrics-server v0.9.0 sigs.k8s.io/metrics-server/cmd/metrics-server \
    "-s -w -X k8s.io/client-go/pkg/version.gitVersion=v0.9.0" "$here/build.sh" "${1:-}"
