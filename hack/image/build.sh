#!/usr/bin/env bash
# Build the container image (the Dockerfile) with buildah, on a Python base made here from Debian
# packages, and export it as an OCI archive. No image registry is reached: the base is made with
# debootstrap, and buildah never pulls (--pull=never). The builder stage downloads the locked wheels
# from PyPI, as the Dockerfile says.
#
#   1. the base: Debian bookworm (debootstrap minbase) with python3, a virtual environment in
#      /opt/venv first on the PATH (`python`, `pip`) and passwd (useradd); cached as a tar file in
#      $cache/image and imported into buildah's storage as colocation-python-base:bookworm-HASH.
#   2. the image, colocation:dev, built with PYTHON_IMAGE set to that base, in buildah's storage.
#   3. the archive, $cache/image/colocation.oci.tar, named docker.io/library/colocation:dev.
#
# Every buildah call uses the vfs storage driver and chroot isolation: they work as root without
# overlayfs or a container runtime. Not --layers: buildah 1.28's cached `from=` mounts can be stale.
# Prints progress on stderr and the archive's path on the last line of stdout. A base or an image
# whose inputs have not changed is not built again (the stamps are hashes of the inputs).
# `--can-build` builds nothing: it exits 0 where buildah can build here, else prints why not and exits 1.
# `--check` builds nothing: it prints the archive's path when it is up to date, else exits 1.
# COLOCATION_CACHE moves the cache; DEBIAN_MIRROR, the mirror debootstrap reads.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="${COLOCATION_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/colocation}"
out="$cache/image"
IMAGE=colocation:dev
ARCHIVE_NAME=docker.io/library/colocation:dev
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
buildah=(buildah --storage-driver vfs)

why_not() {  # prints why the image cannot be built here, or nothing
    local tool
    for tool in buildah debootstrap; do
        command -v "$tool" >/dev/null || { echo "$tool is not installed (apt-get install buildah debootstrap skopeo)"; return; }
    done
    [[ "$(id -u)" == 0 ]] || { echo "it needs root (debootstrap, and buildah's chroot isolation)"; return; }
    "${buildah[@]}" images >/dev/null 2>&1 || echo "buildah does not work here (buildah --storage-driver vfs images fails)"
}
if [[ "${1:-}" == "--can-build" ]]; then
    reason="$(why_not)"
    [[ -z "$reason" ]] || { echo "$reason"; exit 1; }
    exit 0
fi
reason="$(why_not)"
[[ -z "$reason" ]] || { echo "build-image: $reason" >&2; exit 3; }

step() {  # step WHAT COMMAND...: run it with a line every 30 s, so a cold build never looks hung
    local what="$1"; shift
    local start job
    start=$(date +%s)
    echo "build-image: $what" >&2
    "$@" &  # in the background, where set -e holds (it would not in an if's condition)
    job=$!
    # tail returns when the job exits, timeout after 30 s
    while ! timeout 30 tail --pid="$job" -f /dev/null; do
        echo "build-image:   ... $what, $(( $(date +%s) - start )) s" >&2
    done
    wait "$job" || { echo "build-image: $what failed" >&2; exit 1; }
    echo "build-image: $what done in $(( $(date +%s) - start )) s" >&2
}

