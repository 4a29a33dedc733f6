"""The launcher's kubelet with fake processes: restartPolicy, the status of a pod that is done, and
Secret volumes."""

from __future__ import annotations

import asyncio
import base64
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from colocation.apimachinery.objects import Obj
from colocation_sandbox.launcher.controlplane import kubelet as kubelet_module
from colocation_sandbox.launcher.controlplane import pki
from colocation_sandbox.launcher.controlplane.kubelet import NodeKubelet
from tests.timing import eventually_async

WAIT_SECONDS = 10.0


class FakeProcess:
    """A container's process that exits when the test says so (or on a signal, as -signal)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._exited = asyncio.Event()

    async def wait(self) -> int:
        await self._exited.wait()
        assert self.returncode is not None
        return self.returncode

    def exit(self, code: int) -> None:
        self.returncode = code
        self._exited.set()

    def send_signal(self, number: int) -> None:
        self.exit(-number)

    def kill(self) -> None:
        self.exit(-signal.SIGKILL)


class FakeApi:
    """The API server as the kubelet calls it: records status patches and deletions."""

    def __init__(self) -> None:
        self.statuses: list[Obj] = []
        self.deleted: list[str] = []
        self.changed = asyncio.Condition()
        self.silent = False  # stalled: every call times out, as a SIGSTOPped kube-apiserver's
        self.tokens = 0
        self.secrets: dict[str, Obj] = {}  # by path; GET of any other one answers 404
        self.secret_reads = 0

    async def request(self, method: str, path: str, body: Any = None, **_options: Any) -> tuple[int, Any]:
        if self.silent:
            async with self.changed:
                self.changed.notify_all()  # a call was made: whoever waits looks again
            raise TimeoutError
        if method == "GET" and "/secrets/" in path:
            self.secret_reads += 1
            async with self.changed:
                self.changed.notify_all()
            return (200, self.secrets[path]) if path in self.secrets else (404, {})
        if method == "PATCH" and path.endswith("/status"):
            self.statuses.append(body["status"])
        elif method == "DELETE":
            self.deleted.append(path)
        async with self.changed:
            self.changed.notify_all()
        return 200, {}

    async def must(self, method: str, path: str, body: Any = None, **_options: Any) -> Any:
        assert path.endswith("/token"), f"unexpected call {method} {path}"
        if self.silent:
            raise TimeoutError
        self.tokens += 1
        return {"status": {"token": "a-token"}}

    async def close(self) -> None:
        pass

    async def status_where(self, test: Callable[[Obj], bool]) -> Obj:
        """The first status written (so far or from now on) that passes `test`."""
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: any(test(s) for s in self.statuses)),
                                   WAIT_SECONDS)
        return next(s for s in self.statuses if test(s))


class FakeNetwork:
    gateway = "10.244.0.1"

    def __init__(self) -> None:
        self.pods: set[str] = set()

    def add_pod(self, key: str) -> tuple[str, str]:
        self.pods.add(key)
        return "netns-test", "10.244.0.2"

    def remove_pod(self, key: str) -> None:
        self.pods.discard(key)


class Node:
    """A NodeKubelet on fakes; `processes` are the container's processes in start order."""

    def __init__(self, kubelet: NodeKubelet, api: FakeApi, network: FakeNetwork) -> None:
        self.kubelet, self.api, self.network = kubelet, api, network
        self.processes: list[FakeProcess] = []
        self.commands: list[list[str]] = []

    async def started(self, count: int) -> FakeProcess:
        """The container's `count`-th process, once started."""
        async with self.api.changed:
            await asyncio.wait_for(self.api.changed.wait_for(lambda: len(self.processes) >= count), WAIT_SECONDS)
        return self.processes[count - 1]


@pytest.fixture
async def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Node]:
    network, api = FakeNetwork(), FakeApi()
    kubelet = NodeKubelet(name="node-a", server="https://10.244.0.1:6443",
                          pki_=pki.create(tmp_path / "pki", apiserver_ips=("10.244.0.1",)),
                          network=network, state_dir=tmp_path,  # type: ignore[arg-type]  # the fake network
                          capacity=(2000, 2**30), labels={}, extra_args={}, max_restart_period=0.01)
    await kubelet.client.close()
    kubelet.client = api  # type: ignore[assignment]
    fake = Node(kubelet, api, network)

    async def start_logged(command: list[str], *_args: Any, **_options: Any) -> FakeProcess:
        fake.commands.append(command)
        fake.processes.append(FakeProcess(1000 + len(fake.processes)))
        return fake.processes[-1]

    monkeypatch.setattr(kubelet_module, "start_logged", start_logged)
    yield fake
    await kubelet.stop()


