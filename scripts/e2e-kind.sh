#!/usr/bin/env bash
# End-to-end test on a real Kubernetes cluster: kind, the real image, the real manifests.
#
#   scripts/e2e-kind.sh [PYTEST_ARGS...]        (or: make e2e-kind)
#
# Creates (or reuses) the kind cluster of kind-config.yaml, builds the image with a unique tag,
# loads it into the nodes, installs crds/ and manifests/ with that image, waits until the
# operator and the agents are rolled out and the NodeMetric API is available, then runs
# `pytest tests/e2e --kubeconfig ...`. On any failure it prints the state of the cluster,
# the events and the logs of every colocation pod before cleaning up.
#
# Environment:
#   CLUSTER_NAME=colocation   kind cluster name
#   KEEP_CLUSTER=0            1 keeps a cluster this script created (a reused one is always kept)
#   KIND_NODE_IMAGE=          kindest/node image to create the cluster with (default: kind's)
#   IMAGE_REPO=colocation     image name; the tag is the git commit, or dev-<epoch> for a dirty tree
#   IMAGE_TAG=                force a tag (never "latest": kind nodes would try to pull it)
#   ROLLOUT_TIMEOUT=300       seconds to wait for each rollout and for the APIService
#   PYTEST=.venv/bin/pytest   pytest of a virtualenv with the package and its test extra
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLUSTER_NAME="${CLUSTER_NAME:-colocation}"
KEEP_CLUSTER="${KEEP_CLUSTER:-0}"
KIND_NODE_IMAGE="${KIND_NODE_IMAGE:-}"
IMAGE_REPO="${IMAGE_REPO:-colocation}"
IMAGE_TAG="${IMAGE_TAG:-}"
ROLLOUT_TIMEOUT="${ROLLOUT_TIMEOUT:-300}"
PYTEST="${PYTEST:-$ROOT/.venv/bin/pytest}"

NAMESPACE=colocation-system
OPERATOR=deployment/colocation-operator
AGENT=daemonset/colocation-agent
APISERVICE=apiservice/v1alpha1.metrics.colocation.dev
CRDS=(crd/nodeslos.slo.colocation.dev crd/noderesources.slo.colocation.dev)
MIN_KUBERNETES_MINOR=30

WORKDIR="$(mktemp -d "${TMPDIR:-/tmp}/colocation-e2e.XXXXXX")"
# A kubeconfig of our own: the user's ~/.kube/config and current context are never touched.
export KUBECONFIG="$WORKDIR/kubeconfig"
CREATED_CLUSTER=0

