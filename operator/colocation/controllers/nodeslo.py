"""NodeSLO: one per Node, its spec rendered from the cluster configuration.

Created when a node appears (name = node name, ownerReference to the Node, so the garbage
collector removes it with the Node), patched only when the rendered spec differs from the stored
one, deleted when the node is seen going. A node is rendered again only when its labels, the
configuration or its stored NodeSLO changed since its last rendering.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from colocation.controllers.cluster import ClusterState
from colocation.controllers.config import strategy_for_node
from colocation.controllers.configsource import ConfigSource
from colocation.controllers.writers import GROUP, NODESLOS, VERSION, KubeWriter, merge_patch, owner_reference
from colocation.koordinator.slo_strategies import render_nodeslo_spec

log = logging.getLogger(__name__)

KIND = "NodeSLO"


def nodeslo_body(node: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    name = (node.get("metadata") or {}).get("name")
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
            "metadata": {"name": name, "ownerReferences": [owner_reference(node)],
                         "labels": {"app.kubernetes.io/managed-by": "colocation-operator"}},
            "spec": dict(spec)}


class NodeSLOReconciler:
    def __init__(self, state: ClusterState, config: ConfigSource, writer: KubeWriter) -> None:
        self.state = state
        self.config = config
        self.writer = writer
        self._rendered: dict[str, tuple[Any, ...]] = {}  # what each node was last reconciled from

    def _fingerprint(self, name: str, node: Mapping[str, Any]) -> tuple[Any, ...]:
        # The Node's own labels mapping (never changed: a changed Node is a new object), compared
        # by content: no copy of every node's labels is kept, none sorted at every evaluation.
        labels = (node.get("metadata") or {}).get("labels") or {}
        stored = self.state.nodeslos.get(name)
        stored_version = (stored or {}).get("metadata", {}).get("resourceVersion")
        return labels, self.config.generation, stored_version

    def pending(self) -> list[str]:
        """Nodes whose NodeSLO may be out of date."""
        return [name for name, node in self.state.nodes.items()
                if self._rendered.get(name) != self._fingerprint(name, node)]

    async def reconcile(self, name: str) -> None:
        node = self.state.nodes.get(name)
        if node is None:
            return
        fingerprint = self._fingerprint(name, node)
        labels = (node.get("metadata") or {}).get("labels") or {}
        desired = render_nodeslo_spec(strategy_for_node(self.config.parsed, labels))
        stored = self.state.nodeslos.get(name)
        if stored is None:
            status, body = await self.writer.create_cluster_object(NODESLOS, nodeslo_body(node, desired))
            if status == 409:  # it exists and our watch has not shown it yet: compare with it
                status, body = await self.writer.get_cluster_object(NODESLOS, name)
                if status == 200:
                    stored = body
            elif status == 201:
                log.info("NodeSLO created", extra={"node": name})
            if stored is None:
                self._settle(name, status, body)
                return
        if stored.get("spec") != desired:
            status, body = await self.writer.patch_nodeslo(name, {"spec": merge_patch(stored.get("spec") or {},
                                                                                     desired)})
            if status == 200:
                log.info("NodeSLO updated", extra={"node": name})
            self._settle(name, status, body)
            return
        self._rendered[name] = fingerprint

    def _settle(self, name: str, status: int, body: Any) -> None:
        if 200 <= status < 300 and isinstance(body, dict):
            self.state.nodeslo_event("MODIFIED", body)
            self._rendered[name] = self._fingerprint(name, self.state.nodes.get(name) or {})
        else:
            self._rendered.pop(name, None)  # try again on the next evaluation
            log.warning("NodeSLO write failed", extra={"node": name, "status": status,
                                                       "error": body.get("message") if isinstance(body, dict)
                                                       else body})

    async def remove(self, name: str) -> None:
        """The node went: its NodeSLO goes too (the garbage collector would, later)."""
        self._rendered.pop(name, None)
        status, _ = await self.writer.delete_cluster_object(NODESLOS, name)  # 404: the collector was first
        if status in (200, 202, 404):
            self.state.nodeslos.pop(name, None)
