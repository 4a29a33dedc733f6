"""What the sandbox's admission adds to a new pod: its QoS class, as the kubelet computes it."""

from __future__ import annotations

from typing import Any

import pytest

from colocation_sandbox.server.admission import admit
from colocation_sandbox.server.resource_types import BUILTIN_TYPES

PODS = next(rt for rt in BUILTIN_TYPES if rt.group == "" and rt.resource == "pods")


def pod(*resources: dict[str, Any], init: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": f"c{i}", "image": "x", "resources": r}
                                           for i, r in enumerate(resources)]}
    if init is not None:
        spec["initContainers"] = [{"name": "init", "image": "x", "resources": init}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}, "spec": spec}


BATCH = {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"}
BOTH = {"cpu": "1", "memory": "1Gi"}


@pytest.mark.parametrize(("given", "qos"), [
    (pod({}), "BestEffort"),
    # Extended resources do not count: a batch pod is best-effort to the kubelet.
    (pod({"requests": BATCH, "limits": BATCH}), "BestEffort"),
    (pod({"requests": {"cpu": "0", "memory": "0"}}), "BestEffort"),  # zero does not count either
    (pod({"limits": BOTH}), "Guaranteed"),  # requests default to the limits
    (pod({"requests": BOTH, "limits": {**BOTH, **BATCH}}), "Guaranteed"),
    (pod({"requests": {"cpu": "1000m", "memory": "1Gi"}, "limits": BOTH}), "Guaranteed"),  # equal quantities
    (pod({"requests": {"cpu": "500m"}, "limits": BOTH}), "Burstable"),
    (pod({"limits": {"cpu": "1"}}), "Burstable"),  # no memory limit
    (pod({"limits": BOTH}, {}), "Burstable"),  # one container without limits
    (pod({"limits": BOTH}, init={"requests": {"cpu": "100m"}}), "Burstable"),
])
def test_a_new_pod_gets_the_qos_class_the_kubelet_computes(given: dict[str, Any], qos: str) -> None:
    admitted, _ = admit(PODS, given, "Strict", creating=True)
    assert admitted["status"]["qosClass"] == qos
