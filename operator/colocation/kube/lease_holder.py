"""Whether a Lease holder's process has ended, judged from what the kubelet says of its pod (pure).

A holder identity is POD_NAME_SUFFIX, with a new suffix for each process the container starts.
The holder writes `renewTime`; the kubelet on the same node writes when the pod's container
started and when it finished. Both read that node's clock, so they can be compared. The holder
has ended when the container started again after the last renewal, or when it stopped at or
after that renewal and has not started again. A standby may then take the Lease at once instead
of waiting out its duration. The kubelet's times have whole seconds, cut down: that only makes
the test stricter. Why: docs/operator.md#failover.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from colocation.apimachinery.clock import parse_micro_time
from colocation.kube.lease_record import LeaderElectionRecord

# The container that runs the operator in manifests/operator.yaml and the chart.
OPERATOR_CONTAINER = "operator"
# The operator's pods, in its namespace (manifests/operator.yaml, the chart, the sandbox).
OPERATOR_POD_SELECTOR = "app.kubernetes.io/component=operator"


def holder_pod_name(identity: str) -> str:
    """The pod a holder identity names ("" when it is not POD_NAME_SUFFIX)."""
    pod, separator, _ = identity.rpartition("_")
    return pod if separator else ""


def holder_ended(record: LeaderElectionRecord, pod: Mapping[str, Any], *,
                 container: str = OPERATOR_CONTAINER) -> bool:
    """Whether `pod` (the holder's, by name) proves that the holder's process is gone."""
    renewed = record.renew_time
    name = (pod.get("metadata") or {}).get("name")
    if renewed is None or not name or name != holder_pod_name(record.holder_identity):
        return False
    status = next((item for item in (pod.get("status") or {}).get("containerStatuses") or ()
                   if isinstance(item, Mapping) and item.get("name") == container), None)
    if status is None:
        return False
    state = status.get("state") or {}
    if "running" in state:
        started = parse_micro_time((state.get("running") or {}).get("startedAt"))
        return started is not None and started > renewed
    terminated = state.get("terminated") or (status.get("lastState") or {}).get("terminated") or {}
    finished = parse_micro_time(terminated.get("finishedAt"))
    return finished is not None and finished >= renewed
