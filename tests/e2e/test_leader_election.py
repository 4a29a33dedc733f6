"""Leader election against a real API server: replicas in this process, the API server in another.

Durations are short (lease 2 s, renew deadline 1.5 s, retry period 0.2 s) so handovers happen in
test time; the measured times are asserted against what client-go's rules promise.
"""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from colocation.kube.client import api_client
from colocation.kube.leaderelection import LEADER_CA_ANNOTATION, LEADER_ENDPOINT_ANNOTATION, LeaderElector
from tests.e2e.kube import TIME_FACTOR, Kube, get

LEASE = "colocation-operator"
# The rules' timings, scaled with every deadline (COLOCATION_E2E_TIME_FACTOR), so a loaded
# machine's scheduling delays cannot cost a leader its lease: these tests check the rules, and
# the benchmarks the speed.
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = (2.0 * TIME_FACTOR, 1.5 * TIME_FACTOR, 0.2 * TIME_FACTOR)
MICRO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")
# Scheduling and request latency on a loaded CI machine, on top of what the rules promise.
SLACK = 0.5 * TIME_FACTOR


class Replica:
    """One candidate as the operator runs it: an elector task and the moments its callbacks fired."""

    def __init__(self, kubeconfig: Path, namespace: str, identity: str) -> None:
        self.kubeconfig, self.namespace, self.identity = kubeconfig, namespace, identity
        self.started = asyncio.Event()
        self.stopped = asyncio.Event()
        self.saw_leader: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)  # by identity
        self.started_at = self.stopped_at = 0.0
        self.elector: LeaderElector | None = None
        self.task: asyncio.Task[None] | None = None
        self.api: Any = None

    async def start(self) -> Replica:
        loop = asyncio.get_running_loop()

        def started() -> None:
            self.started_at = loop.time()
            self.started.set()

        def stopped() -> None:
            self.stopped_at = loop.time()
            self.stopped.set()

        self.api = await api_client(self.kubeconfig)
        self.elector = LeaderElector(
            self.api, self.namespace, LEASE, identity=self.identity, lease_duration=LEASE_DURATION,
            renew_deadline=RENEW_DEADLINE, retry_period=RETRY_PERIOD,
            annotations_provider=lambda: {LEADER_ENDPOINT_ANNOTATION: f"https://10.0.0.1:{8443}",
                                          LEADER_CA_ANNOTATION: f"Q0Et{self.identity}"},
            on_started_leading=started, on_stopped_leading=stopped,
            on_new_leader=lambda leader: self.saw_leader[leader].set())
        self.task = asyncio.create_task(self.elector.run())
        return self

    async def kill(self) -> None:
        """Stop campaigning without releasing: as if the process died."""
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)

    async def shut_down(self) -> bool:
        """Graceful shutdown: stop, then release."""
        await self.kill()
        assert self.elector is not None
        return await self.elector.release()

    async def close(self) -> None:
        if self.task is not None:
            await self.kill()
        if self.api is not None:
            await self.api.close()


@pytest.fixture
async def replicas(kubeconfig: Path, namespace: str) -> AsyncIterator[Callable[[str], Awaitable[Replica]]]:
    started: list[Replica] = []

    async def start(identity: str) -> Replica:
        replica = await Replica(kubeconfig, namespace, identity).start()
        started.append(replica)
        return replica

    yield start
    for replica in started:
        await replica.close()


async def first_leader(*candidates: Replica, timeout: float) -> Replica:
    waits = {asyncio.ensure_future(c.started.wait()): c for c in candidates}
    done, pending = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    assert done, f"nobody started leading within {timeout}s"
    return waits[next(iter(done))]


