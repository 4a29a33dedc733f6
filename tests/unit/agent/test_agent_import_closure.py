"""What `colocation agent` loads: none of the operator's, the sandbox's, kubernetes-asyncio's (unless its
kubeconfig needs it) or certificate issuing's packages.

Every module imported stays resident for the agent's life, on every node (BENCHMARKS.md, "Agent
cost"). Two probes in fresh interpreters: importing what the agent imports before it connects (the
command line and the runtime, as benchmarks/agent_cost.py measures it), and a real agent process
started with a plain kubeconfig and stopped, with what it had loaded by then (lazy imports too).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from colocation.apimachinery import certificates
from colocation_sandbox.launcher.port_claims import free_port
from tests.timing import TIME_FACTOR

AGENT_IMPORTS = ("colocation.cli", "colocation.agent.runtime")
# Packages the agent has no use for, each a few MiB to tens of MiB resident.
FORBIDDEN_PACKAGES = {"cryptography", "kopf", "matplotlib", "numpy", "kubernetes", "kubernetes_asyncio"}
# The operator's and the sandbox's code (the CLI's own thin command modules excepted: they import lazily).
FORBIDDEN_PREFIXES = ("colocation.controllers", "colocation.apiserver", "colocation.custommetrics",
                      "colocation_sandbox.server", "colocation_sandbox.launcher.controlplane",
                      "colocation.apimachinery.certificates", "colocation.manager.", "colocation.kube.client",
                      "colocation.kube.leaderelection")
ALLOWED = {"colocation.manager.operator_command", "colocation.manager.cleanup_command"}


def loaded_modules(*names: str) -> list[str]:
    program = ("import importlib, json, sys\nfor name in sys.argv[1:]: importlib.import_module(name)\n"
               "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", program, *names], capture_output=True, text=True, timeout=120,
                         check=True)
    return list(json.loads(out.stdout))


def forbidden(modules: list[str]) -> list[str]:
    return [name for name in modules if name.split(".")[0] in FORBIDDEN_PACKAGES
            or (name.startswith(FORBIDDEN_PREFIXES) and name not in ALLOWED)]


def test_the_agent_imports_nothing_it_does_not_use() -> None:
    modules = loaded_modules(*AGENT_IMPORTS)
    assert "colocation.agent.runtime" in modules
    assert forbidden(modules) == []


def test_the_probe_sees_a_forbidden_package_pulled_in() -> None:
    """The check bites: what the agent used to import (certificate issuing for one TLS context; leader
    election, and with it kubernetes-asyncio, for the Lease record's shape) is caught."""
    caught = {name.split(".")[0] for name in forbidden(loaded_modules(
        "colocation.agent.runtime", "colocation.apimachinery.certificates", "colocation.kube.leaderelection"))}
    assert {"cryptography", "kubernetes_asyncio"} <= caught


# Runs the agent's command line in this interpreter and, as it exits, writes what it had loaded.
RUN_AND_RECORD = """import atexit, json, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
from colocation.cli import main
sys.argv[0] = "colocation"
main()
"""


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # it serves, whatever it thinks of its health
    except OSError:
        return False


def test_a_running_agent_with_a_plain_kubeconfig_loads_nothing_it_does_not_use(tmp_path: Path) -> None:
    """Past the imports: the agent started, connected its way (no API server answers here), then stopped."""
    ca = certificates.new_ca("probe-ca")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": f"https://127.0.0.1:{free_port()}",
                                               "certificate-authority-data": base64.b64encode(ca.cert_pem).decode()}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    for root in ("proc", "cgroup"):
        (tmp_path / root).mkdir()
    port, record = free_port(), tmp_path / "modules.json"
    agent = subprocess.Popen(
        [sys.executable, "-c", RUN_AND_RECORD, str(record), "agent", "--kubeconfig", str(kubeconfig),
         "--node-name", "probe", "--proc-root", str(tmp_path / "proc"), "--cgroup-root", str(tmp_path / "cgroup"),
         "--metrics-port", str(port), "--metrics-bind-address", "127.0.0.1", "--log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "HTTPS_PROXY": ""})
    try:
        deadline = time.monotonic() + 30 * TIME_FACTOR
        while not _answers(f"http://127.0.0.1:{port}/healthz"):
            assert agent.poll() is None, agent.communicate()[1].decode()[-2000:]
            assert time.monotonic() < deadline, "the agent never served /healthz"
            time.sleep(0.1)  # polling a process we do not control
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30 * TIME_FACTOR)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    modules = json.loads(record.read_text())
    assert "colocation.agent.api_connection" in modules and "colocation.agent.leader_locator" in modules
    assert forbidden(modules) == []
