"""Every child of the sandbox ends with it, however it ends: SIGKILL of the sandbox included.

The launcher's children get PR_SET_PDEATHSIG=SIGKILL (child_processes): a child that ignores
SIGTERM still dies, through an exec wrapper too, and so does one `run` started from a worker
thread. The builtin sandbox, SIGKILLed, leaves none of its operator replicas and agents, and every
port it and they listened on is free. (The real control plane's case: tests/e2e/test_sandbox_sigkill.py.)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from colocation_sandbox.launcher.child_processes import exec_keeps_death_signal, start_logged
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

# Ignores SIGTERM and SIGINT, then says so by creating the file named by its argument.
STUBBORN = """
import pathlib, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
pathlib.Path(sys.argv[1]).touch()
time.sleep(3600)
"""

# A launcher: one child from start_logged (through `env`, which execs it), one from `run` in a
# worker thread, as the real control plane's launcher runs kubectl; then it waits to be killed.
LAUNCHER = """
import asyncio, sys
from colocation_sandbox.launcher.child_processes import run, start_logged
stubborn, folder = sys.argv[1], sys.argv[2]
async def main():
    await start_logged(["env", sys.executable, "-c", stubborn, folder + "/logged"], folder + "/logged.log", {})
    waited = asyncio.create_task(asyncio.to_thread(run, [sys.executable, "-c", stubborn, folder + "/run"],
                                                   timeout=3600))
    await asyncio.Event().wait()
asyncio.run(main())
"""


def test_a_launchers_children_die_with_it_even_ignoring_sigterm(tmp_path: Path) -> None:
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, STUBBORN, str(tmp_path)],
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    children: list[Proc] = []
    try:
        eventually(lambda: (tmp_path / "logged").exists() and (tmp_path / "run").exists(), 30,
                   message="both children ignoring SIGTERM")
        children = descendants(launcher.pid)
        assert sorted(Path(child.command.split()[-1]).name for child in children) == ["logged", "run"], children
        launcher.kill()
        launcher.wait()
        until_none(lambda: [child for child in children if alive(child)], 10, "the children gone")
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        kill_survivors(children)


async def test_a_program_whose_exec_would_clear_the_death_signal_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a program set-user-ID to another user needs root")
    true = shutil.which("true")
    assert true is not None
    program = tmp_path / "setuid-true"
    shutil.copy(true, program)
    os.chown(program, 65534, 65534)
    program.chmod(0o4755)  # set-user-ID nobody: its exec would change the effective user
    assert exec_keeps_death_signal(true)
    assert not exec_keeps_death_signal(str(program))
    with pytest.raises(RuntimeError, match="PR_SET_PDEATHSIG"):
        await start_logged([str(program)], tmp_path / "log", {})
    with pytest.raises(RuntimeError, match="PR_SET_PDEATHSIG"):
        await start_logged(["ip", "netns", "exec", "somewhere", str(program)], tmp_path / "log", {})


def _state(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text()) if path.exists() else []


def test_a_sigkilled_builtin_sandbox_leaves_no_process_and_no_port(tmp_path: Path) -> None:
    args = ["--operators", "2", "--nodes", "2", "--pods-per-node", "1"]
    processes: list[Proc] = []
    with sandbox_process(tmp_path, args, timeout=60) as (sandbox, _):
        try:
            operators, agents = _state(tmp_path / "operators.json"), _state(tmp_path / "agents.json")
            assert len(operators) == 2 and len(agents) == 2, (operators, agents)
            recorded = {entry["pid"] for entry in operators + agents}
            ports = {entry["port"] for entry in operators} | {entry["metricsPort"] for entry in agents}

            def listening() -> bool:
                found = listeners(descendants(sandbox.pid))
                return recorded <= {listener.owner.pid for listener in found} and \
                    ports <= {listener.port for listener in found}

            eventually(listening, 60, message="every replica and agent listening")  # each one's port is in use now
            root = proc(sandbox.pid)
            assert root is not None
            processes = [root, *descendants(sandbox.pid)]
            held = listeners(processes)
            assert recorded <= {process.pid for process in processes}
            assert not [listener for listener in held if bindable(listener)], "ports in use count as free"

            os.kill(sandbox.pid, signal.SIGKILL)
            sandbox.wait()
            until_none(lambda: [process for process in processes if alive(process)], 10,
                       "every process of the sandbox gone")
            until_none(lambda: [listener for listener in held if not bindable(listener)], 30, "every port free")
        finally:
            kill_survivors(processes)
