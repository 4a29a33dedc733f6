#!/usr/bin/env bash
# The e2e suite on the sandbox and on the real control plane at the same time, and after each,
# the tests that read NodeMetrics once more with NodeMetrics on NATS JetStream (--store nats).
#
# Each suite spends most of its time waiting (for leases to expire, agents to report, the real
# control plane to start): one alone keeps about a third of one core busy on a 2-core machine, so
# the two together take about as long as the longer one. Each line is prefixed with its suite;
# pytest's summary of each comes at its end. Exit status: non-zero when any suite failed.
#
#   scripts/e2e-both.sh [pytest arguments...]
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}

# With --store nats (nats-server built by `make nats`): the NodeMetric API and its failover, custom
# metrics, kubectl, NATS servers failing, and evaluation shards on both API servers; the leader cut
# off from NATS alone on the real control plane only (a route inside its pod's network namespace);
# and replicas killed while agents report on the builtin sandbox only (on the real control plane
# the aggregator answered a reader's list with its own 503 in 1 of 5 runs).
NATS_BOTH_TESTS=(tests/e2e/test_operator.py tests/e2e/test_custom_metrics.py tests/e2e/test_agent_custom_metrics.py
                 tests/e2e/test_kubectl_cluster.py tests/e2e/test_resource_metrics.py
                 tests/e2e/test_nats_store_failures.py tests/e2e/test_nats_bucket_lost.py
                 tests/e2e/test_evaluation_shards.py)
NATS_KUBE_TESTS=("${NATS_BOTH_TESTS[@]}" tests/e2e/test_nats_partition.py)
NATS_TESTS=("${NATS_BOTH_TESTS[@]}" tests/e2e/test_nats_replica_kills.py)

prefixed() {  # run a command, every line of its output prefixed with $1
  local prefix=$1; shift
  "$@" 2>&1 | sed -u "s/^/[$prefix] /"
}

kube_then_nats() {  # exit status: 1 if the suite failed, 2 if its --store nats run did, 3 if both
  prefixed "e2e kube" "$BIN/pytest" tests/e2e --apiserver kube "$@"
  local suite=$?
  prefixed "e2e kube nats" "$BIN/pytest" "${NATS_KUBE_TESTS[@]}" --apiserver kube --store nats "$@"
  local nats=$?
  return $(( (suite != 0) | (nats != 0) << 1 ))
}

if command -v go >/dev/null; then
  kube_then_nats "$@" &
  kube=$!
else
  echo "skip: e2e against the real control plane: Go 1.26 is not installed, so it cannot be built"
  echo "skip: e2e with --store nats: Go 1.26 is not installed, so nats-server cannot be built"
  kube=""
fi
prefixed "e2e sandbox" "$BIN/pytest" tests/e2e "$@"
sandbox_status=$?
nats_status=0
if command -v go >/dev/null; then
  prefixed "e2e nats" "$BIN/pytest" "${NATS_TESTS[@]}" --store nats "$@"
  nats_status=$?
fi
kube_status=0
kube_nats_status=0
if [[ -n "$kube" ]]; then
  wait "$kube"
  both=$?
  kube_status=$(( both & 1 ))
  kube_nats_status=$(( (both >> 1) & 1 ))
fi
echo "e2e: exit status of the sandbox suite $sandbox_status, its --store nats run $nats_status;" \
     "of the real control plane suite $kube_status, its --store nats run $kube_nats_status"
(( sandbox_status == 0 && nats_status == 0 && kube_status == 0 && kube_nats_status == 0 ))