log() { printf '\n==> [%s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

dump_diagnostics() {
    # Best effort: every command may fail on a broken cluster, and none may stop the others.
    set +e
    log "diagnostics: nodes and every object"
    kubectl get nodes -o wide
    kubectl get all -A -o wide
    log "diagnostics: colocation objects"
    kubectl get "$APISERVICE" -o yaml
    kubectl get nodeslos,noderesources -o wide
    kubectl get leases -n "$NAMESPACE" -o yaml
    kubectl get leases -n colocation-node-lease
    log "diagnostics: events, oldest first"
    kubectl get events -A --sort-by=.metadata.creationTimestamp
    log "diagnostics: pods in $NAMESPACE"
    kubectl describe pods -n "$NAMESPACE"
    local pod
    for pod in $(kubectl get pods -n "$NAMESPACE" -o name); do
        log "logs: $pod"
        kubectl logs -n "$NAMESPACE" "$pod" --all-containers --timestamps
        log "logs: $pod (previous container)"
        kubectl logs -n "$NAMESPACE" "$pod" --all-containers --timestamps --previous 2>&1 \
            | sed 's/^/    /'
    done
}

cleanup() {
    local status=$?
    set +e
    trap - EXIT INT TERM
    # 130/143: interrupted by the user; a dump would only be in the way.
    if [[ $status -ne 0 && $status -ne 130 && $status -ne 143 && -s "$KUBECONFIG" ]]; then
        dump_diagnostics
        log "FAILED (exit status $status); diagnostics above"
    fi
    if [[ $CREATED_CLUSTER == 1 && $KEEP_CLUSTER != 1 ]]; then
        log "deleting kind cluster $CLUSTER_NAME (KEEP_CLUSTER=1 keeps it)"
        kind delete cluster --name "$CLUSTER_NAME"
    elif [[ -s $KUBECONFIG ]]; then
        log "kept kind cluster $CLUSTER_NAME: kind export kubeconfig --name $CLUSTER_NAME"
    fi
    rm -rf "$WORKDIR"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

require() {
    command -v "$1" >/dev/null 2>&1 || die "$1 is not installed or not on PATH. $2"
}

minor_version() {
    # The minor version of `kubectl version -o json` at key $1 (clientVersion / serverVersion).
    "$PYTHON" -c 'import json, re, sys
print(re.match(r"\d+", json.load(sys.stdin)[sys.argv[1]]["minor"]).group())' "$1"
}

check_tools() {
    log "checking tools"
    require docker "Install Docker: https://docs.docker.com/engine/install/"
    require kind "Install kind: https://kind.sigs.k8s.io/docs/user/quick-start/#installation"
    require kubectl "Install kubectl >= 1.27: https://kubernetes.io/docs/tasks/tools/"
    docker info >/dev/null 2>&1 \
        || die "the Docker daemon is not reachable (is it running, and may this user use it?)"
    [[ -x $PYTEST ]] \
        || die "$PYTEST not found: run 'make venv' first (or set PYTEST to a pytest with '.[test]' installed)"
    PYTHON="$(dirname "$PYTEST")/python"
    [[ -x $PYTHON ]] || die "$PYTHON not found next to $PYTEST"
    local client_minor
    client_minor="$(kubectl version --client -o json | minor_version clientVersion)"
    (( client_minor >= 27 )) || die "kubectl 1.$client_minor is too old: 1.27 or newer is needed"
    [[ $ROLLOUT_TIMEOUT =~ ^[0-9]+$ ]] || die "ROLLOUT_TIMEOUT must be a number of seconds, not '$ROLLOUT_TIMEOUT'"
}

choose_image_tag() {
    if [[ -z $IMAGE_TAG ]]; then
        local commit
        commit="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || true)"
        # A dirty tree must not reuse the tag of its commit: the nodes would keep running the
        # image they already have under that tag.
        if [[ -n $commit ]] && git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null \
            && [[ -z "$(git -C "$ROOT" ls-files --others --exclude-standard 2>/dev/null)" ]]; then
            IMAGE_TAG="$commit"
        else
            IMAGE_TAG="dev-$(date +%s)"
        fi
    fi
    [[ $IMAGE_TAG != latest ]] || die "IMAGE_TAG=latest would make the nodes pull from a registry"
    IMAGE="$IMAGE_REPO:$IMAGE_TAG"
}

ensure_cluster() {
    if kind get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"; then
        log "reusing kind cluster $CLUSTER_NAME"
        kind get kubeconfig --name "$CLUSTER_NAME" >"$KUBECONFIG"
    else
        log "creating kind cluster $CLUSTER_NAME"
        local args=(create cluster --name "$CLUSTER_NAME" --config "$ROOT/kind-config.yaml"
                    --kubeconfig "$KUBECONFIG" --wait 180s)
        [[ -z $KIND_NODE_IMAGE ]] || args+=(--image "$KIND_NODE_IMAGE")
        CREATED_CLUSTER=1
        kind "${args[@]}"
    fi
    local server_minor
    server_minor="$(kubectl version -o json 2>/dev/null | minor_version serverVersion)" \
        || die "cannot reach the API server of kind cluster $CLUSTER_NAME"
    (( server_minor >= MIN_KUBERNETES_MINOR )) \
        || die "the cluster runs Kubernetes 1.$server_minor; 1.$MIN_KUBERNETES_MINOR or newer is needed (set KIND_NODE_IMAGE)"
    kubectl wait --for=condition=Ready nodes --all --timeout="${ROLLOUT_TIMEOUT}s"
}

build_and_load_image() {
    log "building $IMAGE"
    DOCKER_BUILDKIT=1 docker build --tag "$IMAGE" "$ROOT"
    log "loading $IMAGE into the nodes of $CLUSTER_NAME"
    kind load docker-image "$IMAGE" --name "$CLUSTER_NAME"
}

install() {
    log "installing the CRDs"
    kubectl apply -f "$ROOT/crds/"
    kubectl wait --for=condition=Established --timeout=60s "${CRDS[@]}"

    log "installing manifests/ with image $IMAGE"
    # An overlay over a copy of the base, so the tree is never modified.
    mkdir -p "$WORKDIR/overlay"
    cp -R "$ROOT/manifests" "$WORKDIR/base"
    cat >"$WORKDIR/overlay/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../base
images:
  - name: colocation
    newName: "$IMAGE_REPO"
    newTag: "$IMAGE_TAG"
EOF
    kubectl kustomize "$WORKDIR/overlay" >"$WORKDIR/install.yaml"
    grep -q "image: $IMAGE\$" "$WORKDIR/install.yaml" || die "the image override did not apply"
    if grep -E '^[ -]*image: ' "$WORKDIR/install.yaml" | grep -vq "image: $IMAGE\$"; then
        die "a workload still runs another image than $IMAGE"
    fi
    kubectl apply -f "$WORKDIR/install.yaml"
}

operator_rolled_out() {
    # Rolled out = the controller saw the current spec, every replica runs it, no old replica is
    # left, and at least one replica is Ready. Ready means the leader, or a standby whose copy
    # of the leader's data is current (docs/operator.md#consistency-across-replicas).
    # Absent status fields print as empty strings; "|" keeps them in their places.
    local fields generation observed desired current updated ready
    fields="$(kubectl get -n "$NAMESPACE" "$OPERATOR" -o jsonpath='{.metadata.generation}|{.status.observedGeneration}|{.spec.replicas}|{.status.replicas}|{.status.updatedReplicas}|{.status.readyReplicas}')" \
        || return 1
    IFS='|' read -r generation observed desired current updated ready <<<"$fields"
    [[ -n $generation && -n $desired ]] || return 1
    (( ${observed:-0} >= generation && ${updated:-0} == desired && ${current:-0} == desired \
        && ${ready:-0} >= 1 ))
}

wait_until() {
    # wait_until DESCRIPTION TIMEOUT_SECONDS COMMAND...: poll COMMAND every 2 s.
    local what=$1 timeout=$2 deadline
    shift 2
    deadline=$(( SECONDS + timeout ))
    until "$@"; do
        (( SECONDS < deadline )) || die "timed out after ${timeout}s waiting for $what"
        sleep 2
    done
}

wait_for_rollout() {
    log "waiting for the agents ($AGENT)"
    kubectl rollout status -n "$NAMESPACE" "$AGENT" --timeout="${ROLLOUT_TIMEOUT}s"
    log "waiting for the operator ($OPERATOR) to roll out and elect a leader"
    wait_until "$OPERATOR to roll out with a Ready leader" "$ROLLOUT_TIMEOUT" operator_rolled_out
    log "waiting for the NodeMetric API ($APISERVICE) to be Available"
    kubectl wait --for=condition=Available --timeout="${ROLLOUT_TIMEOUT}s" "$APISERVICE"
    kubectl get -n "$NAMESPACE" pods -o wide
}

run_tests() {
    log "running tests/e2e against kind cluster $CLUSTER_NAME"
    # A copy of the kubeconfig outside WORKDIR is not needed: pytest finishes before cleanup.
    (cd "$ROOT" && "$PYTEST" tests/e2e --kubeconfig "$KUBECONFIG" "$@")
}

main() {
    check_tools
    choose_image_tag
    ensure_cluster
    build_and_load_image
    install
    wait_for_rollout
    run_tests "$@"
    log "PASSED: tests/e2e on kind cluster $CLUSTER_NAME with image $IMAGE"
}

main "$@"
