"""What makes an evaluation compute a node's figures again: a change of the Node, its pods, its
report, the strategy, or the report ageing out; nothing else (the leader's CPU at 10,000 nodes)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from colocation.controllers import noderesource_controller
from colocation.controllers.cluster import slim_node
from colocation.controllers.configsource import ConfigSource
from colocation.koordinator.batch_formula import calculate_batch_resources
from tests.unit.controllers.test_reconciler import Harness, healthy_pass, node, pod

SHORT_DEGRADE = {"metadata": {"name": "colocation-config", "namespace": "colocation-system"},
                 "data": {"colocation-config": '{"nodeStrategies": [{"name": "short", "nodeSelector": '
                                               '{"matchLabels": {"pool": "short"}}, "degradeTimeMinutes": 1}]}'}}


@pytest.fixture
def computations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The nodes the batch formula ran for, in order."""
    ran: list[str] = []

    def counted(node: Any, *args: Any, **kwargs: Any) -> Any:
        ran.append(node["metadata"]["name"])
        return calculate_batch_resources(node, *args, **kwargs)

    monkeypatch.setattr(noderesource_controller, "calculate_batch_resources", counted)
    return ran


async def test_a_node_whose_inputs_did_not_change_is_not_computed_again(computations: list[str]) -> None:
    h = Harness(["n1", "n2"])
    await healthy_pass(h, "n1", "n2")
    computations.clear()
    for _ in range(12):  # two minutes of evaluations, the agents only renewing their Leases
        h.renew("n1", "n2")
        h.advance(10)
        await h.evaluate()
    assert computations == []
    # The kubelet rewrites its Node with nothing new in it: only the resourceVersion moves.
    h.state.node_event("MODIFIED", {**h.state.nodes["n1"], "metadata": {**h.state.nodes["n1"]["metadata"],
                                                                        "resourceVersion": "77"}})
    await h.evaluate()
    assert computations == []


async def test_a_new_report_a_pod_or_a_node_change_computes_that_node_again(computations: list[str]) -> None:
    h = Harness(["n1", "n2"])
    whole = node("n1")  # as the API server answers a write: with what the informer does not keep
    whole["metadata"]["managedFields"] = [{"manager": "kubelet"}]
    whole["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    h.state.node_event("MODIFIED", whole)
    await healthy_pass(h, "n1", "n2")
    computations.clear()
    h.report("n1", system_cpu="3")
    await h.evaluate()
    assert computations == ["n1"] and h.offered("n1")[0] == "3000"  # 2500m more system usage
    # The write's own watch event, through the informer's transform, is no change.
    h.state.node_event("MODIFIED", slim_node({**whole, "status": h.state.nodes["n1"]["status"]}))
    await h.evaluate()
    assert computations == ["n1"]

    await h.state.pod_event("ADDED", h.state.pod_kept(pod("web", "n2", "koord-prod")))
    await h.evaluate()
    assert computations == ["n1", "n2"]

    bigger = node("n1")
    bigger["status"]["capacity"]["cpu"] = bigger["status"]["allocatable"]["cpu"] = "12"
    h.state.node_event("MODIFIED", bigger)
    await h.evaluate()
    assert computations == ["n1", "n2", "n1"] and h.offered("n1")[0] == "4200"  # 40 % of 12 cpus kept back, 3 used


async def test_a_standby_computes_ahead_and_writes_nothing_so_its_first_evaluation_computes_only_what_changed(
        computations: list[str]) -> None:
    h = Harness(["n1", "n2", "n3"])
    for name in ("n1", "n2", "n3"):
        h.report(name)
    await h.reconciler.prepare()
    assert sorted(computations) == ["n1", "n2", "n3"] and h.api.calls == [] and h.api.events == []
    h.report("n2", system_cpu="2")
    await h.reconciler.prepare()
    assert computations[3:] == ["n2"]  # only the new report
    h.state.node_event("DELETED", h.state.nodes["n1"])
    for _ in range(5):  # past the startup grace, the agents renewing their Leases
        h.renew("n2", "n3")
        h.advance(10)
    h.report("n3", system_cpu="3")
    computations.clear()
    await h.evaluate()  # promoted: the first evaluation
    assert computations == ["n3"]  # the only report since the standby's last pass
    assert h.offered("n2")[0] == "4000" and h.offered("n3")[0] == "3000"  # 10 cpus x 60 % - system usage


async def test_a_report_ages_out_at_degrade_time_after_it_was_received_not_later() -> None:
    """The node stays healthy (its Lease is renewed, the cluster's degradeTimeMinutes is 15), but
    its own strategy ages its report out after one minute: its batch resources go at once."""
    h = Harness(["n1"])
    h.state.nodes["n1"]["metadata"]["labels"] = {"pool": "short"}
    h.reconciler.config = ConfigSource("colocation-system", h.api.event)
    assert await h.reconciler.config.update(SHORT_DEGRADE)
    await healthy_pass(h, "n1")
    assert h.offered("n1")[0] == "5500"
    for _ in range(6):  # 60 s after the report was received: it still counts
        h.renew("n1")
        h.advance(10)
        await h.evaluate()
        assert h.offered("n1")[0] == "5500"
    h.renew("n1")
    h.advance(1)
    await h.evaluate()
    assert h.offered("n1") == (None, None)
    assert h.condition("n1", "ColocationReady") == ("False", "MetricsOutdated")
    assert h.resource_status("n1")["healthy"] is True


async def test_the_status_shows_the_reports_update_time_as_the_agent_wrote_it() -> None:
    h = Harness(["n1"])
    await healthy_pass(h, "n1")
    h.renew("n1")
    h.report("n1", system_cpu="2", agent_clock_skew=-3600.0)  # a new figure: the status is written
    await h.evaluate()
    written = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(h.wall() - 3600.0))
    assert h.resource_status("n1")["metricUpdateTime"] == written
