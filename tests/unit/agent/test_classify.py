"""Priority and QoS classification (docs/architecture.md, Koordinator's model) and Kubernetes' request and QoS rules."""

from __future__ import annotations

from typing import Any

import pytest

from colocation.agent.classify import classify
from colocation.apimachinery.pods import pod_requests, qos_class

MI = 2**20


def container(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
              **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": "c", "image": "busybox", "resources": resources, **extra}


def make_pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (), labels: dict[str, str] | None = None,
             priority: int | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": list(containers), **spec}
    if init:
        body["initContainers"] = list(init)
    if priority is not None:
        body["priority"] = priority
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "shop", "uid": "u-1", "labels": labels or {}},
            "spec": body}


GUARANTEED = container(limits={"cpu": "1", "memory": "1Gi"})
BURSTABLE = container(requests={"cpu": "100m"})
BEST_EFFORT = container()


@pytest.mark.parametrize(("pod", "priority", "qos"), [
    # The priority-class label wins over everything.
    (make_pod(BEST_EFFORT, labels={"koordinator.sh/priority-class": "koord-mid"}, priority=9500),
     "koord-mid", "BE"),
    # An unknown label value says nothing; spec.priority decides.
    (make_pod(BEST_EFFORT, labels={"koordinator.sh/priority-class": "gold"}, priority=9500), "koord-prod", "BE"),
    # spec.priority bands, edges included.
    (make_pod(BEST_EFFORT, priority=9000), "koord-prod", "BE"),
    (make_pod(BEST_EFFORT, priority=9999), "koord-prod", "BE"),
    (make_pod(GUARANTEED, priority=7000), "koord-mid", "LSR"),
    (make_pod(GUARANTEED, priority=5999), "koord-batch", "LSR"),
    (make_pod(GUARANTEED, priority=3000), "koord-free", "LSR"),
    # Outside every band (system-node-critical, 0, between bands): from the QoS class.
    (make_pod(GUARANTEED, priority=2000001000), "koord-prod", "LSR"),
    (make_pod(BEST_EFFORT, priority=0), "koord-batch", "BE"),
    (make_pod(BEST_EFFORT, priority=8500), "koord-batch", "BE"),
    (make_pod(BURSTABLE, priority=2999), "koord-prod", "LS"),
    # The QoS label wins over the Kubernetes QoS class and drives the priority.
    (make_pod(GUARANTEED, labels={"koordinator.sh/qosClass": "BE"}), "koord-batch", "BE"),
    (make_pod(BEST_EFFORT, labels={"koordinator.sh/qosClass": "LSE"}), "koord-prod", "LSE"),
    (make_pod(BEST_EFFORT, labels={"koordinator.sh/qosClass": "SYSTEM"}), "koord-prod", "SYSTEM"),
    (make_pod(BEST_EFFORT, labels={"koordinator.sh/qosClass": "LS"}), "koord-prod", "LS"),
    (make_pod(BURSTABLE, labels={"koordinator.sh/qosClass": "bogus"}), "koord-prod", "LS"),
    # Kubernetes QoS: Guaranteed → LSR, Burstable → LS, BestEffort → BE.
    (make_pod(GUARANTEED), "koord-prod", "LSR"),
    (make_pod(BURSTABLE), "koord-prod", "LS"),
    (make_pod(BEST_EFFORT), "koord-batch", "BE"),
    # A bool is not a priority.
    (make_pod(BEST_EFFORT, priority=True), "koord-batch", "BE"),
], ids=lambda value: None if isinstance(value, dict) else str(value))
def test_classification_table(pod: dict[str, Any], priority: str, qos: str) -> None:
    info = classify(pod)
    assert (info.priority, info.qos) == (priority, qos)


def test_classify_carries_identity_requests_and_hp() -> None:
    pod = make_pod(GUARANTEED, nodeName="node-1")
    pod["status"] = {"phase": "Running"}
    info = classify(pod)
    assert (info.uid, info.namespace, info.name, info.node_name, info.phase) == ("u-1", "shop", "web-0", "node-1",
                                                                                  "Running")
    assert (info.cpu_request_millis, info.memory_request_bytes, info.kube_qos) == (1000, 1024 * MI, "Guaranteed")
    assert info.high_priority
    assert not classify(make_pod(BEST_EFFORT)).high_priority


