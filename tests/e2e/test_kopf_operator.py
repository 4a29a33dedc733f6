"""A real Kopf operator (tests/e2e/kopf_example) run as a subprocess against the cluster under test."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.kopf_example import HANDLERS, widget_crd
from tests.e2e.kube import Kube, ensure_crd
from tests.timing import eventually_async

WIDGETS = "/apis/e2e.colocation.dev/v1/namespaces/{ns}/widgets"
RESIZE = "resize_widget/spec.size"
KOPF_FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"
# What Kopf logs when the server answers in a way it does not expect.
API_TROUBLE = re.compile(r"Traceback|\[ERROR|APIClientError|APIError|APIForbiddenError|APINotFoundError|"
                         r"APIConflictError|inconsistencies|Patching failed|\b[45]\d\d\b.*(?:Error|error)")


class KopfProcess:
    def __init__(self, process: subprocess.Popen[bytes], log: Path) -> None:
        self.process = process
        self.log = log

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


@pytest.fixture
def start_kopf(kubeconfig: Path, tmp_path: Path) -> Iterator[Callable[[], KopfProcess]]:
    """Starts `kopf run` on the example handlers when called; stops it (SIGINT) after the test."""
    started: list[KopfProcess] = []

    def start() -> KopfProcess:
        log = tmp_path / "kopf.log"
        with open(log, "wb") as sink:
            process = subprocess.Popen(
                [sys.executable, "-m", "kopf", "run", "--standalone", "--all-namespaces",
                 str(HANDLERS)],
                stdout=sink, stderr=subprocess.STDOUT, cwd=tmp_path,
                env={**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1"})
        started.append(KopfProcess(process, log))
        return started[-1]

    try:
        yield start
    finally:
        for operator in started:
            operator.stop()


async def test_kopf_operator_handles_a_widget_lifecycle(kube: Kube, namespace: str,
                                                        start_kopf: Callable[[], KopfProcess]) -> None:
    await ensure_crd(kube, widget_crd())
    # Started once the CRD is established, so Kopf's first resource discovery already sees Widgets.
    operator = start_kopf()
    name = f"w-{uuid.uuid4().hex[:6]}"
    widgets = WIDGETS.format(ns=namespace)
    status, body = await kube.request("POST", widgets, {
        "apiVersion": "e2e.colocation.dev/v1", "kind": "Widget", "metadata": {"name": name}, "spec": {"size": 3}})
    assert status == 201, body

    # Create: Kopf adds its finalizer first, then runs the handler and stores its result in status.
    async def created() -> dict[str, Any] | None:
        widget = await _widget(kube, namespace, name)
        return widget if widget and (widget.get("status") or {}).get("create_widget") else None

    widget = await eventually_async(created, timeout=30)
    assert widget["status"]["create_widget"] == {"size": 3, "area": 9}
    assert widget["status"]["phase"] == "Ready"
    assert KOPF_FINALIZER in widget["metadata"]["finalizers"]
    # Kopf remembers what it handled (its diff base) in an annotation, written with a merge patch.
    last_handled = yaml.safe_load(widget["metadata"]["annotations"]["kopf.zalando.org/last-handled-configuration"])
    assert last_handled["spec"] == {"size": 3}
    assert (await eventually_async(lambda: _has(kube, namespace, name, "Created")))["Created"] == \
        f"widget {name} has size 3"

    # Update: a change of spec.size runs the field handler with the old and new values; a field
    # handler's id (its status key) is the function's name with the field as a suffix.
    status, body = await kube.request("PATCH", f"{widgets}/{name}", {"spec": {"size": 5}},
                                      content_type="application/merge-patch+json")
    assert status == 200, body

    async def resized() -> dict[str, Any] | None:
        widget = await _widget(kube, namespace, name)
        return widget if widget and (widget.get("status") or {}).get(RESIZE) else None

    widget = await eventually_async(resized, timeout=15)
    assert widget["status"][RESIZE] == {"size": 5, "previous": 3}
    assert widget["status"]["phase"] == "Resized"
    assert widget["status"]["create_widget"] == {"size": 3, "area": 9}
    events = await eventually_async(lambda: _has(kube, namespace, name, "Resized"), timeout=10)
    assert events["Resized"] == "from 3 to 5"

    # The timer keeps counting in the status.
    ticks = int(widget["status"].get("ticks", 0))

    async def advanced() -> bool:
        widget = await _widget(kube, namespace, name)
        return bool(widget) and int(widget["status"].get("ticks", 0)) >= ticks + 2  # type: ignore[index]

    await eventually_async(advanced, timeout=15)

    # Delete: the object stays (finalizer) until the delete handler ran and Kopf released it.
    status, body = await kube.request("DELETE", f"{widgets}/{name}")
    assert status == 200, body
    assert body["metadata"]["deletionTimestamp"]

    async def gone() -> bool:
        return await _widget(kube, namespace, name) is None

    await eventually_async(gone, timeout=15)
    events = await eventually_async(lambda: _has(kube, namespace, name, "Deleting"), timeout=10)
    assert events["Deleting"] == f"widget {name} is going away"

    assert operator.stop() == 0, operator.output()
    output = operator.output()
    for handler in ("create_widget", RESIZE, "delete_widget"):
        assert f"Handler '{handler}' succeeded." in output, output
    trouble = [line for line in output.splitlines() if API_TROUBLE.search(line)]
    assert trouble == [], output


async def _widget(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    status, body = await kube.request("GET", f"{WIDGETS.format(ns=namespace)}/{name}")
    if status == 404:
        return None
    assert status == 200, body
    return body  # type: ignore[no-any-return]


async def _events(kube: Kube, namespace: str, name: str) -> dict[str, str]:
    status, body = await kube.request("GET", f"/api/v1/namespaces/{namespace}/events",
                                      params={"fieldSelector": f"involvedObject.name={name}"})
    assert status == 200, body
    return {e["reason"]: e["message"] for e in body["items"]}


async def _has(kube: Kube, namespace: str, name: str, reason: str) -> dict[str, str] | None:
    events = await _events(kube, namespace, name)
    return events if reason in events else None
