"""helm (built by hack/helm/build.sh) and the objects charts/colocation renders, for the chart's tests."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "colocation"
BUILD_SCRIPT = REPO / "hack" / "helm" / "build.sh"
SKIP_REASON = "helm is not built (run `make helm`, which needs Go): the chart cannot be rendered"
RELEASE = "colocation"
HELM_TIMEOUT_SECONDS = 60


def helm_binary() -> str | None:
    """The helm hack/helm/build.sh built, or None; never builds (that takes minutes)."""
    result = subprocess.run([str(BUILD_SCRIPT), "--check"], capture_output=True, text=True,
                            timeout=HELM_TIMEOUT_SECONDS, check=False)
    return result.stdout.strip().splitlines()[-1] if result.returncode == 0 else None


def helm(binary: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    # A local chart: helm template and lint read no repository, plugin or cluster.
    result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=HELM_TIMEOUT_SECONDS,
                            check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result


def set_args(values: dict[str, object]) -> list[str]:
    """`--set-json` flags for dotted keys, e.g. {"features.customMetrics": True}: each value keeps its
    JSON type (plain `--set` makes 20.5 a string)."""
    return [arg for key, value in values.items() for arg in ("--set-json", f"{key}={json.dumps(value)}")]


def render(binary: str, values: dict[str, object] | None = None, *, namespace: str = "default") -> list[dict[str, Any]]:
    """`helm template` of the chart with these values, parsed (CRDs not included, as in manifests/)."""
    out = helm(binary, "template", RELEASE, str(CHART), "--namespace", namespace, *set_args(values or {})).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]
