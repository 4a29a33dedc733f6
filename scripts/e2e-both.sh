#!/usr/bin/env bash
# The e2e suite on the sandbox and on the real control plane at the same time (and, after the
# sandbox's, the operator's tests with --store nats).
#
# Each suite spends most of its time waiting (for leases to expire, agents to report, the real
# control plane to start): one alone keeps about a third of one core busy on a 2-core machine, so
# the two together take about as long as the longer one. Each line is prefixed with its suite;
# pytest's summary of each comes at its end. Exit status: non-zero when either suite failed.
#
#   scripts/e2e-both.sh [pytest arguments...]
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}

prefixed() {  # run a command, every line of its output prefixed with $1
  local prefix=$1; shift
  "$@" 2>&1 | sed -u "s/^/[$prefix] /"
}

if command -v go >/dev/null; then
  prefixed "e2e kube" "$BIN/pytest" tests/e2e --apiserver kube "$@" &
  kube=$!
else
  echo "skip: e2e against the real control plane: Go 1.26 is not installed, so it cannot be built"
  kube=""
fi
prefixed "e2e sandbox" "$BIN/pytest" tests/e2e "$@"
sandbox_status=$?
# While the real control plane's suite goes on: the operator's NodeMetric tests once more, with
# NodeMetrics on NATS JetStream (`--store nats`, nats-server built by `make nats`).
nats_status=0
if command -v go >/dev/null; then
  prefixed "e2e nats" "$BIN/pytest" tests/e2e/test_operator.py --store nats "$@"
  nats_status=$?
else
  echo "skip: e2e with --store nats: Go 1.26 is not installed, so nats-server cannot be built"
fi
kube_status=0
if [[ -n "$kube" ]]; then
  wait "$kube"
  kube_status=$?
fi
echo "e2e: sandbox suite exit status $sandbox_status, --store nats $nats_status, real control plane suite exit status $kube_status"
(( sandbox_status == 0 && nats_status == 0 && kube_status == 0 ))
