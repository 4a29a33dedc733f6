"""The kubernetes-asyncio client the operator and the agent use: the environment is read once, as client-go does."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from kubernetes_asyncio import client as kube

from colocation.kube.client import api_client, bound_unacknowledged_sends


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{server}"}}}}]
users: [{{name: u, user: {{token: the-token}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    return path


@pytest.fixture
async def apiserver() -> AsyncIterator[tuple[str, list[str]]]:
    seen: list[str] = []

    async def namespaces(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        return web.Response(body=orjson.dumps({"kind": "NamespaceList", "apiVersion": "v1", "metadata": {},
                                               "items": []}), content_type="application/json")

    app = web.Application()
    app.router.add_get("/api/v1/namespaces", namespaces)
    async with TestServer(app, host="127.0.0.1") as server:
        yield f"http://127.0.0.1:{server.port}", seen


async def test_a_netrc_entry_for_the_api_server_neither_replaces_nor_breaks_the_token(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, apiserver: tuple[str, list[str]]) -> None:
    # aiohttp's trust_env would read this file on every request (in a thread) and then refuse to
    # combine its credentials with the bearer token; client-go never reads .netrc.
    url, seen = apiserver
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login someone password secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    async with await api_client(kubeconfig(tmp_path / "config", url)) as api:
        await kube.CoreV1Api(api).list_namespace(_request_timeout=5)
    assert seen == ["Bearer the-token"]


async def test_a_proxy_from_the_environment_is_taken_once_unless_no_proxy_names_the_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("https_proxy", "http://proxy.example:3128")
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    monkeypatch.setenv("no_proxy", "internal.example")
    monkeypatch.delenv("NO_PROXY", raising=False)
    async with await api_client(kubeconfig(tmp_path / "a", "https://api.public.example:6443")) as api:
        assert api.configuration.proxy == "http://proxy.example:3128"
    async with await api_client(kubeconfig(tmp_path / "b", "https://api.internal.example:6443")) as api:
        assert not api.configuration.proxy


@pytest.mark.skipif(not hasattr(socket, "TCP_USER_TIMEOUT"), reason="TCP_USER_TIMEOUT is Linux's")
async def test_every_connection_gives_up_unacknowledged_bytes_after_the_bound(
        tmp_path: Path, apiserver: tuple[str, list[str]]) -> None:
    # A write cut off by the network must not reach the server when it heals, after its caller's
    # budget: the kernel stops retransmitting it (the operator's fencing, below TCP).
    url, seen = apiserver
    async with await api_client(kubeconfig(tmp_path / "config", url)) as api:
        bound_unacknowledged_sends(api, 2.5)
        connector = api.rest_client.pool_manager.connector
        bounded, made = connector._socket_factory, []
        def made_by_bounded(info: Any) -> Any:
            made.append(bounded(info))
            return made[-1]
        connector._socket_factory = made_by_bounded
        await kube.CoreV1Api(api).list_namespace(_request_timeout=5)
        assert seen and made
        assert {sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) for sock in made} == {2500}
