"""The in-process measurement of the leader's evaluation exercises what the leader does."""

from __future__ import annotations

import math
from typing import Any

import pytest

from benchmarks import leader_pods


def test_the_reconciler_measurement_evaluates_every_node_and_writes_its_batch_resources(
        monkeypatch: pytest.MonkeyPatch) -> None:
    written: set[str] = set()
    statuses: set[str] = set()
    patch_node = leader_pods._LocalWriter.patch_node_status
    patch_status = leader_pods._LocalWriter.patch_noderesource_status

    async def node_written(self: leader_pods._LocalWriter, name: str, patch: dict[str, Any]) -> tuple[int, Any]:
        assert patch["status"]["allocatable"]["kubernetes.io/batch-cpu"] is not None  # offered, not removed
        written.add(name)
        return await patch_node(self, name, patch)

    async def status_written(self: leader_pods._LocalWriter, name: str, patch: dict[str, Any]) -> tuple[int, Any]:
        statuses.add(name)
        return await patch_status(self, name, patch)

    monkeypatch.setattr(leader_pods._LocalWriter, "patch_node_status", node_written)
    monkeypatch.setattr(leader_pods._LocalWriter, "patch_noderesource_status", status_written)
    micros = leader_pods.reconciler_micros(3, 5, rounds=2)
    assert math.isfinite(micros) and micros > 0
    assert written == statuses == {"node-00000", "node-00001", "node-00002"}
