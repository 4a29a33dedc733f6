"""The leader cut off by a network partition, on the real control plane: fencing, proven by the audit log.

The test starts its own `colocation sandbox --apiserver kube` with two operator replicas (short
lease timings), simulated nodes whose reports keep the leader's controllers writing, and
kube-apiserver's audit log of writes (`--audit-log`). Each replica's pod has a ServiceAccount
token bound to it, so every write in the audit log names the pod that sent it
(user.extra authentication.kubernetes.io/pod-name). The test takes the leader pod's network
interface down inside the pod's network namespace (which this run's sandbox made) for longer
than the lease duration, then brings it back, and checks that:

- the standby holds the Lease and accepts a report within lease duration + 2 s of the cut;
- the old leader logged that it lost the lease before the new holder's acquireTime;
- kube-apiserver received no write from the old pod after that acquireTime (and some before the
  cut, so the count does attribute writes to the pod);
- after healing, the old pod's replica (exited with code 3, restarted by its pod) is a standby.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from colocation.apimachinery.clock import parse_micro_time
from tests.e2e.conftest import apiserver_kind
from tests.e2e.kube import TIME_FACTOR, Kube, start_sandbox_process
from tests.e2e.test_operator import NS, leader, make_node, put_direct, replicas, report
from tests.timing import eventually_async

LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 6, 4, 1  # lease duration - renew deadline > 0: the write budget
OPERATOR_ARGS = [f"--lease-duration={LEASE_DURATION}", f"--renew-deadline={RENEW_DEADLINE}",
                 f"--retry-period={RETRY_PERIOD}", "--evaluation-interval=1", "--shutdown-delay=0"]
POD_NAME = "authentication.kubernetes.io/pod-name"
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/colocation-operator"


@pytest.fixture(scope="module")
def partition_sandbox(request: pytest.FixtureRequest,
                      tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path]]:
    """(kubeconfig, state dir, audit log) of a real control plane this module starts."""
    if request.config.getoption("--kubeconfig") or apiserver_kind(request.config) != "kube":
        pytest.skip("the partition cuts a pod's network namespace: only with --apiserver kube")
    state = tmp_path_factory.mktemp("partition-sandbox")
    audit = state / "audit.log"
    args = ["--apiserver", "kube", "--operators", "2", "--nodes", "3", "--pods-per-node", "2",
            "--no-serve-custom-metrics", "--audit-log", str(audit), "--agent-arg=--report-interval=1",
            *(f"--operator-arg={arg}" for arg in OPERATOR_ARGS)]
    with start_sandbox_process(state, args) as kubeconfig:
        yield kubeconfig, state, audit


@pytest.fixture
async def admin(partition_sandbox: tuple[Path, Path, Path]) -> AsyncIterator[Kube]:
    async with Kube.from_kubeconfig(partition_sandbox[0]) as kube:
        yield kube


def pod_netns(state: Path, pod: str) -> str:
    """The network namespace the sandbox's kubelet made for `pod` (STATE_DIR/pods.json)."""
    pods = json.loads((state / "pods.json").read_text())
    return str(next(p["netns"] for p in pods if p["pod"] == f"{NS}/{pod}"))


def gateway(state: Path) -> str:
    """The API server's address: the pod network's gateway."""
    return str(json.loads((state / "controlplane.json").read_text())["server"]).split("//")[1].rsplit(":", 1)[0]


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=10)


def writes(audit: Path) -> list[dict[str, Any]]:
    """Every completed write in the audit log, with the pod that sent it ("" for other users)."""
    found = []
    for line in audit.read_text().splitlines():
        event = json.loads(line)
        if event.get("stage") != "ResponseComplete" or event.get("verb") not in WRITES:
            continue
        pods = (event.get("user", {}).get("extra") or {}).get(POD_NAME) or [""]
        found.append({"pod": pods[0], "verb": event["verb"], "uri": event.get("requestURI", ""),
                      "code": (event.get("responseStatus") or {}).get("code"),
                      "received": _parse(event["requestReceivedTimestamp"]),
                      "completed": _parse(event["stageTimestamp"])})
    return found


