#!/usr/bin/env bash
# Build helm once, from its Go module (helm.sh/helm/v4), and cache it outside the repository, the
# way hack/kube/build.sh caches the control plane (hack/lib/go_install.sh says how). `--check`
# builds nothing and exits 1 when helm is not built. Cold, on 2 shared cores: see docs/install.md
# ("Install with Helm"); `make helm` times it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../lib/go_install.sh"
HELM_VERSION=v4.3.1
# `helm version` reports the tag: helm's release builds set it the same way.
go_install_cached helm "$HELM_VERSION" helm.sh/helm/v4/cmd/helm \
    "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" "$here/build.sh" "${1:-}"
