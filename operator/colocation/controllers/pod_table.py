"""The leader's bound pods, by node and by namespace and name, at a few bytes per pod besides the pod.

Each node's pods are a list (a node has at most a few hundred: a look-up on it is a short scan),
and a pod is found anywhere by its name: the index's key is the pod's own name string, its value
the pod (or, for the few names several namespaces use, a tuple of them). A dict of pods per node
and a dict keyed by (namespace, name) tuples took some 200 bytes more per pod.
"""

from __future__ import annotations

from collections.abc import Iterator

from colocation.controllers.kept_pod import KeptPod


class PodTable:
    def __init__(self) -> None:
        self._by_node: dict[str, list[KeptPod]] = {}
        self._by_name: dict[str, KeptPod | tuple[KeptPod, ...]] = {}

    def __len__(self) -> int:
        return sum(len(pods) for pods in self._by_node.values())

    def nodes(self) -> Iterator[str]:
        """The nodes with at least one pod."""
        return iter(self._by_node)

    def on(self, node: str) -> list[KeptPod]:
        """The node's pods, in the order they came (a copy)."""
        return list(self._by_node.get(node, ()))

    def get(self, namespace: str, name: str) -> KeptPod | None:
        found = self._by_name.get(name)
        if isinstance(found, KeptPod):
            return found if (found.namespace or "") == namespace else None
        return next((pod for pod in found or () if (pod.namespace or "") == namespace), None)

    def put(self, pod: KeptPod) -> str | None:
        """Keep `pod` on its node, in place of the pod of its namespace and name; the node of the
        pod it replaced, if any. A pod bound to no node is not kept (and the one it replaces goes)."""
        before = self.get(pod.namespace or "", pod.name or "")
        if before is not None and pod.node_name and before.node_name == pod.node_name:
            pods = self._by_node[pod.node_name]
            pods[_position(pods, before)] = pod  # an update keeps its place
            self._index_without(before)
            self._index(pod)
            return before.node_name
        replaced = self.drop(pod.namespace or "", pod.name or "")
        if pod.node_name:
            self._by_node.setdefault(pod.node_name, []).append(pod)
            self._index(pod)
        return replaced

    def drop(self, namespace: str, name: str) -> str | None:
        """Forget the pod; the node it was on, if it was kept."""
        pod = self.get(namespace, name)
        if pod is None or pod.node_name is None:
            return None
        pods = self._by_node[pod.node_name]
        del pods[_position(pods, pod)]
        if not pods:
            del self._by_node[pod.node_name]
        self._index_without(pod)
        return pod.node_name

    def _index(self, pod: KeptPod) -> None:
        name = pod.name or ""  # the pod's own string: the key costs nothing more
        found = self._by_name.get(name)
        self._by_name[name] = pod if found is None else (*_as_tuple(found), pod)

    def _index_without(self, pod: KeptPod) -> None:
        name = pod.name or ""
        rest = tuple(other for other in _as_tuple(self._by_name[name]) if other is not pod)
        if not rest:
            del self._by_name[name]
        else:
            self._by_name[name] = rest[0] if len(rest) == 1 else rest


def _as_tuple(found: KeptPod | tuple[KeptPod, ...]) -> tuple[KeptPod, ...]:
    return found if isinstance(found, tuple) else (found,)


def _position(pods: list[KeptPod], pod: KeptPod) -> int:
    """Where `pod` itself is (not a pod equal to it)."""
    return next(index for index, other in enumerate(pods) if other is pod)
