"""The Node directory: which Nodes exist, and word of every Node that went away."""

from __future__ import annotations

from colocation.kube.nodes import NodeDirectory


def node(name: str, **labels: str) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": labels}}


async def test_a_deleted_node_is_reported_whether_the_watch_or_a_relist_says_so() -> None:
    deleted: list[str] = []
    directory = NodeDirectory(on_deleted=deleted.append)
    await directory.on_sync([node("a"), node("b"), node("c", pool="batch")], "1")
    assert directory.synced and deleted == [] and directory.labels("c") == {"pool": "batch"}
    await directory.on_event("DELETED", node("a"))
    assert deleted == ["a"] and "a" not in directory
    # "b" was deleted during a gap of the watch: the next list no longer has it.
    await directory.on_sync([node("c"), node("d")], "9")
    assert deleted == ["a", "b"] and len(directory) == 2 and "d" in directory
