"""What `colocation agent` loads: none of the operator's, the sandbox's, kubernetes-asyncio's (unless its
kubeconfig needs it) or certificate issuing's packages.

Every module imported stays resident for the agent's life, on every node (BENCHMARKS.md, "Agent
cost"). The probe is a fresh interpreter importing what the agent imports before it connects (the
command line and the runtime), as benchmarks/agent_cost.py measures it.
"""

from __future__ import annotations

import json
import subprocess
import sys

AGENT_IMPORTS = ("colocation.cli", "colocation.agent.runtime")
# Packages the agent has no use for, each a few MiB to tens of MiB resident.
FORBIDDEN_PACKAGES = {"cryptography", "kopf", "matplotlib", "numpy", "kubernetes", "kubernetes_asyncio"}
# The operator's and the sandbox's code (the CLI's own thin command modules excepted: they import lazily).
FORBIDDEN_PREFIXES = ("colocation.controllers", "colocation.apiserver", "colocation.custommetrics",
                      "colocation.sandbox.server", "colocation.sandbox.launcher.controlplane",
                      "colocation.apimachinery.certificates", "colocation.manager.", "colocation.kube.client",
                      "colocation.kube.leaderelection")
ALLOWED = {"colocation.manager.operator_command"}


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
