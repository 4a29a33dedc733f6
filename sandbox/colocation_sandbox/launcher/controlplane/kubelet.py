"""The launcher's node: this machine, with a small kubelet that runs the pods bound to it as processes.

It registers the node (with the machine's capacity) and renews its Lease. Each pod bound to it
gets a network namespace and address (`podnetwork`) and a token bound to the pod in a
kubeconfig; pods of image `colocation:*` run their container's command as a process. Readiness
probes set the pod's Ready condition; containers restart as the pod's restartPolicy says, with
CrashLoopBackOff; deletion stops them within the grace period. It authenticates as
`system:node:NAME`, so the Node authorizer and NodeRestriction apply to it. A Secret volume is
written under STATE_DIR/volumes before the container starts (which waits for the Secret to exist),
and written again when the Secret changes (read every SECRET_REFRESH_SECONDS). With `--image`, each
container runs in the image's root filesystem instead, its volumes mounted where the pod says
(`image_root`).

What it does, and why not kwok: docs/development.md#the-real-control-plane
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import signal
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from colocation.apimachinery.clock import format_micro_time, format_time
from colocation.apimachinery.objects import Obj
from colocation.apimachinery.quantity import format_bytes, format_millis
from colocation.kube.backoff import Backoff
from colocation.kube.informer import Informer, InformerOptions
from colocation_sandbox.launcher.child_processes import (
    STOP_AT_ONCE,
    TOKEN_SECONDS,
    start_logged,
    terminate,
    write_state,
)
from colocation_sandbox.launcher.controlplane import pki
from colocation_sandbox.launcher.controlplane.container_spec import (
    container_args,
    container_command,
    container_environment,
    container_mounts,
    container_port,
    empty_dir_volumes,
    secret_files,
    secret_volumes,
    write_secret_volume,
)
from colocation_sandbox.launcher.controlplane.image_root import CLUSTER_CA, KUBECONFIG, ImageRoot, Mount, pod_user
from colocation_sandbox.launcher.controlplane.pod_status import (
    ContainerReport,
    container_exit_code,
    pod_status,
    restarts_after_exit,
    terminated_state,
)
from colocation_sandbox.launcher.controlplane.podnetwork import PodNetwork
from colocation_sandbox.launcher.controlplane.restclient import RestClient
from colocation_sandbox.launcher.crash_loop_backoff import CrashLoopBackOff
from colocation_sandbox.launcher.kubeconfig_files import kubeconfig_document, write_kubeconfig

log = logging.getLogger(__name__)

LEASE_DURATION_SECONDS = 40
LEASE_RENEW_SECONDS = 10.0
OUR_IMAGE = re.compile(r"^(?:.*/)?colocation(?::.*)?$")
PROBE_TIMEOUT_FLOOR = 1.0
# How often a Secret volume's Secret is read again (the kubelet's sync period and cache take up to
# about a minute; shorter here, so that tests of a renewal wait less).
SECRET_REFRESH_SECONDS = 10.0


def _now() -> str:
    return format_time(time.time())


def next_probes(due: dict[str, float], periods: Mapping[str, float]) -> tuple[float, set[str]]:
    """When the next probes run and which ones: the earliest of `due` (each probe's next time),
    which then moves on by that probe's own period."""
    at = min(due.values())
    now_due = {name for name, when in due.items() if when <= at}
    for name in now_due:
        due[name] = at + periods[name]
    return at, now_due


@dataclass(kw_only=True)
class RunningPod:
    """One pod of this node: its address, its process and what its probes last said."""

    key: str
    uid: str
    netns: str
    address: str
    spec: Obj
    log_path: Path
    process: asyncio.subprocess.Process | None = None
    ready: bool = False
    restarts: int = 0
    started_at: str = ""
    last_exit: Obj | None = None
    finished: Obj | None = None  # the terminated state of a container its restartPolicy does not restart
    kubeconfig: Path | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    stopping: bool = False
    crash_loop: CrashLoopBackOff = field(default_factory=CrashLoopBackOff)
    volume_dirs: dict[str, str] = field(default_factory=dict)  # Secret volumes: name -> directory written

    @property
    def container(self) -> Obj:
        return dict(self.spec["containers"][0])

    @property
    def role(self) -> str:
        return str((self.container.get("args") or [""])[0])

    @property
    def runs_process(self) -> bool:
        container = self.container
        command = container.get("command") or [""]
        return bool(OUR_IMAGE.match(container.get("image", ""))) and command[0] == "colocation"


class NodeKubelet:
    def __init__(self, *, name: str, server: str, pki_: pki.Pki, network: PodNetwork, state_dir: Path,
                 capacity: tuple[int, int], labels: dict[str, str], extra_args: dict[str, tuple[str, ...]],
                 run_agents: bool = True, on_state: Callable[[], None] | None = None,
                 max_restart_period: float = 300.0, image_root: ImageRoot | None = None) -> None:
        self.name = name
        self.image_root = image_root  # --image: containers run in the image's root filesystem (image_root)
        self.max_restart_period = max_restart_period
        self.server = server
        self.pki = pki_
        self.network = network
        self.state_dir = state_dir
        self.capacity = capacity
        self.labels = labels
        self.extra_args = extra_args  # per subcommand ("operator", "agent"): appended to the container's args
        self.run_agents = run_agents  # False for `--nodes 0`: the node hosts the operators only
        self.on_state = on_state  # called after the state files change
        self.agent_processes: list[Obj] = []  # this node's running agent, in agents.json's shape
        cert = pki_.client(f"node-{name}", f"system:node:{name}", ("system:nodes",))
        self.client = RestClient(server, pki_.file("ca.crt"), cert, pool=16)
        self.pods: dict[str, RunningPod] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._probe_session: aiohttp.ClientSession | None = None
        self._informer: Informer[Obj] | None = None

    @property
    def state_file(self) -> Path:
        return self.state_dir / "pods.json"

    # ---- the Node and its Lease ---------------------------------------------------------------------

    def _node(self) -> Obj:
        cpu, memory = self.capacity
        resources = {"cpu": format_millis(cpu), "memory": format_bytes(memory), "pods": "110"}
        allocatable = {**resources, "memory": format_bytes(max(memory - 100 * 2**20, 0))}
        now = _now()
        return {
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": self.name, "labels": self.labels},
            "spec": {},
            "status": {"capacity": resources, "allocatable": allocatable,
                       "addresses": [{"type": "InternalIP", "address": self.network.gateway},
                                     {"type": "Hostname", "address": self.name}],
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "colocation launcher node", "lastHeartbeatTime": now,
                                       "lastTransitionTime": now}],
                       "nodeInfo": {"architecture": self.labels.get("kubernetes.io/arch", "amd64"),
                                    "operatingSystem": "linux", "kubeletVersion": "colocation-launcher"}},
        }

    async def register(self) -> None:
        await self.client.must("POST", "/api/v1/nodes", self._node(), ok=(201, 409))
        await self._renew_lease()

    async def _renew_lease(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.name}"
        spec = {"holderIdentity": self.name, "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                "renewTime": format_micro_time(time.time())}
        status, lease = await self.client.request("GET", path)
        if status == 404:
            await self.client.must("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": "kube-node-lease"}, "spec": spec}, ok=(201, 409))
        elif status == 200:
            lease["spec"] = {**lease.get("spec", {}), **spec}
            await self.client.request("PUT", path, lease)

    async def _lease_loop(self) -> None:
        backoff = Backoff(initial=1.0, maximum=LEASE_RENEW_SECONDS, jitter=0.5)
        while True:
            try:
                await self._renew_lease()
                backoff.reset()
                await asyncio.sleep(LEASE_RENEW_SECONDS)  # the renew period
            except Exception as error:
                log.warning("node lease renewal failed", extra={"node": self.name, "error": repr(error)})
                await asyncio.sleep(backoff.next_delay())  # backoff before the retry

    # ---- pods ---------------------------------------------------------------------------------------

    async def start(self) -> None:
        self._probe_session = aiohttp.ClientSession()
        await self.register()
        self._informer = Informer(self.client.transport(), "/api/v1/pods", on_sync=self._on_sync,
                                  on_event=self._on_event, name=f"pods on {self.name}",
                                  options=InformerOptions(field_selector=f"spec.nodeName={self.name}"))
        self._tasks = [asyncio.create_task(self._lease_loop()), asyncio.create_task(self._informer.run())]

    async def _on_sync(self, items: list[Obj], _rv: str) -> None:
        # A relist: pods deleted while the watch was down are gone from it; stop what runs for them.
        listed = {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in items}
        for key, running in list(self.pods.items()):
            if key not in listed and not running.stopping:
                await self._stop_pod(running, grace=0)
        for pod in items:
            await self._on_event("ADDED", pod)

    async def _on_event(self, kind: str, pod: Obj) -> None:
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        running = self.pods.get(key)
        if running is not None and running.uid != meta["uid"]:
            await self._stop_pod(running, grace=0)
            running = None
        if kind == "DELETED" or meta.get("deletionTimestamp"):
            if running is not None and not running.stopping:
                grace = float(pod.get("spec", {}).get("terminationGracePeriodSeconds", 30))
                self._spawn_task(self._terminate(running, grace, pod))
            elif running is None and kind != "DELETED":
                await self._finalize(pod)
            return
        if running is None and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            await self._admit(pod, key)
        elif running is not None and running.finished is None and _shown_ready(pod) != _ready_now(running):
            # Someone else changed it: the node lifecycle controller marks a node's pods not ready
            # while the node is not heard (a stalled kube-apiserver). The kubelet's status manager
            # puts its own view back; so does this.
            self._spawn_task(self._write_status(running, pod))

    def _spawn_task(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    async def _admit(self, pod: Obj, key: str) -> None:
        logs = self.state_dir / "logs" / "pods"
        running = RunningPod(key=key, uid=pod["metadata"]["uid"], netns="", address="", spec=pod["spec"],
                             log_path=logs / f"{key.replace('/', '_')}.log",
                             crash_loop=CrashLoopBackOff(maximum=self.max_restart_period))
        if not self.run_agents and running.role == "agent":
            return  # left Pending: with `--nodes 0` (or --no-agents) the launcher runs no agent
        running.netns, running.address = self.network.add_pod(key)
        logs.mkdir(parents=True, exist_ok=True)
        self.pods[key] = running
        if running.runs_process and secret_volumes(running.spec):
            # Not started before its Secrets exist (the kubelet's ContainerCreating): in a task, not
            # holding up the informer's other pods.
            running.tasks.append(asyncio.create_task(self._mount_and_start(running, pod)))
            return
        if running.runs_process:
            try:
                await self._start_container(running, pod)
            except Exception:
                # E.g. the token refused (403) while the Node authorizer has not yet seen the pod
                # bound here: forgotten, the pod is admitted again by the informer's relist.
                del self.pods[key]
                raise
            running.tasks.append(asyncio.create_task(self._supervise(running, pod)))
            if running.container.get("readinessProbe") or running.container.get("livenessProbe"):
                running.tasks.append(asyncio.create_task(self._probe_loop(running, pod)))
        else:
            running.ready = True
            running.started_at = _now()
        await self._write_status(running, pod)
        self._write_state()

    async def _mount_and_start(self, running: RunningPod, pod: Obj) -> None:
        backoff = Backoff(initial=min(0.5, SECRET_REFRESH_SECONDS), maximum=SECRET_REFRESH_SECONDS, jitter=0.2)
        while True:
            try:
                if await self._write_secret_volumes(running):
                    await self._start_container(running, pod)
                    break
                log.info("waiting for the pod's Secrets", extra={"pod": running.key})
            except (aiohttp.ClientError, TimeoutError, RuntimeError, OSError) as error:
                log.warning("pod not started yet", extra={"pod": running.key, "error": repr(error)})
            await asyncio.sleep(backoff.next_delay())  # retried with backoff, as the kubelet retries a mount
        running.tasks.append(asyncio.create_task(self._supervise(running, pod)))
        running.tasks.append(asyncio.create_task(self._refresh_secret_volumes(running)))
        if running.container.get("readinessProbe") or running.container.get("livenessProbe"):
            running.tasks.append(asyncio.create_task(self._probe_loop(running, pod)))
        await self._write_status(running, pod)
        self._write_state()

    async def _write_secret_volumes(self, running: RunningPod) -> bool:
        """Write each Secret volume's files (STATE_DIR/volumes/NAMESPACE_POD/VOLUME); False while a
        Secret that is not optional does not exist."""
        namespace = running.key.split("/", 1)[0]
        for volume, source in secret_volumes(running.spec).items():
            status, secret = await self.client.request(
                "GET", f"/api/v1/namespaces/{namespace}/secrets/{source['secretName']}")
            if status == 404 and not source.get("optional"):
                return False
            if status not in (200, 404):
                raise RuntimeError(f"reading Secret {source['secretName']}: {status}")
            directory = self._volume_root(running) / volume
            if await asyncio.to_thread(write_secret_volume, directory,
                                       secret_files(source, secret) if status == 200 else {}):
                log.info("secret volume written", extra={"pod": running.key, "volume": volume})
            running.volume_dirs[volume] = str(directory)
        return True

    async def _refresh_secret_volumes(self, running: RunningPod) -> None:
        while not running.stopping:
            await asyncio.sleep(SECRET_REFRESH_SECONDS)  # the refresh period
            try:
                await self._write_secret_volumes(running)
            except (aiohttp.ClientError, TimeoutError, RuntimeError, OSError) as error:
                log.warning("secret volume refresh failed", extra={"pod": running.key, "error": repr(error)})

    def _volume_root(self, running: RunningPod) -> Path:
        return self.state_dir / "volumes" / running.key.replace("/", "_")

    # ---- containers ---------------------------------------------------------------------------------

    async def _token_kubeconfig(self, pod: Obj) -> Path:
        meta, spec = pod["metadata"], pod["spec"]
        account = spec.get("serviceAccountName") or "default"
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                   "spec": {"expirationSeconds": TOKEN_SECONDS,
                            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                               "uid": meta["uid"]}}}
        answer = await self.client.must(
            "POST", f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{account}/token", request)
        document = kubeconfig_document(self.server, self.pki.ca.cert_pem, name="colocation-kube",
                                  user=f"{meta['namespace']}-{account}", token=answer["status"]["token"],
                                  namespace=meta["namespace"])
        return write_kubeconfig(self.state_dir / "tokens" / f"{meta['namespace']}_{meta['name']}.kubeconfig",
                                    document)

    def _environment(self, running: RunningPod, pod: Obj) -> dict[str, str]:
        fields = {"metadata.name": pod["metadata"]["name"], "metadata.namespace": pod["metadata"]["namespace"],
                  "metadata.uid": running.uid, "spec.nodeName": self.name,
                  "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
                  "status.podIP": running.address, "status.hostIP": self.network.gateway}
        return container_environment(running.container, fields)

    def _command(self, running: RunningPod, env: dict[str, str], kubeconfig: Path) -> list[str]:
        if self.image_root is not None:
            command = self._command_in_image(self.image_root, running, env=env, kubeconfig=kubeconfig)
        else:
            program, args = container_command(running.spec, running.container, env,
                                              volume_dirs=running.volume_dirs)
            command = [*program, *args, "--kubeconfig", str(kubeconfig),
                       *self.extra_args.get(args[0] if args else "", ())]
        return ["ip", "netns", "exec", running.netns, *command]

    def _command_in_image(self, image: ImageRoot, running: RunningPod, *, env: dict[str, str],
                          kubeconfig: Path) -> list[str]:
        """The container's own command and args, run in the image with its volumes mounted where the
        pod says (an emptyDir is a new directory of the kubelet's) and its kubeconfig at KUBECONFIG."""
        for name in empty_dir_volumes(running.spec):
            if name not in running.volume_dirs:
                directory = self._volume_root(running) / name
                directory.mkdir(parents=True, exist_ok=True)
                directory.chmod(0o777)  # as the kubelet makes an emptyDir: any user of the pod may write
                running.volume_dirs[name] = str(directory)
        args = container_args(running.container, env)
        volumes = container_mounts(running.spec, running.container, running.volume_dirs)
        mounts = [Mount(Path(source), target, read_only) for source, target, read_only in volumes]
        program = [*(running.container.get("command") or ()), *args, "--kubeconfig", KUBECONFIG,
                   *self.extra_args.get(args[0] if args else "", ())]
        user = pod_user(running.spec, running.container, image.user)
        os.chown(kubeconfig, *user)  # still owner-only: the container's user reads its own token
        return image.command(program, user=user, env=env, mounts=[
            *mounts, Mount(kubeconfig, KUBECONFIG), Mount(Path(self.pki.file("ca.crt")), CLUSTER_CA)])

    async def _start_container(self, running: RunningPod, pod: Obj) -> None:
        # A restart keeps its token (a week's), as the kubelet keeps a projected token's file: a
        # container restarts while kube-apiserver does not answer, as it does under a real kubelet.
        kubeconfig = running.kubeconfig = running.kubeconfig or await self._token_kubeconfig(pod)
        env = self._environment(running, pod)
        command = self._command(running, env, kubeconfig)
        running.process = await start_logged(command, running.log_path, env)
        running.crash_loop.started()
        running.started_at = _now()
        # Without a readiness probe a running container is ready (after every restart too).
        running.ready = not running.container.get("readinessProbe")
        log.info("container started", extra={"pod": running.key, "pid": running.process.pid,
                                              "address": running.address})

    async def _supervise(self, running: RunningPod, pod: Obj) -> None:
        policy = str(running.spec.get("restartPolicy") or "Always")
        while True:
            assert running.process is not None
            code = container_exit_code(await running.process.wait())
            if running.stopping:
                return
            running.ready = False
            exited = terminated_state(code, started_at=running.started_at, finished_at=_now())
            if not restarts_after_exit(policy, code):
                await self._finish(running, pod, exited)
                return
            running.last_exit = exited
            delay = running.crash_loop.exited()
            log.warning("container exited; restarting", extra={"pod": running.key, "code": code,
                                                               "restart_in": round(delay, 1)})
            await self._write_status(running, pod)
            await asyncio.sleep(delay)  # CrashLoopBackOff
            running.restarts += 1
            await self._start_container(running, pod)
            await self._write_status(running, pod)
            self._write_state()

    async def _finish(self, running: RunningPod, pod: Obj, exited: Obj) -> None:
        """The container is done for good: no more probes, the pod's network goes (the kubelet stops
        its sandbox) and the pod turns Succeeded or Failed, to stay so until it is deleted."""
        running.finished = exited
        for task in running.tasks:
            if task is not asyncio.current_task():
                task.cancel()
        self.network.remove_pod(running.key)
        log.info("container finished", extra={"pod": running.key, "code": exited["terminated"]["exitCode"],
                                              "restart_policy": running.spec.get("restartPolicy", "Always")})
        await self._write_status(running, pod)
        self._write_state()

    async def _probe_loop(self, running: RunningPod, pod: Obj) -> None:
        container = running.container
        readiness, liveness = container.get("readinessProbe"), container.get("livenessProbe")
        # Each probe on its own period, as the kubelet runs them (a stopped process fails its
        # liveness probe only after periodSeconds x failureThreshold, not at the readiness pace).
        periods = {name: float(probe.get("periodSeconds", 10))
                   for name, probe in (("readiness", readiness), ("liveness", liveness)) if probe}
        if not periods:
            return
        started = time.monotonic()
        due = {name: started + period for name, period in periods.items()}
        ready_failures = live_failures = 0
        ever_live = False
        probed: asyncio.subprocess.Process | None = None
        while not running.stopping:
            at, now_due = next_probes(due, periods)
            await asyncio.sleep(max(at - time.monotonic(), 0))  # the probe period
            if running.process is None or running.process.returncode is not None:
                continue
            if running.process is not probed:
                # A new container (restarted after it exited): as the kubelet runs its startup probe
                # again, its liveness counts only once it has answered; the last one's does not carry over.
                probed, live_failures, ever_live = running.process, 0, False
            if readiness and "readiness" in now_due:
                if await self._probe(running, readiness):
                    ready_failures = 0
                    ready = True
                else:
                    ready_failures += 1
                    ready = running.ready and ready_failures < int(readiness.get("failureThreshold", 3))
                if ready != running.ready:
                    running.ready = ready
                    await self._write_status(running, pod)
            if liveness and "liveness" in now_due:
                if await self._probe(running, liveness):
                    live_failures, ever_live = 0, True
                elif ever_live:
                    live_failures += 1
                    if live_failures >= int(liveness.get("failureThreshold", 3)):
                        log.warning("liveness probe failed; restarting", extra={"pod": running.key})
                        live_failures, ever_live = 0, False
                        with contextlib.suppress(ProcessLookupError):
                            running.process.kill()

    async def _probe(self, running: RunningPod, probe: Obj) -> bool:
        http = probe.get("httpGet")
        if not http:
            return True
        port = http.get("port")
        if isinstance(port, str):
            port = next((p["containerPort"] for p in running.container.get("ports") or () if p.get("name") == port), 0)
        url = f"{http.get('scheme', 'HTTP').lower()}://{running.address}:{port}{http.get('path', '/')}"
        timeout = max(float(probe.get("timeoutSeconds", 1)), PROBE_TIMEOUT_FLOOR)
        assert self._probe_session is not None
        unverified = ssl.create_default_context()
        unverified.check_hostname, unverified.verify_mode = False, ssl.CERT_NONE  # the kubelet does not verify probes
        try:
            async with self._probe_session.get(url, ssl=unverified,
                                               timeout=aiohttp.ClientTimeout(total=timeout)) as response:
                return 200 <= response.status < 400
        except (aiohttp.ClientError, TimeoutError, OSError):
            return False

    # ---- status and termination ---------------------------------------------------------------------

    async def _write_status(self, running: RunningPod, pod: Obj) -> None:
        now = _now()
        container = running.container
        report = ContainerReport(name=container["name"], image=container.get("image", ""), alive=_alive(running),
                                 ready=running.ready, restarts=running.restarts, started_at=running.started_at,
                                 last_exit=running.last_exit, finished=running.finished)
        status = pod_status(report, host_ip=self.network.gateway, pod_ip=running.address,
                            start_time=running.started_at or now, now=now)
        namespace, name = running.key.split("/", 1)
        try:
            code, answer = await self.client.request(
                "PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status", {"status": status},
                content_type="application/merge-patch+json")
        except (aiohttp.ClientError, TimeoutError) as error:  # kube-apiserver does not answer: the pod goes on
            log.warning("pod status update failed",
                        extra={"pod": running.key, "error": str(error) or type(error).__name__})
            return
        if code != 200 and code != 404:
            log.warning("pod status update failed",
                        extra={"pod": running.key, "code": code, "answer": str(answer)[:200]})

    async def _terminate(self, running: RunningPod, grace: float, pod: Obj) -> None:
        await self._stop_pod(running, grace)
        await self._finalize(pod)

    async def _stop_pod(self, running: RunningPod, grace: float,
                        signals: tuple[signal.Signals, ...] = (signal.SIGTERM,)) -> None:
        running.stopping = True
        for task in running.tasks:
            task.cancel()
        await terminate([running.process], max(grace, 0.1), signals)
        self.network.remove_pod(running.key)
        if running.volume_dirs:
            shutil.rmtree(self._volume_root(running), ignore_errors=True)
        self.pods.pop(running.key, None)
        self._write_state()

    async def _finalize(self, pod: Obj) -> None:
        meta = pod["metadata"]
        await self.client.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                                  {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                                   "preconditions": {"uid": meta["uid"]}})

    def _write_state(self) -> None:
        pods = list(self.pods.values())
        write_state(self.state_file, [
            {"pod": p.key, "address": p.address, "netns": p.netns, "pid": p.process.pid if p.process else 0,
             "restarts": p.restarts, "ready": p.ready, "log": str(p.log_path),
             "args": list(p.container.get("args") or ())} for p in pods])
        # The builtin sandbox's files, in its shape (plus each process's address), so tests and
        # benchmarks find replicas and agents the same way on both.
        by_role: dict[str, list[Obj]] = {"operator": [], "agent": []}
        for p in pods:
            if p.role in by_role and p.process is not None and p.finished is None:
                by_role[p.role].append({
                    "identity": p.key.split("/", 1)[1], "nodes": [self.name], "simulated": False,
                    "host": p.address, "port": container_port(p.container, "https", 8443),
                    "metricsPort": container_port(p.container, "metrics", 9464), "pid": p.process.pid,
                    "restarts": p.restarts, "log": str(p.log_path), "kubeconfig": str(p.kubeconfig)})
        write_state(self.state_dir / "operators.json", by_role["operator"])
        self.agent_processes = by_role["agent"]  # the launcher writes agents.json with the simulated ones
        if self.on_state is not None:
            self.on_state()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*(self._stop_pod(p, 10.0, STOP_AT_ONCE)
                               for p in list(self.pods.values())), return_exceptions=True)
        if self._probe_session is not None:
            await self._probe_session.close()
        await self.client.close()


def _alive(running: RunningPod) -> bool:
    return not running.runs_process or (running.process is not None and running.process.returncode is None)


def _ready_now(running: RunningPod) -> bool:
    """Whether the pod is ready as this kubelet sees it (what `_write_status` reports)."""
    return running.ready and _alive(running) and running.finished is None


def _shown_ready(pod: Obj) -> bool:
    """Whether the pod's status on the API server says Ready."""
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or ())
