"""Operator replicas as real processes, run the way the Deployment in manifests/ runs them.

Each replica gets a Pod object, a token for the `colocation-operator` ServiceAccount bound to that
pod (so the RBAC of manifests/ is what it gets), a kubeconfig with that token, and a loopback
port registered on the Service for the aggregation layer. A replica that exits is started again
after the kubelet's back-off (`crash_loop_backoff`), as the kubelet restarts a crashed container,
and its pod's container status says so as a kubelet's does (waiting, the last run terminated,
then running again with a new start time): a standby reads it to take over from a dead leader.
`STATE_DIR/operators.json` lists the replicas (identity, pid, port, log) for tests and people.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from colocation.apimachinery.clock import format_time
from colocation.kube import permissions
from colocation_sandbox.launcher.builtin_sandbox import Sandbox
from colocation_sandbox.launcher.child_processes import (
    STOP_AT_ONCE,
    TOKEN_SECONDS,
    ChildProcess,
    Supervisor,
    write_state,
)
from colocation_sandbox.launcher.controlplane.pod_status import container_exit_code, terminated_state
from colocation_sandbox.launcher.crash_loop_backoff import CrashLoopBackOff
from colocation_sandbox.launcher.port_claims import free_port
from colocation_sandbox.server.api_aggregator import LOCAL_ENDPOINTS_ANNOTATION

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class Replica:
    identity: str  # the pod name; each process holds the Lease as POD_NAME_SUFFIX
    port: int
    kubeconfig: str
    child: ChildProcess
    started_at: str  # when its current process started, as the pod's status says

    def public(self) -> dict[str, Any]:
        return {"identity": self.identity, "port": self.port, "kubeconfig": self.kubeconfig, "log": self.child.log,
                "pid": self.child.pid, "restarts": self.child.restarts}


class OperatorReplicas:
    def __init__(self, sandbox: Sandbox, count: int, extra_args: tuple[str, ...] = ()) -> None:
        self.sandbox = sandbox
        self.count = count
        self.extra_args = extra_args
        self.namespace = permissions.OPERATOR_NAMESPACE
        self.replicas: list[Replica] = []
        # The kubelet's CrashLoopBackOff: tests see the restart timing a cluster would give them.
        restarts = functools.partial(CrashLoopBackOff, maximum=sandbox.config.max_restart_period)
        self._supervisor = Supervisor("operator replica", log, restarts, on_restart=self._restarted,
                                      on_exit=self._exited,
                                      stop_signals=STOP_AT_ONCE)
        self._probes: set[asyncio.Task[None]] = set()

    @property
    def state_file(self) -> Path:
        return self.sandbox.config.state_dir / "operators.json"

    def _pod(self, name: str) -> dict[str, Any]:
        api = self.sandbox.api
        pod = {"metadata": {"name": name, "namespace": self.namespace,
                            "labels": {"app.kubernetes.io/name": "colocation-operator",
                                       "app.kubernetes.io/component": "operator",
                                       "app.kubernetes.io/part-of": "colocation"}},
               # The process listens on this machine's loopback: the host's network, as the pod says.
               "spec": {"serviceAccountName": permissions.OPERATOR_SERVICE_ACCOUNT, "hostNetwork": True,
                        "containers": [{"name": "operator", "image": "colocation:sandbox"}]}}
        created = api.store.create(api.rt("", "pods"), pod)
        now = format_time(api.clock())
        ready = {**created, "status": {
            "phase": "Running", "startTime": now, "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}],
            "conditions": [{"type": kind, "status": "True", "lastTransitionTime": now}
                           for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")],
            "containerStatuses": [{"name": "operator", "image": "colocation:sandbox", "imageID": "", "ready": True,
                                   "started": True, "restartCount": 0, "state": {"running": {"startedAt": now}}}]}}
        return api.store.update(api.rt("", "pods"), self.namespace, name, obj=ready, subresource="status")

    def _prepare(self, index: int) -> Replica:
        api = self.sandbox.api
        name = f"colocation-operator-{index}"
        pod = self._pod(name)
        sa = api.store.get(api.rt("", "serviceaccounts"), self.namespace, permissions.OPERATOR_SERVICE_ACCOUNT)
        token, _ = api.tokens.issue_service_account_token(self.namespace, permissions.OPERATOR_SERVICE_ACCOUNT,
                                                          sa["metadata"]["uid"], expiration_seconds=TOKEN_SECONDS,
                                                          bound_object=pod)
        state = self.sandbox.config.state_dir
        kubeconfig = self.sandbox.write_kubeconfig(state / f"{name}.kubeconfig", token=token)
        port = free_port()
        # No --identity: each process picks POD_NAME plus a fresh suffix, as in the Deployment.
        command = [sys.executable, "-m", "colocation", "operator", "--kubeconfig", str(kubeconfig),
                   "--namespace", self.namespace, "--bind-address", "127.0.0.1",
                   "--port", str(port), "--advertise-address", "127.0.0.1", *self.extra_args]
        child = ChildProcess(command=command, env={"POD_NAME": name, "POD_NAMESPACE": self.namespace},
                             log=str(state / f"{name}.log"))
        # The pod's status says the container started now, before the process does: never after
        # a renewal of the process's, as a standby's takeover rule needs (colocation.kube.lease_holder).
        started_at = pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
        return Replica(identity=name, port=port, kubeconfig=str(kubeconfig), child=child, started_at=started_at)

    def _register_endpoints(self) -> None:
        api = self.sandbox.api
        services = api.rt("", "services")
        service = api.store.get(services, self.namespace, "colocation-operator")
        annotations = {**(service["metadata"].get("annotations") or {}),
                       LOCAL_ENDPOINTS_ANNOTATION: ",".join(f"127.0.0.1:{r.port}" for r in self.replicas)}
        api.store.update(services, self.namespace, "colocation-operator",
                         obj={**service, "metadata": {**service["metadata"], "annotations": annotations}})

    async def start(self) -> None:
        self.replicas = [self._prepare(i) for i in range(self.count)]
        self._register_endpoints()
        for replica in self.replicas:
            await self._supervisor.start(replica.child, identity=replica.identity, port=replica.port)
        self._write_state()

    def _container_status(self, replica: Replica, state: dict[str, Any], *,
                          last_state: dict[str, Any] | None = None) -> None:
        """Write the replica's container status as the kubelet would after a start or an exit (no
        probes here: a running container is ready, as when the pod was made)."""
        api = self.sandbox.api
        pods = api.rt("", "pods")
        pod = api.store.get(pods, self.namespace, replica.identity)
        running = "running" in state
        container = {**pod["status"]["containerStatuses"][0], "ready": running, "started": running,
                     "restartCount": replica.child.restarts, "state": state}
        if last_state is not None:
            container["lastState"] = last_state
        status = {**pod["status"], "containerStatuses": [container]}
        api.store.update(pods, self.namespace, replica.identity, obj={**pod, "status": status}, subresource="status")

    def _replica_of(self, child: ChildProcess) -> Replica | None:
        return next((r for r in self.replicas if r.child is child), None)

    def _restarted(self, child: ChildProcess) -> None:
        replica = self._replica_of(child)
        if replica is not None:
            replica.started_at = format_time(self.sandbox.api.clock())
            self._container_status(replica, {"running": {"startedAt": replica.started_at}})
        self._write_state()

    def _exited(self, child: ChildProcess) -> None:
        """A replica's process died: its endpoint is not ready now, as the kubelet reports a dead
        container at once instead of waiting for the next readiness probe; then probe them all."""
        aggregator = self.sandbox.api.aggregator
        replica = self._replica_of(child)
        if replica is not None and child.process is not None and child.process.returncode is not None:
            finished = format_time(self.sandbox.api.clock())
            exited = terminated_state(container_exit_code(child.process.returncode), started_at=replica.started_at,
                                     finished_at=finished)
            self._container_status(replica, {"waiting": {"reason": "CrashLoopBackOff"}}, last_state=exited)
        if aggregator is not None:
            if replica is not None:
                aggregator.endpoint_gone("127.0.0.1", replica.port)
            task = asyncio.create_task(aggregator.reconcile())
            self._probes.add(task)
            task.add_done_callback(self._probes.discard)

    def _write_state(self) -> None:
        write_state(self.state_file, [item.public() for item in self.replicas])

    async def stop(self) -> None:
        await self._supervisor.stop()
