"""A NodeResource status kept as deflated JSON reads as the status, and takes a fifth of its memory."""

from __future__ import annotations

import copy
import gc
import pickle
import tracemalloc
from typing import Any

import orjson

from colocation.controllers.cluster import ClusterState
from colocation.controllers.packed_status import PackedStatus, unpacked_status


def _status(index: int) -> dict[str, Any]:
    conditions = [{"type": kind, "status": "True", "reason": reason, "message": message,
                   "lastTransitionTime": f"2026-11-27T01:{index % 60:02d}:00Z"}
                  for kind, reason, message in (
                      ("AgentReady", "AgentReporting", "the agent reported within the grace period 40s"),
                      ("MetricsFresh", "MetricsFresh", "the last NodeMetric report is 4s old"),
                      ("ColocationReady", "Offered", f"offering batch cpu {index}m and memory 3Gi, mid cpu 0"),
                      ("Evicting", "NotDue", "no eviction: the node is healthy or within the eviction timeout"))]
    return {"batchCPU": 5500 + index, "batchMemory": 5905580032, "midCPU": 0, "midMemory": 0,
            "display": {"batchCPU": "5.50", "batchMemory": "5.5Gi", "midCPU": "0", "midMemory": "0"},
            "healthy": True, "message": f"offering batch cpu {index}m", "observedGeneration": 1,
            "metricUpdateTime": "2026-11-27T01:00:00Z", "leaseRenewTime": "2026-11-27T01:00:00Z",
            "lastNodeUpdateTime": "2026-11-27T01:00:05Z", "conditions": conditions}


def test_a_packed_status_reads_as_the_status_it_packs() -> None:
    status = _status(7)
    packed = PackedStatus(status)
    assert packed == status and dict(packed) == status and unpacked_status(packed) == status
    assert packed.get("batchCPU") == 5507 and packed.get("lastNodeUpdateTime") == "2026-11-27T01:00:05Z"
    assert packed["conditions"][3]["reason"] == "NotDue" and packed.get("missing", "none") == "none"
    assert bool(packed) and not PackedStatus({}) and PackedStatus({}).get("batchCPU") is None
    # What it hands out is a copy: changing it changes nothing kept.
    unpacked_status(packed)["conditions"].clear()
    assert packed == status
    for again in (copy.deepcopy(packed), pickle.loads(pickle.dumps(packed))):
        assert isinstance(again, PackedStatus) and again == status
    assert unpacked_status(None) == {}


def test_the_state_keeps_a_noderesource_status_packed_once() -> None:
    state = ClusterState()
    state.noderesource_event("ADDED", {"metadata": {"name": "n1", "resourceVersion": "3"}, "spec": {},
                                       "status": _status(1)})
    kept = state.noderesources["n1"]
    assert isinstance(kept["status"], PackedStatus) and kept["status"] == _status(1)
    state.noderesource_event("MODIFIED", kept)  # kept already: not packed again
    assert state.noderesources["n1"]["status"] is kept["status"]


def test_2000_statuses_take_a_fifth_of_their_parsed_memory() -> None:
    def held(make: Any) -> float:
        gc.collect()
        tracemalloc.start()
        try:
            kept = [make(orjson.loads(orjson.dumps(_status(index)))) for index in range(2000)]
            gc.collect()
            size = tracemalloc.get_traced_memory()[0] / len(kept)
        finally:
            tracemalloc.stop()
        return size

    parsed, packed = held(lambda status: status), held(PackedStatus)
    assert packed < parsed / 4, (parsed, packed)  # 3.5 KiB and 0.7 measured
