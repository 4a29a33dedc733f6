"""The node of Koordinator's LoadAwareScheduling tests (96 cores, 512 GiB allocatable), in our terms.

Koordinator builds a NodeMetric and pods for each case; here a case is a NodeMetric `status` (as
agents report it), the pods bound to the node, and the pod being scheduled, read by the same
functions the extender will call. Its tests report "now" and bind their pods 10 s before it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from colocation.loadaware.load_aware_config import LoadAwareConfig
from colocation.loadaware.node_figures import AssignedPod, NodeFigures, node_figures, reported_load
from colocation.loadaware.pod_estimate import JudgedPod, estimate_pod, judged_pod

GI = 1024**3
ALLOCATABLE = {"cpu": 96_000, "memory": 512 * GI}
NOW = 1_800_000_000.0


def status(cpu: str, memory: str, *, pods: Iterable[dict[str, Any]] = (), **node_metric: Any) -> dict[str, Any]:
    """A report's status: node usage, and each pod as (namespace default) {name, cpu, memory, priority?}."""
    return {
        "updateTime": "2027-01-15T08:00:00Z",  # the agent's clock: never read, the receipt time is
        "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": memory}}, **node_metric},
        "podsMetric": [{"namespace": "default", "name": pod["name"],
                        "podUsage": {"resources": {"cpu": pod["cpu"], "memory": pod["memory"]}},
                        **({"priority": pod["priority"]} if "priority" in pod else {})} for pod in pods],
    }


def pod(name: str, *, priority: int | None = None, requests: dict[str, str] | None = None,
        owner: str | None = None) -> dict[str, Any]:
    """A pod as the API serves it: requests equal to limits (Koordinator's tests set only requests)."""
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {"requests": requests or {}}}]}
    if priority is not None:
        spec["priority"] = priority
    metadata: dict[str, Any] = {"namespace": "default", "name": name}
    if owner:
        metadata["ownerReferences"] = [{"kind": owner, "name": "owner"}]
    return {"metadata": metadata, "spec": spec}


def bound(the_pod: dict[str, Any], *, config: LoadAwareConfig, assigned_at: float | None = NOW - 10) -> AssignedPod:
    judged = judged_pod(the_pod, config=config)
    return AssignedPod(namespace="default", name=the_pod["metadata"]["name"], prod=judged.prod,
                       estimate=estimate_pod(the_pod, scaling_factors=config.estimated_scaling_factors),
                       assigned_at=assigned_at)


def figures(report_status: dict[str, Any] | None, *, config: LoadAwareConfig, bound_pods: Iterable[dict[str, Any]] = (),
            received_at: float = NOW) -> NodeFigures:
    report = None if report_status is None else reported_load(report_status, received_at=received_at, config=config)
    return node_figures(allocatable=ALLOCATABLE, report=report,
                        assigned=[bound(p, config=config) for p in bound_pods])


def incoming(the_pod: dict[str, Any] | None, *, config: LoadAwareConfig) -> JudgedPod:
    """Koordinator's tests schedule an empty pod when they name none."""
    return judged_pod(the_pod or {}, config=config)
