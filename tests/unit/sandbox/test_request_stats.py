"""/sandbox/stats: requests and bytes per (user, verb, group, resource) reaching the sandbox."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request
from multidict import CIMultiDict

from colocation_sandbox.server.api_server import ApiServer
from colocation_sandbox.server.request_stats import request_key, request_size

ADMIN = "sandbox-admin"


@pytest.fixture
async def served() -> AsyncIterator[tuple[ApiServer, TestClient[Any, Any]]]:
    api = ApiServer()
    for name in ("default", "kube-system"):
        api.store.create(api.rt("", "namespaces"), {"metadata": {"name": name}})
    client: TestClient[Any, Any] = TestClient(TestServer(api.application()),
                                              headers={"Authorization": f"Bearer {api.tokens.admin_token}"})
    await client.start_server()
    yield api, client
    await client.close()


def wire_size(response: Any, body: bytes) -> int:
    """What the server wrote for a response: status line, headers, blank line, body."""
    status_line = len(f"HTTP/1.1 {response.status} {response.reason}\r\n")
    return status_line + sum(len(k) + len(v) + 4 for k, v in response.raw_headers) + 2 + len(body)


async def stats(client: TestClient[Any, Any], method: str = "GET") -> dict[tuple[str, str, str, str], Any]:
    response = await client.request(method, "/sandbox/stats")
    assert response.status == 200
    return {(i["user"], i["verb"], i["group"], i["resource"]): i for i in (await response.json())["items"]}


@pytest.mark.parametrize(("method", "path", "expected"), [
    ("GET", "/api/v1/pods?watch=true", ("watch", "", "pods")),
    ("GET", "/api/v1/namespaces/default/pods", ("list", "", "pods")),
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/colocation-node-lease/leases/node-1",
     ("update", "coordination.k8s.io", "leases")),
    ("PATCH", "/api/v1/nodes/node-1/status", ("patch", "", "nodes/status")),
    ("GET", "/apis/slo.koordinator.sh/v1alpha1/nodemetrics/node-1", ("get", "slo.koordinator.sh", "nodemetrics")),
    ("GET", "/healthz", ("get", "", "/healthz")),
])
def test_requests_are_keyed_by_their_rbac_verb_and_resource(method: str, path: str,
                                                            expected: tuple[str, str, str]) -> None:
    assert request_key(make_mocked_request(method, path)) == expected


def test_request_size_is_request_line_headers_and_body() -> None:
    request = make_mocked_request("PUT", "/api/v1/nodes/a", headers=CIMultiDict({"Host": "x", "Content-Length": "10"}))
    # "PUT /api/v1/nodes/a HTTP/1.1\r\n" + "Host: x\r\n" + "Content-Length: 10\r\n" + "\r\n" + 10 bytes
    assert request_size(request) == 30 + 9 + 20 + 2 + 10


async def test_counts_requests_and_the_bytes_written_per_user_and_resource(
        served: tuple[ApiServer, TestClient[Any, Any]]) -> None:
    _, client = served
    await client.delete("/sandbox/stats")
    sizes = []
    for name in ("a", "b"):
        response = await client.post("/api/v1/namespaces/default/configmaps",
                                     data=orjson.dumps({"metadata": {"name": name}, "data": {"k": "v"}}),
                                     headers={"Content-Type": "application/json"})
        body = await response.read()
        assert response.status == 201
        sizes.append(wire_size(response, body))
    response = await client.get("/api/v1/namespaces/default/configmaps/a")
    get_size = wire_size(response, await response.read())

    counted = await stats(client)
    creates = counted[(ADMIN, "create", "", "configmaps")]
    assert (creates["requests"], creates["responseBytes"]) == (2, sum(sizes))
    assert creates["requestBytes"] > 2 * len(b'{"metadata":{"name":"a"},"data":{"k":"v"}}')
    gets = counted[(ADMIN, "get", "", "configmaps")]
    assert (gets["requests"], gets["responseBytes"]) == (1, get_size)
    assert not any(key[3].startswith("/sandbox") for key in counted)  # the controls themselves are not counted


async def test_an_open_watch_is_counted_as_its_events_are_written_and_reset_starts_afresh(
        served: tuple[ApiServer, TestClient[Any, Any]]) -> None:
    _, client = served
    async with client.get("/api/v1/namespaces/default/configmaps?watch=true") as watch:
        assert watch.status == 200
        await client.delete("/sandbox/stats")  # the watch started before: its request is not in this window
        await client.post("/api/v1/namespaces/default/configmaps", data=orjson.dumps({"metadata": {"name": "w"}}),
                          headers={"Content-Type": "application/json"})
        event = await watch.content.readline()
        assert orjson.loads(event)["type"] == "ADDED"

        counted = await stats(client)
        watched = counted[(ADMIN, "watch", "", "configmaps")]
        assert watched["requests"] == 0
        # The event line, in one chunk of the chunked encoding: "<hex length>\r\n" ... "\r\n".
        assert watched["responseBytes"] == len(f"{len(event):x}\r\n") + len(event) + 2

        before = await stats(client, "DELETE")
        assert before[(ADMIN, "watch", "", "configmaps")]["responseBytes"] == watched["responseBytes"]
        assert (await stats(client)).get((ADMIN, "watch", "", "configmaps"), {"responseBytes": 0})[
            "responseBytes"] == 0


async def test_only_cluster_admins_may_read_the_counters(served: tuple[ApiServer, TestClient[Any, Any]]) -> None:
    _, client = served
    response = await client.get("/sandbox/stats", headers={"Authorization": "Bearer not-a-token"})
    assert response.status == 401
    response = await client.request("POST", "/sandbox/stats")
    assert response.status == 405
