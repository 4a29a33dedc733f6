"""A kept pod reads as the dict it replaces, cannot be changed, and is smaller."""

from __future__ import annotations

import copy
import gc
import pickle
import tracemalloc

import pytest

from colocation.apimachinery.pods import KEPT_REQUESTS
from colocation.controllers.cluster import ClusterState, slim_pod
from colocation.controllers.eviction import MIRROR_POD_ANNOTATION
from colocation.controllers.kept_pod import KeptPod, KeptPodMetadata, KeptPodSpec
from colocation.koordinator.classes import KEPT_CLASSES


def _pod(name: str, node: str = "n1", **metadata: object) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}", **metadata},
            "spec": {"nodeName": node, "priority": 9000,
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}}]},
            "status": {"phase": "Running"}}


def test_a_kept_pod_reads_compares_and_converts_as_the_dict_it_stands_for() -> None:
    kept = slim_pod(_pod("web", deletionTimestamp="2026-11-27T00:00:00Z"))
    as_dict = {"metadata": {"name": "web", "namespace": "team", "uid": "uid-web", "labels": {},
                            "deletionTimestamp": "2026-11-27T00:00:00Z"},
               "spec": {"nodeName": "n1", "priority": 9000},
               "status": {"phase": "Running", "qosClass": "Burstable"},
               KEPT_REQUESTS: (250, 2**30), KEPT_CLASSES: ("koord-prod", "LS")}
    assert kept == as_dict and as_dict == kept
    assert {key: dict(value) if isinstance(value, KeptPodSpec | KeptPodMetadata) else value
            for key, value in kept.items()} == as_dict
    assert kept["metadata"]["uid"] == "uid-web" and kept.get("spec", {}).get("nodeName") == "n1"
    # A field the pod lacks is absent, as it was from the dict: no annotations, no mirror marker.
    metadata = kept["metadata"]
    assert "annotations" not in metadata and metadata.get("annotations") is None
    assert metadata.get("annotations", "default") == "default"
    with pytest.raises(KeyError):
        metadata["annotations"]
    assert metadata.get("managedFields") is None and "managedFields" not in metadata  # never a slot
    assert len(metadata) == 5 and list(metadata) == ["deletionTimestamp", "labels", "name", "namespace", "uid"]


def test_a_kept_pod_cannot_be_changed_and_survives_copy_and_pickle() -> None:
    kept = slim_pod(_pod("web"))
    with pytest.raises(AttributeError):
        kept["metadata"].name = "other"
    with pytest.raises(TypeError):
        kept["metadata"]["name"] = "other"
    with pytest.raises(AttributeError):
        kept.shape = kept.shape
    for again in (copy.deepcopy(kept), copy.copy(kept), pickle.loads(pickle.dumps(kept))):
        assert again == kept and isinstance(again, KeptPod) and isinstance(again["spec"], KeptPodSpec)
    assert slim_pod(kept) is kept  # kept already: kept as it is


async def test_the_leader_keeps_a_pod_in_about_250_bytes() -> None:
    """30 pods a node at 10,000 nodes: 822 bytes a pod as three dicts was 24 KiB a node, most of
    the RSS target's 40 KiB; as three slotted objects about 500; as one with a shared shape, and
    indexed by its own name, about 250 (the name and uid strings included)."""
    gc.collect()
    tracemalloc.start()
    try:
        state = ClusterState()
        before = tracemalloc.get_traced_memory()[0]
        pods = [state.pod_kept(_pod(f"web-{index:05d}-abcde", node=f"node-{index // 30:04d}"))
                for index in range(3000)]
        await state.pods_synced_with(pods, "1")
        del pods
        gc.collect()
        per_pod = (tracemalloc.get_traced_memory()[0] - before) / 3000
    finally:
        tracemalloc.stop()
    assert per_pod < 300, per_pod  # 247 measured


def test_replicas_share_one_shape_and_what_is_a_pods_own_is_not_shared() -> None:
    state = ClusterState()
    one, two = (state.pod_kept(_pod(f"web-{index}")) for index in range(2))
    assert one.shape is two.shape and one.requests is two.requests
    # A deletion time, or a static pod's marker, is one pod's: never kept for other pods.
    kept_for_sharing = len(state.shared_parts)
    terminating = [state.pod_kept(_pod(f"web-{index}", deletionTimestamp=f"2026-11-27T00:00:{index:02d}Z"))
                   for index in range(50)]
    static = [state.pod_kept(_pod(f"proxy-{index}", annotations={MIRROR_POD_ANNOTATION: f"hash-{index}"}))
              for index in range(50)]
    assert len({id(pod.shape) for pod in terminating + static}) == 100
    assert len(state.shared_parts) == kept_for_sharing
    assert terminating[7]["metadata"]["deletionTimestamp"] == "2026-11-27T00:00:07Z"
    assert static[7]["metadata"]["annotations"] == {MIRROR_POD_ANNOTATION: "hash-7"}
    assert state.pod_kept(_pod("web-9")).shape is one.shape  # still shared
