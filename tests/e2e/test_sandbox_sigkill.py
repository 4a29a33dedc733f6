"""A killed `colocation sandbox --apiserver kube` leaves nothing running: no etcd, kube-apiserver,
controller manager, scheduler, kwok, operator replica or agent, and no port of theirs held.

Each child has PR_SET_PDEATHSIG=SIGKILL (child_processes). With SIGTERM there, kube-apiserver went
into its graceful shutdown on the sandbox's death while etcd went away, and sometimes never finished,
holding its port with parent 1. A client of this test watches pods meanwhile, as a user's or a
test's would. Killed two ways: SIGKILL at once; and SIGTERM, then, with the stop under way, SIGKILL
to its process group (the control plane runs in sessions of its own, outside that group). The
builtin sandbox's case is tests/unit/sandbox/test_children_die_with_sandbox.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from colocation_sandbox.launcher.controlplane.binaries import BinariesMissing, locate
from colocation_sandbox.launcher.controlplane.podnetwork import remove_leftovers
from tests.e2e.conftest import apiserver_kind
from tests.timing import eventually
from tests.unit.sandbox.process_tree import (
    Proc,
    alive,
    bindable,
    descendants,
    kill_survivors,
    listeners,
    proc,
    sandbox_process,
    until_none,
)

ARGS = ["--apiserver", "kube", "--operators", "1", "--nodes", "2", "--pods-per-node", "1"]
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def _program(process: Proc) -> str:
    return Path(process.command.split()[0]).name


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM then SIGKILL to its group"])
def test_a_killed_real_control_plane_sandbox_leaves_no_process_and_no_port(
        request: pytest.FixtureRequest, tmp_path: Path, how: str) -> None:
    if apiserver_kind(request.config) != "kube":
        pytest.skip("with --apiserver kube only (the builtin sandbox's case is a unit test)")
    try:
        kubectl = locate(build=False).kubectl
    except BinariesMissing as error:
        pytest.skip(f"the real control plane is not built: {error}")
    processes: list[Proc] = []
    watch: subprocess.Popen[bytes] | None = None
    try:
        with sandbox_process(tmp_path, ARGS, timeout=300) as (sandbox, kubeconfig):
            root = proc(sandbox.pid)
            assert root is not None
            processes = [root, *descendants(sandbox.pid)]
            programs = {_program(process) for process in processes}
            assert set(COMPONENTS) <= programs, processes
            recorded = {entry["pid"] for name in ("operators.json", "agents.json")
                        for entry in json.loads((tmp_path / name).read_text())}
            assert len(recorded) == 3 and recorded <= {process.pid for process in processes}, recorded
            held = listeners(processes)
            assert {_program(listener.owner) for listener in held} >= {"etcd", "kube-apiserver"}, held
            watch = subprocess.Popen([kubectl, "--kubeconfig", str(kubeconfig), "get", "pods", "-A", "--watch"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            assert watch.stdout is not None
            assert watch.stdout.readline(), "the watch never listed a pod"  # it is connected now

            if how == "SIGKILL":
                os.kill(sandbox.pid, signal.SIGKILL)
            else:
                os.kill(sandbox.pid, signal.SIGTERM)
                eventually(lambda: not all(alive(process) for process in processes), 60, message="the sandbox stopping")
                os.killpg(sandbox.pid, signal.SIGKILL)
            sandbox.wait()
            until_none(lambda: [process for process in processes if alive(process)], 10,
                       "every process of the sandbox gone")
            until_none(lambda: [listener for listener in held if listener.ours and not bindable(listener)], 30,
                       "every port free")
    finally:
        if watch is not None:
            watch.kill()
            watch.wait()
        kill_survivors(processes)
        remove_leftovers()  # the pod network a killed sandbox could not remove