# The base: what debootstrap installs, then the virtual environment the Dockerfile's `python` and
# `pip` are. Debian's python3 is externally managed (PEP 668): pip installs into the venv only.
make_base_tar() {  # make_base_tar TAR
    local tar="$1" rootfs
    rootfs="$(mktemp -d "$out/rootfs.XXXXXX")"
    trap 'rm -rf "$rootfs"' EXIT  # step runs this in a subshell of its own
    debootstrap --variant=minbase --include=python3,python3-venv,passwd,ca-certificates bookworm \
        "$rootfs" "$MIRROR" >&2
    chroot "$rootfs" /usr/bin/python3 -m venv /opt/venv
    # pip trusts the system's certificate authorities (ca-certificates), as Debian's own pip does.
    printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$rootfs/etc/pip.conf"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/tmp/* \
        "$rootfs"/var/log/*.log "$rootfs"/var/log/apt/* "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/*
    # Without the device nodes debootstrap made: the runtime provides /dev.
    tar -C "$rootfs" --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' \
        -cf "$tar.tmp" .
    mv "$tar.tmp" "$tar"
}

# The base's image configuration: the venv first on the PATH.
base_config=(--env VIRTUAL_ENV=/opt/venv --env LANG=C.UTF-8 --cmd python
             --env PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)

import_base() {  # import_base TAR NAME
    local container
    container="$("${buildah[@]}" from scratch)"
    "${buildah[@]}" add "$container" "$1" / >/dev/null
    "${buildah[@]}" config "${base_config[@]}" "$container"
    "${buildah[@]}" commit --quiet --rm "$container" "$2" >/dev/null
    # An older base (this script changed since) goes: images built on it keep their layers.
    local stale
    stale="$("${buildah[@]}" images --format '{{.Name}}:{{.Tag}}' | grep -F /colocation-python-base: \
        | grep -vxF "$2" || true)"
    [[ -z "$stale" ]] || "${buildah[@]}" rmi $stale >/dev/null
}

build_image() {  # build_image BASE
    # The builder reaches PyPI trusting this machine's certificate authorities (an egress proxy's
    # among them): its bundle is mounted over the base's while RUN steps run, never stored in the image.
    local -a trust=()
    [[ -f /etc/ssl/certs/ca-certificates.crt ]] \
        && trust=(--volume /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro)
    (cd "$root" && "${buildah[@]}" bud --pull=never --isolation chroot "${trust[@]}" \
        --build-arg "PYTHON_IMAGE=$1" --tag "$IMAGE" --file Dockerfile . >&2)
}

total_start=$(date +%s)
mkdir -p "$out"
base_hash="$( (declare -f make_base_tar; declare -p base_config MIRROR) | sha256sum | cut -c1-12)"
base_tar="$out/python-base-bookworm-$base_hash.tar"
base="localhost/colocation-python-base:bookworm-$base_hash"
# The image's inputs: the build context the Dockerfile reads (.dockerignore's allow-list), the base
# and how it is built.
inputs_hash="$( (echo "$base"; declare -f build_image; declare -p ARCHIVE_NAME; cd "$root" && find Dockerfile .dockerignore pyproject.toml README.md operator \
    requirements/image.txt requirements/build.txt -type f ! -path '*/__pycache__/*' ! -name '*.py[cod]' -print0 \
    | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16)"
stamp="$out/.built-$inputs_hash"
archive="$out/colocation.oci.tar"
if [[ -f "$stamp" && -f "$archive" ]] && "${buildah[@]}" inspect --type image "$IMAGE" >/dev/null 2>&1; then
    echo "$archive"
    exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
    echo "build-image: not built yet, or its inputs changed (run hack/image/build.sh)" >&2
    exit 1
fi
if [[ ! -f "$base_tar" ]]; then
    rm -f "$out"/python-base-bookworm-*.tar
    step "the base: debootstrap bookworm, python3 and a venv (cold: about a minute)" make_base_tar "$base_tar"
fi
if ! "${buildah[@]}" inspect --type image "$base" >/dev/null 2>&1; then
    step "importing the base into buildah's storage as $base" import_base "$base_tar" "$base"
fi
previous="$("${buildah[@]}" images --quiet "$IMAGE" 2>/dev/null || true)"
step "the image $IMAGE (buildah bud; the builder downloads the locked wheels)" build_image "$base"
if [[ -n "$previous" && "$previous" != "$("${buildah[@]}" images --quiet "$IMAGE")" ]]; then
    # The image this one replaces, unless a working container still uses it (a running sandbox's).
    "${buildah[@]}" rmi "$previous" >/dev/null 2>&1 || true
fi
rm -f "$out"/.built-* "$archive"
step "exporting $archive" "${buildah[@]}" push --quiet "$IMAGE" "oci-archive:$archive:$ARCHIVE_NAME"
touch "$stamp"
echo "build-image: built in $(( $(date +%s) - total_start )) s" >&2
echo "$archive"
