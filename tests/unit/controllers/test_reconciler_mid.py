"""Mid-tier resources through one evaluation: written to the Node with batch resources, shown in the
NodeResource, removed with them (colocation disabled, an unhealthy node)."""

from __future__ import annotations

import time
from typing import Any

import orjson

from colocation.controllers.configsource import ConfigSource
from colocation.nodemetrics.report_schema import validate_report
from tests.unit.controllers.test_reconciler import Harness, healthy_pass

MID_CPU, MID_MEMORY = "kubernetes.io/mid-cpu", "kubernetes.io/mid-memory"
GI = 2**30


def report(h: Harness, name: str, reclaimable: tuple[str, str] | None) -> None:
    """A report of 500m / 1Gi used, prod pods predicted to leave `reclaimable` of their requests."""
    usage = {"resources": {"cpu": "500m", "memory": "1Gi"}}
    status: dict[str, Any] = {"updateTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(h.wall())),
                              "nodeMetric": {"nodeUsage": usage, "systemUsage": usage}, "podsMetric": []}
    if reclaimable is not None:
        status["prodReclaimableMetric"] = {"resource": {"resources": {"cpu": reclaimable[0],
                                                                      "memory": reclaimable[1]}}}
    raw = orjson.dumps({"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric",
                        "metadata": {"name": name}, "status": status})
    h.store.put(validate_report(raw, name), {})


def mid_on_node(h: Harness, name: str) -> tuple[str | None, str | None]:
    status = h.state.nodes[name]["status"]
    found = (status["allocatable"].get(MID_CPU), status["allocatable"].get(MID_MEMORY))
    assert found == (status["capacity"].get(MID_CPU), status["capacity"].get(MID_MEMORY))
    return found


async def offering_mid(reclaimable: tuple[str, str] = ("2", "1Gi")) -> Harness:
    h = Harness(["n1"])
    await healthy_pass(h, "n1")
    h.renew("n1")
    report(h, "n1", reclaimable)
    await h.evaluate()
    return h


async def test_a_nodes_prod_reclaimable_becomes_its_mid_resources_with_the_batch_ones() -> None:
    h = await offering_mid()
    # min(2 cpus reclaimable, 9.5 unused) + 0 % of the unallocated: 2000m and 1Gi.
    assert mid_on_node(h, "n1") == ("2000", str(GI))
    assert h.offered("n1") == ("5500", "5905580032")
    status = h.resource_status("n1")
    assert (status["midCPU"], status["midMemory"]) == (2000, GI)
    assert (status["display"]["midCPU"], status["display"]["midMemory"]) == ("2.00", "1.00Gi")
    assert status["message"].endswith("mid cpu 2 and memory 1Gi")


async def test_a_node_without_a_prediction_offers_mid_resources_of_zero() -> None:
    h = Harness(["n1"])
    await healthy_pass(h, "n1")  # its reports carry no prodReclaimableMetric
    assert mid_on_node(h, "n1") == ("0", "0")
    assert h.condition("n1", "ColocationReady") == ("True", "BatchResourcesOffered")


async def test_mid_moves_reach_the_node_only_beyond_the_threshold() -> None:
    h = await offering_mid()
    h.api.calls.clear()
    h.advance(10)
    h.renew("n1")
    report(h, "n1", ("2100m", "1Gi"))  # 5 %: within resourceDiffThreshold
    await h.evaluate()
    assert h.api.calls == [] and mid_on_node(h, "n1") == ("2000", str(GI))
    report(h, "n1", ("3", "1Gi"))  # 50 %: written, and the status follows
    await h.evaluate()
    assert h.api.calls == [("patch node", "n1"), ("patch noderesource status", "n1")]
    assert mid_on_node(h, "n1") == ("3000", str(GI)) and h.resource_status("n1")["midCPU"] == 3000


async def test_disabling_colocation_removes_mid_resources_too() -> None:
    h = await offering_mid()
    config_map = {"metadata": {"name": "colocation-config", "namespace": "colocation-system"},
                  "data": {"colocation-config": '{"clusterStrategy": {"enable": false}}'}}
    h.reconciler.config = ConfigSource("colocation-system", h.api.event)
    assert await h.reconciler.config.update(config_map)
    h.renew("n1")
    await h.evaluate()
    assert mid_on_node(h, "n1") == (None, None) and h.offered("n1") == (None, None)
    assert "midCPU" not in h.resource_status("n1") and "display" not in h.resource_status("n1")


async def test_the_unallocated_share_follows_the_configmap() -> None:
    h = await offering_mid()
    config_map = {"metadata": {"name": "colocation-config", "namespace": "colocation-system"},
                  "data": {"colocation-config": '{"clusterStrategy": {"midUnallocatedPercent": 50,'
                                                ' "midCPUThresholdPercent": 30}}'}}
    h.reconciler.config = ConfigSource("colocation-system", h.api.event)
    assert await h.reconciler.config.update(config_map)
    h.renew("n1")
    await h.evaluate()
    # cpu: 2000m + 50 % of (10 cpus - 500m system) = 6750m, capped at 30 % of 10 cpus: 3000m.
    # memory: 1Gi + 50 % of (10Gi - 1Gi) = 5.5Gi, under the 100 % cap.
    assert mid_on_node(h, "n1") == ("3000", str(GI + 9 * GI // 2))


async def test_an_unhealthy_node_loses_mid_resources_with_the_batch_ones() -> None:
    h = await offering_mid()
    for _ in range(5):  # silent for longer than the grace period (40 s)
        h.advance(10)
    await h.evaluate()
    assert mid_on_node(h, "n1") == (None, None) and h.offered("n1") == (None, None)
    assert "midCPU" not in h.resource_status("n1")
