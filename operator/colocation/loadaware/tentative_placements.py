"""Pods ranked first on a node that no watch has shown bound yet: counted on that node for a while.

The extender learns of a binding only when the pod watch shows it, so without this a burst of pods
would all rank the same coolest node first. A pod placed here counts on its node (its whole
estimate: `AssignedPod.assigned_at` is None) until `confirm` (the watch shows it bound, on any node,
or deleted) or until `hold_seconds` have passed on the injected monotonic clock (it was bound
elsewhere, or not at all). At most `max_entries` are kept: the oldest go first, counted in `evicted`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from colocation.loadaware.node_figures import AssignedPod


class TentativePlacements:
    """Not thread-safe: one event loop owns it."""

    def __init__(self, *, clock: Callable[[], float], hold_seconds: float, max_entries: int = 10_000) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._clock = clock
        self.hold_seconds = hold_seconds  # the configuration's tentativeHoldSeconds: set anew when it changes
        self._max = max_entries
        # uid -> (node, pod, expiry): insertion order is expiry order, as the hold is the same for all.
        self._entries: OrderedDict[str, tuple[str, AssignedPod, float]] = OrderedDict()
        self._by_node: dict[str, dict[str, AssignedPod]] = {}
        self.evicted = 0

    def place(self, uid: str, *, node: str, pod: AssignedPod) -> None:
        """The pod `uid` was ranked first on `node`; a later ranking of the same pod replaces this one."""
        if self.hold_seconds <= 0:
            return
        self._forget(uid)
        self._entries[uid] = (node, pod, self._clock() + self.hold_seconds)
        self._by_node.setdefault(node, {})[uid] = pod
        while len(self._entries) > self._max:
            self._forget(next(iter(self._entries)))
            self.evicted += 1

    def confirm(self, uid: str) -> None:
        """The watch shows the pod bound (or gone): its real assignment now counts instead."""
        self._forget(uid)

    def on_node(self, node: str) -> tuple[AssignedPod, ...]:
        """The pods placed on `node` and still held."""
        self._expire()
        return tuple(self._by_node.get(node, {}).values())

    def nodes(self) -> frozenset[str]:
        """The nodes with pods placed on them and still held."""
        self._expire()
        return frozenset(self._by_node)

    def __len__(self) -> int:
        self._expire()
        return len(self._entries)

    def _expire(self) -> None:
        now = self._clock()
        while self._entries:
            uid, (_, _, expiry) = next(iter(self._entries.items()))
            if expiry > now:
                return
            self._forget(uid)

    def _forget(self, uid: str) -> None:
        entry = self._entries.pop(uid, None)
        if entry is None:
            return
        on_node = self._by_node[entry[0]]
        del on_node[uid]
        if not on_node:
            del self._by_node[entry[0]]