def _parse(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def lost_lease_at(log: Path) -> dt.datetime | None:
    """When the replica logged "lost the leader lease" (its JSON log's ts), or None."""
    for line in log.read_text(errors="replace").splitlines():
        if "lost the leader lease" in line and line.startswith("{"):
            return _parse(json.loads(line)["ts"])
    return None


async def lease(kube: Kube) -> dict[str, Any]:
    status, body = await kube.request("GET", LEASE_PATH)
    assert status == 200, body
    return dict(body)


async def test_a_cut_off_leader_stops_writing_before_the_new_leader_starts(
        admin: Kube, partition_sandbox: tuple[Path, Path, Path], record_property: Any) -> None:
    _, state, audit = partition_sandbox
    node, token = await make_node(admin)
    old, endpoint, context = await eventually_async(lambda: _leader_known(admin), timeout=30)
    standby = next(r["identity"] for r in replicas(state) if r["identity"] != old)
    old_log = Path(next(r["log"] for r in replicas(state) if r["identity"] == old))
    assert (await put_direct(endpoint, context, node, report(node), token))[0] == 200
    # The old leader's writes are attributed to its pod before the cut: Lease renewals at least,
    # and the controllers' patches of the simulated nodes.
    await eventually_async(lambda: _writes_by(audit, old, "noderesources"), timeout=30)
    netns = pod_netns(state, old)

    ip("-n", netns, "link", "set", "eth0", "down")
    cut_wall, cut = dt.datetime.now(tz=dt.UTC), time.monotonic()
    try:
        _, endpoint, context = await eventually_async(lambda: _accepting(admin, standby, node, token),
                                              timeout=LEASE_DURATION + 2, interval=0.05)
        accepted = time.monotonic() - cut
        # Cut for longer than the lease duration, whatever the new leader's speed.
        await eventually_async(lambda: _after(cut, LEASE_DURATION + 1), timeout=LEASE_DURATION + 2, interval=0.1)
        lost = await eventually_async(lambda: _lost(old_log), timeout=10)
    finally:
        ip("-n", netns, "link", "set", "eth0", "up")
        ip("-n", netns, "route", "replace", "default", "via", gateway(state))  # went with the link
    held = (await lease(admin))["spec"]
    assert held["holderIdentity"].rpartition("_")[0] == standby, held
    acquired = parse_micro_time(held["acquireTime"])
    assert acquired is not None

    # After healing, the old pod's replica is a standby that follows the new leader: its first
    # process exited with code 3 (lost the lease) and the pod restarted it.
    await eventually_async(lambda: _restarted_with(admin, old, 3), timeout=30)
    await eventually_async(lambda: _standby_following(old_log, standby), timeout=30)
    # Give anything the old pod still had queued time to land, as far as the test can tell: the
    # new leader's Lease renewals (one per retry period) keep arriving meanwhile. Not its status
    # writes: those happen only when what a status says changes.
    await eventually_async(lambda: _writes_by(audit, standby, "leases", after=acquired, count=3), timeout=30)

    log = writes(audit)
    by_old = [w for w in log if w["pod"] == old]
    before_cut = [w for w in by_old if w["completed"] < cut_wall]
    late = [w for w in by_old if w["received"] >= acquired or w["completed"] >= acquired]
    by_new_after = [w for w in log if w["pod"] == standby and w["received"] >= acquired]
    last_old = max(w["completed"] for w in by_old)
    stop_margin = (acquired - lost).total_seconds()
    figures = {"report_accepted_after_cut_seconds": round(accepted, 3),
               "old_lost_lease_before_new_acquire_seconds": round(stop_margin, 3),
               "old_last_write_before_new_acquire_seconds": round((acquired - last_old).total_seconds(), 3),
               "old_writes_before_cut": len(before_cut), "old_writes_after_new_acquire": len(late),
               "new_writes_after_acquire": len(by_new_after)}
    for name, value in figures.items():
        record_property(name, value)
    print("partition: " + ", ".join(f"{name}={value}" for name, value in figures.items()))
    assert accepted <= (LEASE_DURATION + 2) * TIME_FACTOR
    assert lost < acquired, f"the old leader lost the lease at {lost}, after the new one acquired it at {acquired}"
    # Its create of the Lease counts too: the cut may come before the first renewal.
    assert any(_on_leader_lease(w["uri"]) for w in before_cut), \
        f"no write of the leader Lease by the old pod before the cut: attribution broken: {before_cut}"
    assert by_new_after, "no write by the new leader's pod after it acquired: attribution broken"
    assert late == [], f"writes by the old leader's pod after the new holder acquired the lease: {late}"


async def _leader_known(kube: Kube) -> tuple[str, str, Any] | None:
    found = await leader(kube)
    return found if found[0] and found[1] else None


async def _writes_by(audit: Path, pod: str, resource: str, after: dt.datetime | None = None,
                     count: int = 1) -> bool:
    return sum(1 for w in writes(audit) if w["pod"] == pod and f"/{resource}/" in w["uri"]
               and (after is None or w["received"] >= after)) >= count


def _on_leader_lease(uri: str) -> bool:
    """A write of the leader Lease: its create (to the collection) or an update of it."""
    path = uri.split("?", 1)[0]
    return path in (LEASE_PATH, LEASE_PATH.rsplit("/", 1)[0])


async def _accepting(kube: Kube, standby: str, node: str, token: str) -> tuple[str, str, Any] | None:
    """The new leader's (pod, endpoint, context) once it holds the Lease and accepted a report."""
    found = await leader(kube)
    if found[0] != standby or not found[1]:
        return None
    try:
        status, _ = await put_direct(found[1], found[2], node, report(node, cpu="2"), token)
    except (aiohttp.ClientError, TimeoutError):
        return None
    return found if status == 200 else None


async def _after(start: float, seconds: float) -> bool:
    return time.monotonic() - start > seconds


async def _lost(log: Path) -> dt.datetime | None:
    return lost_lease_at(log)


async def _restarted_with(kube: Kube, pod: str, code: int) -> bool:
    status, body = await kube.request("GET", f"/api/v1/namespaces/{NS}/pods/{pod}")
    statuses = (body.get("status") or {}).get("containerStatuses") or [] if status == 200 else []
    return any(((s.get("lastState") or {}).get("terminated") or {}).get("exitCode") == code and s.get("ready")
               for s in statuses)


async def _standby_following(log: Path, leader_pod: str) -> bool:
    return follows(log, leader_pod)


def follows(log: Path, leader_pod: str) -> bool:
    """The restarted process observed the new leader (its log after the lost-lease line)."""
    text = log.read_text(errors="replace")
    after = text[text.find("lost the leader lease"):]
    return any('"leader observed"' in line and f'"leader":"{leader_pod}_' in line.replace(" ", "")
               for line in after.splitlines())