async def lease(kube: Kube, namespace: str) -> dict[str, Any]:
    return await get(kube, f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{LEASE}")


async def test_exactly_one_leads_and_a_release_hands_over_within_a_retry_period(
        replicas: Callable[[str], Awaitable[Replica]], kube: Kube, namespace: str) -> None:
    a, b = await replicas("replica-a"), await replicas("replica-b")
    leader = await first_leader(a, b, timeout=10 * TIME_FACTOR)
    standby = b if leader is a else a
    assert leader.elector is not None and standby.elector is not None

    # Through several renewals, the standby never leads and the Lease names the leader.
    renewals: set[str] = set()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10 * TIME_FACTOR
    while len(renewals) < 4:
        assert loop.time() < deadline, f"only {len(renewals)} renewals seen"
        stored = await lease(kube, namespace)
        spec = stored["spec"]
        assert not standby.elector.is_leader and leader.elector.is_leader
        assert spec["holderIdentity"] == leader.identity
        renewals.add(spec["renewTime"])
        await asyncio.sleep(RETRY_PERIOD / 2)  # polling interval of the observation, not synchronisation
    assert all(MICRO_TIME.fullmatch(spec[key]) for key in ("renewTime", "acquireTime")), spec
    assert stored["metadata"]["annotations"] == {LEADER_ENDPOINT_ANNOTATION: "https://10.0.0.1:8443",
                                                 LEADER_CA_ANNOTATION: f"Q0Et{leader.identity}"}
    assert standby.elector.leader_identity == leader.identity

    released_at = loop.time()
    assert await leader.shut_down() is True
    await asyncio.wait_for(standby.started.wait(), timeout=5 * TIME_FACTOR)
    handover = standby.started_at - released_at
    assert handover < RETRY_PERIOD + SLACK, f"handover took {handover:.2f}s"
    spec = (await lease(kube, namespace))["spec"]
    assert spec["holderIdentity"] == standby.identity
    assert spec["leaseTransitions"] == 1  # created at 0; a release keeps the count; acquiring adds one
    assert not leader.stopped.is_set()  # a graceful release is not a lost lease


async def test_a_killed_leader_is_replaced_after_the_lease_expires(
        replicas: Callable[[str], Awaitable[Replica]], kube: Kube, namespace: str) -> None:
    a = await replicas("replica-a")
    await asyncio.wait_for(a.started.wait(), timeout=10 * TIME_FACTOR)
    b = await replicas("replica-b")
    await asyncio.wait_for(b.saw_leader[a.identity].wait(), timeout=5 * TIME_FACTOR)

    loop = asyncio.get_running_loop()
    killed_at = loop.time()
    await a.kill()
    await asyncio.wait_for(b.started.wait(), timeout=LEASE_DURATION + 5 * TIME_FACTOR)
    takeover = b.started_at - killed_at
    # The last renewal was at most a retry period before the kill, and b saw it at most a retry
    # period after; b waits out the lease from when it saw it, and notices at its next attempt.
    assert LEASE_DURATION - RETRY_PERIOD <= takeover <= LEASE_DURATION + 2 * RETRY_PERIOD + SLACK, takeover
    assert (await lease(kube, namespace))["spec"]["holderIdentity"] == b.identity


@pytest.mark.sandbox_only(reason="the failing Lease writes come from the sandbox's fault injection")
async def test_a_leader_that_cannot_renew_stops_within_the_renew_deadline(
        replicas: Callable[[str], Awaitable[Replica]], faults: Kube, namespace: str) -> None:
    a = await replicas("replica-a")
    await asyncio.wait_for(a.started.wait(), timeout=10 * TIME_FACTOR)
    loop = asyncio.get_running_loop()
    status, body = await faults.request("POST", "/sandbox/faults", {
        "path": f"/namespaces/{namespace}/leases/", "methods": ["PUT"], "code": 500, "count": 100})
    assert status == 201, body
    failing_since = loop.time()
    assert a.task is not None
    await asyncio.wait_for(a.task, timeout=RENEW_DEADLINE + 5 * TIME_FACTOR)  # run() ends: leadership lost
    assert a.stopped.is_set() and a.elector is not None and not a.elector.is_leader
    stopped_after = a.stopped_at - failing_since
    assert stopped_after <= RENEW_DEADLINE + SLACK, f"kept leading {stopped_after:.2f}s after renewals failed"
