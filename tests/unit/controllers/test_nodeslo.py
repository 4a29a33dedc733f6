"""NodeSLOs: rendered again only when a node's labels, the configuration or the stored NodeSLO changed."""

from __future__ import annotations

import copy
from typing import Any

from colocation.controllers.cluster import ClusterState, slim_node
from colocation.controllers.configsource import ConfigSource
from colocation.controllers.nodeslo import NodeSLOReconciler


class NodeSLOApi:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def create_cluster_object(self, plural: str, body: dict[str, Any]) -> tuple[int, Any]:
        self.calls.append(("create", body["metadata"]["name"]))
        return 201, {**body, "metadata": {**body["metadata"], "resourceVersion": str(len(self.calls))}}

    async def get_cluster_object(self, plural: str, name: str) -> tuple[int, Any]:
        return 404, None

    async def patch_nodeslo(self, name: str, patch: dict[str, Any]) -> tuple[int, Any]:
        self.calls.append(("patch", name))
        return 200, {"metadata": {"name": name, "resourceVersion": str(len(self.calls))}, **patch}

    async def event(self, *args: Any, **kwargs: Any) -> None:
        pass


def _node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}", "labels": dict(labels)},
            "status": {"capacity": {"cpu": "8"}, "allocatable": {"cpu": "7"}}}


async def test_a_node_is_rendered_again_only_when_its_labels_change() -> None:
    state, api = ClusterState(), NodeSLOApi()
    config = ConfigSource("colocation-system", api.event)
    config.loaded = True
    reconciler = NodeSLOReconciler(state, config, api)  # type: ignore[arg-type]
    state.node_event("ADDED", slim_node(_node("n1", pool="web")))
    assert reconciler.pending() == ["n1"]
    await reconciler.reconcile("n1")
    assert api.calls == [("create", "n1")] and reconciler.pending() == []
    # The kubelet's status update: a new copy of the Node, its labels equal.
    state.node_event("MODIFIED", slim_node(copy.deepcopy(_node("n1", pool="web"))))
    assert reconciler.pending() == []
    state.node_event("MODIFIED", slim_node(_node("n1", pool="batch")))
    assert reconciler.pending() == ["n1"]
    await reconciler.reconcile("n1")  # the same spec for either pool: nothing written, settled
    assert api.calls == [("create", "n1")] and reconciler.pending() == []
