#!/usr/bin/env bash
# The e2e suite on the real control plane in one lane; in the other, the suite on the sandbox, then
# the tests that read NodeMetrics once more with NodeMetrics on NATS JetStream (--store nats), on
# the sandbox and then on the real control plane.
#
# Each suite spends most of its time waiting (for leases to expire, agents to report, the real
# control plane to start): one alone keeps about a third of one core busy on a 2-core machine, so
# the two lanes together take about as long as the longer one, and the real control plane's suite
# is as long as the other lane's three runs. Each line is prefixed with its run; pytest's summary
# of each comes at its end, with its slowest tests. Exit status: non-zero when any run failed.
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

PYTEST=("$BIN/pytest" --durations=10)
statuses=()
if command -v go >/dev/null; then
  prefixed "e2e kube" "${PYTEST[@]}" tests/e2e --apiserver kube "$@" &
  kube=$!
else
  echo "skip: e2e against the real control plane: Go 1.26 is not installed, so it cannot be built"
  echo "skip: e2e with --store nats: Go 1.26 is not installed, so nats-server cannot be built"
  kube=""
fi
prefixed "e2e sandbox" "${PYTEST[@]}" tests/e2e "$@"
statuses+=("the sandbox suite $?")
if [[ -n "$kube" ]]; then
  prefixed "e2e nats" "${PYTEST[@]}" "${NATS_TESTS[@]}" --store nats "$@"
  statuses+=("its --store nats run $?")
  prefixed "e2e kube nats" "${PYTEST[@]}" "${NATS_KUBE_TESTS[@]}" --apiserver kube --store nats "$@"
  statuses+=("the real control plane's --store nats run $?")
  wait "$kube"
  statuses+=("the real control plane's suite $?")
fi
failed=0
for status in "${statuses[@]}"; do [[ "${status##* }" == 0 ]] || failed=1; done
echo "e2e: exit status of ${statuses[0]}$(printf '; %s' "${statuses[@]:1}")"
(( failed == 0 ))
