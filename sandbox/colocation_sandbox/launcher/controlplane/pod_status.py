"""What the launcher's kubelet writes in a pod's status, from what its container did (pure).

As the kubelet does (pkg/kubelet: getPhase, the status manager's generated conditions):

- after an exit the container starts again under restartPolicy Always, under OnFailure only after a
  non-zero exit, never under Never;
- a container that will not start again leaves the pod Succeeded (it exited 0) or Failed, with the
  container's state `terminated` (exitCode, reason Completed or Error, startedAt, finishedAt), not
  ready, and the Ready and ContainersReady conditions False with reason PodCompleted or PodFailed;
- a process killed by a signal counts as exit code 128 + the signal, as a container runtime reports it.
"""

from __future__ import annotations

from dataclasses import dataclass

from colocation.apimachinery.objects import Obj

SIGNAL_EXIT_BASE = 128


def container_exit_code(returncode: int) -> int:
    """The exit code a runtime reports for a process's return code (asyncio's is -N after signal N)."""
    return SIGNAL_EXIT_BASE - returncode if returncode < 0 else returncode


def restarts_after_exit(restart_policy: str, exit_code: int) -> bool:
    """Whether the kubelet starts the container again after it exited with `exit_code`."""
    if restart_policy == "Never":
        return False
    if restart_policy == "OnFailure":
        return exit_code != 0
    return True  # Always, the API's default


def terminated_state(exit_code: int, *, started_at: str, finished_at: str) -> Obj:
    return {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                           "startedAt": started_at, "finishedAt": finished_at}}


@dataclass(frozen=True, kw_only=True)
class ContainerReport:
    """What the kubelet knows of the pod's one container when it writes the pod's status."""

    name: str
    image: str
    alive: bool  # its process runs (or the pod runs no process)
    ready: bool  # its readiness probe's last word
    restarts: int
    started_at: str
    last_exit: Obj | None = None  # the state the previous run ended in, once restarted
    finished: Obj | None = None  # the terminated state of a run that will not start again


def pod_phase(container: ContainerReport) -> str:
    if container.finished is None:
        return "Running"
    return "Succeeded" if container.finished["terminated"]["exitCode"] == 0 else "Failed"


def pod_status(container: ContainerReport, *, host_ip: str, pod_ip: str, start_time: str, now: str) -> Obj:
    """The pod's status (the whole of what the kubelet owns), to merge-patch onto the pod."""
    phase = pod_phase(container)
    ready = container.ready and container.alive and container.finished is None
    state: Obj
    if container.finished is not None:
        state = container.finished
    elif container.alive:
        state = {"running": {"startedAt": container.started_at}}
    else:
        state = {"waiting": {"reason": "CrashLoopBackOff"}}
    container_status: Obj = {"name": container.name, "image": container.image, "imageID": "", "ready": ready,
                             "started": container.alive and container.finished is None,
                             "restartCount": container.restarts, "state": state}
    if container.last_exit:
        container_status["lastState"] = container.last_exit
    ready_condition: Obj = {"status": "True" if ready else "False"}
    initialized: Obj = {"status": "True"}
    if phase != "Running":
        ready_condition["reason"] = "PodCompleted" if phase == "Succeeded" else "PodFailed"
        if phase == "Succeeded":
            initialized["reason"] = "PodCompleted"
    conditions = [("PodScheduled", {"status": "True"}), ("Initialized", initialized),
                  ("ContainersReady", ready_condition), ("Ready", ready_condition)]
    return {
        "phase": phase, "hostIP": host_ip, "hostIPs": [{"ip": host_ip}], "podIP": pod_ip, "podIPs": [{"ip": pod_ip}],
        "startTime": start_time,
        "conditions": [{"type": kind, **fields, "lastTransitionTime": now} for kind, fields in conditions],
        "containerStatuses": [container_status],
    }