def job_pod(restart_policy: str | None) -> Obj:
    spec: Obj = {"containers": [{"name": "cleanup", "image": "colocation:dev", "command": ["colocation"],
                                 "args": ["cleanup", "--timeout", "240"]}],
                 "serviceAccountName": "colocation-cleanup"}
    if restart_policy is not None:
        spec["restartPolicy"] = restart_policy
    return {"metadata": {"name": "colocation-cleanup-x7k2p", "namespace": "default", "uid": "u-1"},
            "spec": spec, "status": {"phase": "Pending"}}


def phase_is(phase: str) -> Callable[[Obj], bool]:
    return lambda status: bool(status["phase"] == phase)


def container_of(status: Obj) -> Obj:
    (container,) = status["containerStatuses"]
    return dict(container)


def conditions_of(status: Obj) -> dict[str, tuple[str, str | None]]:
    return {c["type"]: (c["status"], c.get("reason")) for c in status["conditions"]}


async def test_a_container_that_exits_0_under_never_leaves_the_pod_succeeded_and_kept(node: Node) -> None:
    pod = job_pod("Never")
    await node.kubelet._on_event("ADDED", pod)
    (await node.started(1)).exit(0)
    status = await node.api.status_where(phase_is("Succeeded"))
    container = container_of(status)
    terminated = container["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
    assert terminated["startedAt"] and terminated["finishedAt"]
    assert (container["ready"], container["started"], container["restartCount"]) == (False, False, 0)
    assert "lastState" not in container
    assert conditions_of(status) == {"PodScheduled": ("True", None), "Initialized": ("True", "PodCompleted"),
                                     "ContainersReady": ("False", "PodCompleted"), "Ready": ("False", "PodCompleted")}
    assert status["podIP"] == "10.244.0.2"
    # Never started again; the pod stays (the Job controller reads it) but its network is gone.
    assert len(node.processes) == 1 and node.api.deleted == []
    assert "default/colocation-cleanup-x7k2p" in node.kubelet.pods and node.network.pods == set()


async def test_a_container_that_fails_under_never_leaves_the_pod_failed(node: Node) -> None:
    await node.kubelet._on_event("ADDED", job_pod("Never"))
    (await node.started(1)).exit(3)
    status = await node.api.status_where(phase_is("Failed"))
    terminated = container_of(status)["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (3, "Error")
    assert conditions_of(status)["Ready"] == ("False", "PodFailed")
    assert len(node.processes) == 1


async def test_on_failure_restarts_after_a_failure_and_finishes_after_a_success(node: Node) -> None:
    await node.kubelet._on_event("ADDED", job_pod("OnFailure"))
    (await node.started(1)).kill()
    (await node.started(2)).exit(0)
    status = await node.api.status_where(phase_is("Succeeded"))
    container = container_of(status)
    assert container["restartCount"] == 1
    assert container["lastState"]["terminated"]["exitCode"] == 128 + signal.SIGKILL  # as a runtime reports it
    assert container["state"]["terminated"]["exitCode"] == 0
    assert len(node.processes) == 2
    assert all(s["phase"] == "Running" for s in node.api.statuses[:-1])  # terminal only at the end


@pytest.mark.parametrize("restart_policy", ["Always", None])
async def test_always_and_the_default_restart_a_container_whatever_its_exit(node: Node,
                                                                            restart_policy: str | None) -> None:
    await node.kubelet._on_event("ADDED", job_pod(restart_policy))
    (await node.started(1)).exit(0)
    (await node.started(2)).exit(1)
    third = await node.started(3)
    status = await node.api.status_where(lambda s: container_of(s)["restartCount"] == 2 and "running" in
                                         container_of(s)["state"])
    assert status["phase"] == "Running" and conditions_of(status)["Ready"] == ("True", None)
    last = container_of(status)["lastState"]["terminated"]
    assert (last["exitCode"], last["reason"]) == (1, "Error")
    assert third.returncode is None and node.network.pods == {"default/colocation-cleanup-x7k2p"}


async def test_a_finished_pod_is_removed_once_deleted(node: Node) -> None:
    pod = job_pod("Never")
    await node.kubelet._on_event("ADDED", pod)
    (await node.started(1)).exit(0)
    await node.api.status_where(phase_is("Succeeded"))
    pod["metadata"]["deletionTimestamp"] = "2026-11-26T17:00:00Z"
    await node.kubelet._on_event("MODIFIED", pod)
    async with node.api.changed:
        await asyncio.wait_for(node.api.changed.wait_for(lambda: bool(node.api.deleted)), WAIT_SECONDS)
    assert node.api.deleted == ["/api/v1/namespaces/default/pods/colocation-cleanup-x7k2p"]
    assert node.kubelet.pods == {}


async def test_a_container_restarts_while_kube_apiserver_does_not_answer(node: Node) -> None:
    await node.kubelet._on_event("ADDED", job_pod("Always"))
    first = await node.started(1)
    node.api.silent = True  # its status cannot be written, nor a new token asked for
    first.exit(3)
    second = await node.started(2)  # restarted all the same, with the token it had
    assert second.returncode is None and node.api.tokens == 1


async def test_a_ready_condition_someone_else_changed_is_put_back(node: Node) -> None:
    pod = job_pod("Always")
    await node.kubelet._on_event("ADDED", pod)
    await node.started(1)
    await node.api.status_where(lambda s: conditions_of(s)["Ready"] == ("True", None))
    written = len(node.api.statuses)
    # The node lifecycle controller marked the pod not ready while the node was not heard.
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
    await node.kubelet._on_event("MODIFIED", pod)
    async with node.api.changed:
        await asyncio.wait_for(node.api.changed.wait_for(lambda: len(node.api.statuses) > written), WAIT_SECONDS)
    status = node.api.statuses[-1]
    assert conditions_of(status)["Ready"] == ("True", None)
    pod["status"] = status  # as the API server now shows it: nothing more to put back
    await node.kubelet._on_event("MODIFIED", pod)
    assert len(node.api.statuses) == written + 1


def test_each_probe_runs_on_its_own_period() -> None:
    # The operator's probes: readiness every 2 s, liveness every 10 s (manifests/operator.yaml).
    periods = {"readiness": 2.0, "liveness": 10.0}
    due = dict(periods)
    rounds = [kubelet_module.next_probes(due, periods) for _ in range(6)]
    assert rounds == [(2.0, {"readiness"}), (4.0, {"readiness"}), (6.0, {"readiness"}), (8.0, {"readiness"}),
                      (10.0, {"readiness", "liveness"}), (12.0, {"readiness"})]


def serving_secret(cert: str) -> Obj:
    return {"data": {"tls.crt": base64.b64encode(cert.encode()).decode(), "tls.key": "a2V5"}}


async def test_a_secret_volume_is_written_before_the_container_starts_and_again_when_it_changes(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kubelet_module, "SECRET_REFRESH_SECONDS", 0.05)
    pod = job_pod("Always")
    pod["spec"]["containers"][0]["args"] += ["--tls-cert-file=/etc/serving/tls.crt"]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "serving", "mountPath": "/etc/serving"}]
    pod["spec"]["volumes"] = [{"name": "serving", "secret": {"secretName": "serving"}}]
    await node.kubelet._on_event("ADDED", pod)
    # No Secret yet: nothing starts (the kubelet's ContainerCreating); it is looked for again.
    async with node.api.changed:
        await asyncio.wait_for(node.api.changed.wait_for(lambda: node.api.secret_reads >= 2), WAIT_SECONDS)
    assert node.processes == []
    node.api.secrets["/api/v1/namespaces/default/secrets/serving"] = serving_secret("cert-1")
    await node.started(1)
    (flag,) = [arg for arg in node.commands[0] if arg.startswith("--tls-cert-file=")]
    cert_file = Path(flag.split("=", 1)[1])
    assert await asyncio.to_thread(cert_file.read_text) == "cert-1" and cert_file.parent != Path("/etc/serving")
    node.api.secrets["/api/v1/namespaces/default/secrets/serving"] = serving_secret("cert-2")
    await eventually_async(lambda: cert_file.read_text() == "cert-2")
    assert len(node.processes) == 1  # renewed in place: the container goes on
