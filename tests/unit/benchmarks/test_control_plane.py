"""The control-plane benchmark: a tiny smoke run (report shape only), the rows, and the Lease encoding."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmarks import control_plane, cp_plots, cp_protobuf, cp_report, machine
from benchmarks.control_plane import AGENT_USER, OPERATOR_USER, ControlPlaneConfig, ControlPlaneReport
from colocation_sandbox.server import protobuf


def test_object_meta_encodes_as_the_sandbox_decodes_kubernetes_protobuf() -> None:
    meta = {"name": "node-1", "namespace": "colocation-node-lease", "uid": "u-1",
            "creationTimestamp": "2026-11-22T03:00:00Z", "labels": {"a": "b"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "node-1", "uid": "n-1"}],
            "managedFields": [{"manager": "agent", "operation": "Update", "apiVersion": "coordination.k8s.io/v1",
                               "time": "2026-11-22T03:00:00Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:spec": {"f:holderIdentity": {}}}}]}
    # A ConfigMap is metadata = 1 too: the sandbox's decoder reads our ObjectMeta bytes back.
    type_meta = cp_protobuf.bytes_field(1, "v1") + cp_protobuf.bytes_field(2, "ConfigMap")
    raw = cp_protobuf.MAGIC + cp_protobuf.bytes_field(1, type_meta) + cp_protobuf.bytes_field(
        2, cp_protobuf.bytes_field(1, cp_protobuf.object_meta(meta)))
    assert protobuf.decode_object(raw)["metadata"] == meta


def test_a_lease_is_stored_smaller_than_its_json() -> None:
    lease = {"metadata": {"name": "node-1", "namespace": "colocation-node-lease", "uid": "u-1"},
             "spec": {"holderIdentity": "node-1", "leaseDurationSeconds": 40,
                      "renewTime": "2026-11-22T03:00:00.123456Z"}}
    stored = cp_protobuf.lease(lease)
    assert stored.startswith(b"k8s\x00")
    assert b"coordination.k8s.io/v1" in stored and b"Lease" in stored
    # renewTime is a MicroTime: {seconds = 1, nanos = 2}; 123456 µs are 123456000 ns.
    assert cp_protobuf.varint_field(2, 123_456_000) in stored
    assert len(stored) < len(str(lease))


def test_rows_are_per_node_per_minute_and_split_by_path() -> None:
    report = ControlPlaneReport(ControlPlaneConfig(nodes=10), window_seconds=120.0)
    items = [
        {"user": AGENT_USER, "verb": "update", "group": "coordination.k8s.io", "resource": "leases",
         "requests": 120, "requestBytes": 120_000, "responseBytes": 60_000},
        {"user": OPERATOR_USER, "verb": "patch", "group": "", "resource": "nodes/status",
         "requests": 20, "requestBytes": 2_000, "responseBytes": 2_000},
        {"user": AGENT_USER, "verb": "update", "group": "slo.koordinator.sh", "resource": "nodemetrics/status",
         "requests": 20, "requestBytes": 80_000, "responseBytes": 80_000},
        {"user": "sandbox-admin", "verb": "list", "group": "", "resource": "nodes",
         "requests": 5, "requestBytes": 500, "responseBytes": 50_000},
    ]
    report.rows = control_plane._rows(report, items)
    rows = {(r.path, r.client, r.resource): r for r in report.rows}
    assert set(rows) == {("this design", "agents", "coordination.k8s.io/leases"),
                         ("this design", "operator", "nodes/status"),
                         ("NodeMetric CRD", "koordlet (load client)", "slo.koordinator.sh/nodemetrics/status")}
    # 120 renewals by 10 nodes in 2 minutes: 6 per node per minute (one every 10 s).
    renewals = rows[("this design", "agents", "coordination.k8s.io/leases")]
    assert (renewals.requests, renewals.request_bytes, renewals.response_bytes) == (6.0, 6000.0, 3000.0)
    assert report.total("NodeMetric CRD").requests == 1.0


@pytest.mark.timed_pipeline
async def test_a_tiny_control_plane_run_counts_both_paths(tmp_path: Path) -> None:
    etcd = "run" if shutil.which("etcd") else "skip"
    report = await control_plane.run(ControlPlaneConfig(nodes=3, pods_per_node=2, window=6.0, etcd=etcd,
                                                        state_dir=tmp_path))
    paths = {row.path for row in report.rows}
    assert paths == {"this design", "NodeMetric CRD"}
    assert report.window_seconds >= 6.0
    assert report.total("this design").requests > 0
    assert report.lease_renewals > 0 and report.lease_object_bytes > 0
    if etcd == "run":
        assert report.etcd_ours is not None and report.etcd_ours.puts >= report.lease_renewals
        assert report.etcd_crd is not None and report.etcd_crd.puts == report.reports
    section = cp_report.render_control_plane(report, machine.describe(), "python -m benchmarks.run")
    assert section.startswith("## Control-plane cost: 3 nodes x 2 pods")
    assert report.problems == []  # the agents' self-check passed, so figures are stated
    assert sorted(name.split(", pid")[0] for name in report.agent_checks) == [
        "real agent (1 nodes", "simulated agent (2 nodes"]
    assert "found no problem" in section
    assert "| this design | total |" in section
    cp_plots.control_plane(report, tmp_path / "cp.png")
    assert (tmp_path / "cp.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("missing", ["etcd"])
def test_without_etcd_the_benchmark_names_the_apt_command(monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    from benchmarks import cp_etcd

    monkeypatch.setattr(shutil, "which", lambda name: None if name == missing else "/bin/true")
    with pytest.raises(cp_etcd.EtcdMissing, match="apt-get install -y etcd-server"):
        cp_etcd.binary()
