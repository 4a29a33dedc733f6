"""The leader's pods by node and by namespace and name."""

from __future__ import annotations

from colocation.controllers.cluster import slim_pod
from colocation.controllers.kept_pod import KeptPod
from colocation.controllers.pod_table import PodTable


def _pod(namespace: str, name: str, node: str | None, uid: str = "") -> KeptPod:
    return slim_pod({"metadata": {"namespace": namespace, "name": name, "uid": uid or f"uid-{namespace}-{name}"},
                     "spec": {"nodeName": node} if node else {}, "status": {"phase": "Running"}})


def test_pods_are_found_by_node_and_by_namespace_and_name() -> None:
    table = PodTable()
    for namespace, name, node in (("a", "web-0", "n1"), ("b", "web-0", "n2"), ("c", "web-0", "n1"),
                                  ("a", "db-0", "n2")):
        assert table.put(_pod(namespace, name, node)) is None
    assert [(pod.namespace, pod.name) for pod in table.on("n1")] == [("a", "web-0"), ("c", "web-0")]
    assert [(pod.namespace, pod.name) for pod in table.on("n2")] == [("b", "web-0"), ("a", "db-0")]
    # One name in three namespaces: each is its own pod.
    for namespace, node in (("a", "n1"), ("b", "n2"), ("c", "n1")):
        found = table.get(namespace, "web-0")
        assert found is not None and found.node_name == node and found["metadata"]["uid"] == f"uid-{namespace}-web-0"
    assert table.get("d", "web-0") is None and table.get("a", "web-1") is None and table.on("n3") == []
    assert sorted(table.nodes()) == ["n1", "n2"] and len(table) == 4


def test_an_update_replaces_the_pod_in_its_place_and_a_delete_forgets_it() -> None:
    table = PodTable()
    for name in ("p1", "p2", "p3"):
        table.put(_pod("a", name, "n1"))
    table.put(_pod("b", "p2", "n1"))
    assert table.put(_pod("a", "p2", "n1", uid="new")) == "n1"
    assert [(pod.namespace, pod.name, pod.uid) for pod in table.on("n1")] == [
        ("a", "p1", "uid-a-p1"), ("a", "p2", "new"), ("a", "p3", "uid-a-p3"), ("b", "p2", "uid-b-p2")]
    assert table.drop("a", "p2") == "n1" and table.get("a", "p2") is None
    assert table.get("b", "p2") is not None  # the other namespace's pod of that name stays
    assert table.drop("a", "p2") is None  # forgotten already
    for namespace, name in (("a", "p1"), ("a", "p3"), ("b", "p2")):
        assert table.drop(namespace, name) == "n1"
    assert list(table.nodes()) == [] and len(table) == 0 and table.get("b", "p2") is None


def test_a_pod_moved_or_unbound_leaves_its_node() -> None:
    table = PodTable()
    table.put(_pod("a", "p", "n1"))
    # A pod of the same name on another node (deleted and created again, the delete unseen).
    assert table.put(_pod("a", "p", "n2")) == "n1"
    assert table.on("n1") == [] and [pod.node_name for pod in table.on("n2")] == ["n2"]
    assert table.put(_pod("a", "p", None)) == "n2"  # no node: not kept
    assert table.get("a", "p") is None and list(table.nodes()) == []


def test_what_a_node_returns_is_a_copy() -> None:
    table = PodTable()
    table.put(_pod("a", "p", "n1"))
    table.on("n1").clear()
    assert len(table.on("n1")) == 1
