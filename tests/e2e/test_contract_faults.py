"""Contract of the sandbox's own fault injection (sandbox only): what tests of clients rely on."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from tests.e2e.kube import TIME_FACTOR, Kube, configmap, create, events_until, next_event

pytestmark = pytest.mark.sandbox_only(reason="fault injection is the sandbox's own API")

AsUser = Callable[[str | None], Awaitable[Kube]]


async def test_fault_fails_the_next_matching_requests_then_lets_them_through(faults: Kube, namespace: str) -> None:
    kube = faults
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    status, body = await kube.request("POST", "/sandbox/faults", {"path": f"^{path}$", "code": 500, "count": 2})
    assert status == 201, body

    status, _ = await kube.request("GET", f"/api/v1/namespaces/{namespace}/secrets")  # does not match
    assert status == 200
    for _ in range(2):
        status, body = await kube.request("GET", path)
        assert (status, body["kind"], body["code"]) == (500, "Status", 500)
    status, body = await kube.request("GET", path)
    assert status == 200, body
    assert body["kind"] == "ConfigMapList"


async def test_fault_limited_to_some_methods(faults: Kube, namespace: str) -> None:
    kube = faults
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    status, _ = await kube.request("POST", "/sandbox/faults",
                                   {"path": path, "methods": ["POST"], "code": 409, "count": 1})
    assert status == 201
    status, _ = await kube.request("GET", path)
    assert status == 200
    status, body = await kube.request("POST", path, configmap("unlucky"))
    assert (status, body["code"]) == (409, 409)
    status, _ = await kube.request("GET", f"{path}/unlucky")
    assert status == 404  # a failed request changes nothing
    await create(kube, path, configmap("unlucky"))


async def test_fault_delay_holds_the_request(faults: Kube, namespace: str) -> None:
    kube = faults
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    # The delay is long against a GET on a loaded machine: the second, undelayed one takes less.
    delay = 2.0 * TIME_FACTOR
    status, _ = await kube.request("POST", "/sandbox/faults", {"path": path, "delay": delay, "count": 1})
    assert status == 201
    loop = asyncio.get_running_loop()
    started = loop.time()
    status, _ = await kube.request("GET", path)
    held = loop.time() - started
    assert status == 200
    assert held >= delay
    started = loop.time()
    status, _ = await kube.request("GET", path)
    assert status == 200
    assert loop.time() - started < delay


async def test_clearing_faults_restores_service(faults: Kube, namespace: str) -> None:
    kube = faults
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    status, _ = await kube.request("POST", "/sandbox/faults", {"path": path, "code": 503, "count": -1})
    assert status == 201
    for _ in range(3):
        status, _ = await kube.request("GET", path)
        assert status == 503
    status, _ = await kube.request("DELETE", "/sandbox/faults")
    assert status == 200
    status, _ = await kube.request("GET", path)
    assert status == 200


async def test_dropping_watches_ends_open_streams_and_they_resume(kube: Kube, namespace: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    first = await create(kube, path, configmap("before"))
    async with kube.watch(path, resourceVersion=first["metadata"]["resourceVersion"]) as events:
        status, body = await kube.request("DELETE", "/sandbox/watches")
        assert status == 200, body
        assert body["dropped"] >= 1
        assert await next_event(events) is None
    await create(kube, path, configmap("after"))
    async with kube.watch(path, resourceVersion=first["metadata"]["resourceVersion"]) as events:
        seen = await events_until(events, lambda e: e["object"]["metadata"]["name"] == "after")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in seen] == [("ADDED", "after")]


async def test_sandbox_controls_are_for_admins_only(as_user: AsUser, kube: Kube) -> None:
    anonymous = await as_user(None)
    status, _ = await anonymous.request("POST", "/sandbox/faults", {"path": ".", "code": 500, "count": 1})
    assert status in (401, 403)
    status, _ = await kube.request("GET", "/api/v1/namespaces")
    assert status == 200
