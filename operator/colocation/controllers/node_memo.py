"""What the reconciler keeps of each node between evaluations, so that an unchanged node costs little.

At 10,000 nodes evaluated every 5 s, most nodes are unchanged from one evaluation to the next.
What an evaluation derives from an object is kept with the object it came from and used again
while the object is the same one (`is`): the cluster state replaces an object on a change and
never edits it, so the same object gives the same answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from colocation.apimachinery.objects import Obj
from colocation.controllers.config import ParsedConfig, strategy_for_node
from colocation.controllers.nodewrite import NodeBatch, batch_on_node
from colocation.koordinator.slo_strategies import ColocationStrategy, with_node_overrides


@dataclasses.dataclass(slots=True, kw_only=True)
class NodeMemo:
    strategy_from: tuple[Any, ...] = ()  # (node labels, NodeResource spec, parsed configuration)
    strategy: ColocationStrategy | None = None
    node: Obj | None = None
    on_node: NodeBatch | None = None
    status_stored: Mapping[str, Any] | None = None  # a stored status found to need no write...
    status_inputs: tuple[Any, ...] = ()  # ...for evaluations with these `nodestatus.status_inputs`

    def strategy_of(self, labels: Mapping[str, str] | None, overrides: Mapping[str, Any] | None,
                    parsed: ParsedConfig) -> ColocationStrategy:
        """The node's colocation strategy: its rule's, with its NodeResource's overrides."""
        inputs = (labels, overrides, parsed)
        if self.strategy is None or any(old is not new for old, new in zip(self.strategy_from, inputs, strict=True)):
            self.strategy = with_node_overrides(strategy_for_node(parsed, labels or {}).colocation, overrides)
            self.strategy_from = inputs
        return self.strategy

    def batch_on(self, node: Obj) -> NodeBatch:
        """What the Node offers now (`batch_on_node`), read again only from a new copy of it."""
        if self.on_node is None or self.node is not node:
            self.node, self.on_node = node, batch_on_node(node)
        return self.on_node

    def status_settled(self, stored: Mapping[str, Any], inputs: tuple[Any, ...]) -> bool:
        """Whether this stored status was found to need no write for an evaluation with these inputs."""
        return self.status_stored is stored and self.status_inputs == inputs

    def settle_status(self, stored: Mapping[str, Any], inputs: tuple[Any, ...]) -> None:
        """Remember that this stored status needs no write for an evaluation with these inputs."""
        self.status_stored, self.status_inputs = stored, inputs