def test_status_qos_class_is_authoritative() -> None:
    pod = make_pod(BEST_EFFORT)
    pod["status"] = {"qosClass": "Burstable"}
    assert classify(pod).qos == "LS"


@pytest.mark.parametrize(("pod", "expected"), [
    (make_pod(container({"cpu": "100m", "memory": "64Mi"}), container({"cpu": "0.2", "memory": "128Mi"})),
     (300, 192 * MI)),
    # Limits stand in for unset requests (API server defaulting).
    (make_pod(container(limits={"cpu": "2", "memory": "1Gi"})), (2000, 1024 * MI)),
    (make_pod(container({"cpu": "250m"}, {"cpu": "1", "memory": "512Mi"})), (250, 512 * MI)),
    # A bigger init container sets the floor: max(sum(containers), max(init)).
    (make_pod(container({"cpu": "100m", "memory": "1Gi"}), init=(container({"cpu": "500m", "memory": "64Mi"}),)),
     (500, 1024 * MI)),
    # Sidecars (restartPolicy Always) keep running: containers 200m + sidecar 100m = 300m, but the
    # init container after the sidecar needs 300m + 100m = 400m while it runs.
    (make_pod(container({"cpu": "200m"}),
              init=(container({"cpu": "100m"}, restartPolicy="Always"), container({"cpu": "300m"}))),
     (400, 0)),
    (make_pod(container({"cpu": "200m"}),
              init=(container({"cpu": "300m"}), container({"cpu": "100m"}, restartPolicy="Always"))),
     (300, 0)),
    # Overhead (RuntimeClass) is added.
    (make_pod(container({"cpu": "1", "memory": "1Gi"}), overhead={"cpu": "250m", "memory": "120Mi"}),
     (1250, 1144 * MI)),
    # Pod-level requests replace the container sum for the resources they name.
    (make_pod(container({"cpu": "1", "memory": "1Gi"}), resources={"requests": {"cpu": "3"}}), (3000, 1024 * MI)),
    # Extended resources (batch-cpu) are not cpu or memory; garbage counts as nothing.
    (make_pod(container({"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "4Gi"})), (0, 0)),
    (make_pod(container({"cpu": "lots", "memory": "1Ki"})), (0, 1024)),
    ({"metadata": {}}, (0, 0)),
])
def test_pod_requests_follow_kubernetes(pod: dict[str, Any], expected: tuple[int, int]) -> None:
    assert pod_requests(pod) == expected


@pytest.mark.parametrize(("pod", "expected"), [
    (make_pod(BEST_EFFORT), "BestEffort"),
    (make_pod(container({"cpu": "0", "memory": "0"})), "BestEffort"),  # zero quantities are no request
    (make_pod(container({"kubernetes.io/batch-cpu": "1000"}, {"kubernetes.io/batch-cpu": "1000"})), "BestEffort"),
    (make_pod(container({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})), "Guaranteed"),
    (make_pod(container(limits={"cpu": "500m", "memory": "256Mi"})), "Guaranteed"),  # requests default to limits
    (make_pod(container({"cpu": "1000m", "memory": "1024Mi"}, {"cpu": "1", "memory": "1Gi"})), "Guaranteed"),
    (make_pod(container(limits={"cpu": "1"})), "Burstable"),  # no memory limit
    (make_pod(container({"cpu": "500m", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})), "Burstable"),
    (make_pod(GUARANTEED, BEST_EFFORT), "Burstable"),  # every container must have limits
    (make_pod(GUARANTEED, init=(BURSTABLE,)), "Burstable"),  # init containers count too
    (make_pod(BEST_EFFORT, resources={"limits": {"cpu": "1", "memory": "1Gi"}}), "Guaranteed"),  # pod-level
])
def test_qos_class_follows_kubernetes(pod: dict[str, Any], expected: str) -> None:
    assert qos_class(pod) == expected
