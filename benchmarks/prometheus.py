"""Prometheus and promtool as hack/prometheus/build.sh builds them: where they are, a server on
loopback over a directory of its own, and the answers of its HTTP API.

The dashboard pictures (benchmarks.dashboard_pngs) and the monitoring tests (tests/unit/manifests,
tests/e2e/test_prometheus_scrape.py) use them.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import polling
from colocation_sandbox.launcher.child_processes import die_with_parent
from colocation_sandbox.launcher.controlplane.binaries import locate_built
from colocation_sandbox.launcher.port_claims import free_port

BUILD_SCRIPT = Path("hack") / "prometheus" / "build.sh"
BUILD_TIMEOUT_SECONDS = 1800
READY_TIMEOUT_SECONDS = 60.0
API_TIMEOUT_SECONDS = 10.0
STOP_GRACE_SECONDS = 10.0


class PrometheusMissing(RuntimeError):
    """Prometheus is not built and cannot be; the message is one line."""


class PrometheusError(RuntimeError):
    """The HTTP API refused a request (a query that does not parse, a bad range): its error text."""


@dataclass(frozen=True)
class Binaries:
    prometheus: str
    promtool: str


def locate(*, build: bool = False) -> Binaries:
    """prometheus and promtool from hack/prometheus/build.sh: built first if `build` (minutes, its
    progress on stderr), else PrometheusMissing when they are not built yet."""
    prometheus = locate_built(BUILD_SCRIPT, what="Prometheus", build=build, timeout=BUILD_TIMEOUT_SECONDS,
                              missing=PrometheusMissing)
    return Binaries(prometheus, str(Path(prometheus).with_name("promtool")))


@contextlib.contextmanager
def serving(binary: str, directory: Path, config: Mapping[str, Any], *, args: Sequence[str] = (),
            ready_timeout: float = READY_TIMEOUT_SECONDS) -> Iterator[str]:
    """Prometheus with `config` on a free loopback port, its TSDB and log under `directory`; yields
    its base URL once it is ready, and stops it (SIGTERM, SIGKILL after a grace) on exit."""
    config_file = directory / "prometheus.yml"
    config_file.write_text(json.dumps(config))  # YAML reads JSON
    log_path = directory / "prometheus.log"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [binary, f"--config.file={config_file}", f"--storage.tsdb.path={directory / 'data'}",
               f"--web.listen-address=127.0.0.1:{port}", *args]
    with open(log_path, "wb") as log:
        # It dies with this process, however this process ends.
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   preexec_fn=die_with_parent(os.getpid()))
    try:
        def ready() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"prometheus exited ({process.returncode}):\n{log_path.read_text()[-4000:]}")
            return _get(f"{url}/-/ready") is not None

        polling.eventually(ready, ready_timeout, interval=0.1, message="prometheus ready")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _get(url: str) -> bytes | None:
    """The body of a 200 answer, or None (not listening yet, not ready)."""
    try:
        with urllib.request.urlopen(url, timeout=API_TIMEOUT_SECONDS) as answer:
            body: bytes = answer.read()
            return body
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def api(url: str, path: str, params: Mapping[str, str] | None = None) -> Any:
    """The `data` of an answer of the HTTP API at `url` (/api/v1/`path`); PrometheusError with the
    API's error text when it refuses."""
    query = urllib.parse.urlencode(params or {})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/{path}?{query}", timeout=API_TIMEOUT_SECONDS) as answer:
            body = json.loads(answer.read())
    except urllib.error.HTTPError as error:  # a bad query: 400 or 422, with the error in the body
        body = json.loads(error.read())
    if body.get("status") != "success":
        raise PrometheusError(f"{path} {dict(params or {})}: {body.get('errorType')}: {body.get('error')}")
    return body["data"]


def metric_names(url: str, expr: str) -> set[str]:
    """The metric names `expr` selects, as the Prometheus at `url` parses it (PrometheusError when
    it does not parse)."""
    return _selected_names(api(url, "parse_query", {"query": expr}))


def _selected_names(node: Any) -> set[str]:
    """The names of the vector and matrix selectors anywhere in a parse_query tree."""
    if isinstance(node, list):
        return set().union(*map(_selected_names, node))
    if not isinstance(node, dict):
        return set()
    own = {node["name"]} if node.get("type") in ("vectorSelector", "matrixSelector") and node.get("name") else set()
    return own.union(*map(_selected_names, node.values()))
