"""The agent's way to kube-apiserver: direct for a pod's service account and plain token kubeconfigs,
kubernetes-asyncio (as before) for everything else; and a direct connection that really works over TLS."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from colocation.agent import api_connection
from colocation.agent.api_connection import TokenFile, agent_api, direct_config, from_kubeconfig, in_cluster
from colocation.agent.kubeapi import ApiClientKube, SessionKube
from colocation.apimachinery import certificates

CA_PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def kubeconfig(path: Path, *, cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": cluster or {
            "server": "https://10.0.0.1:6443", "certificate-authority-data": base64.b64encode(CA_PEM).decode()}}],
        "users": [{"name": "u", "user": user or {"token": "t0k3n"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "default"}}]}))
    return path


def service_account(root: Path, token: str = "sa-token") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "token").write_text(token)
    (root / "ca.crt").write_bytes(CA_PEM)
    return root


def test_a_plain_token_kubeconfig_connects_directly(tmp_path: Path) -> None:
    config = from_kubeconfig(kubeconfig(tmp_path / "config"))
    assert config is not None
    assert (config.server, config.ca_pem, config.token()) == ("https://10.0.0.1:6443", CA_PEM, "t0k3n")


def test_a_ca_file_is_read_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_bytes(CA_PEM)
    config = from_kubeconfig(kubeconfig(tmp_path / "config", cluster={"server": "https://api:6443",
                                                                      "certificate-authority": "ca.crt"}))
    assert config is not None and config.ca_pem == CA_PEM


@pytest.mark.parametrize("cluster, user", [
    (None, {"exec": {"command": "aws", "apiVersion": "client.authentication.k8s.io/v1"}}),
    (None, {"client-certificate-data": "Y2VydA==", "client-key-data": "a2V5"}),
    (None, {"token": "t", "username": "admin"}),
    ({"server": "http://10.0.0.1:8080", "certificate-authority-data": "Q0E="}, None),
    ({"server": "https://10.0.0.1:6443"}, None),  # the system's trust store
    ({"server": "https://10.0.0.1:6443", "certificate-authority-data": "Q0E=", "proxy-url": "http://p:3128"}, None),
    ({"server": "https://10.0.0.1:6443", "insecure-skip-tls-verify": True}, None),
    ({"server": "https://10.0.0.1:6443", "certificate-authority": "missing.crt"}, None),
])
def test_anything_more_than_server_ca_and_token_is_left_to_kubernetes_asyncio(
        tmp_path: Path, cluster: dict[str, Any] | None, user: dict[str, Any] | None) -> None:
    assert from_kubeconfig(kubeconfig(tmp_path / "config", cluster=cluster, user=user)) is None


def test_a_missing_or_garbled_kubeconfig_is_left_to_kubernetes_asyncio_and_its_messages(tmp_path: Path) -> None:
    assert from_kubeconfig(tmp_path / "absent") is None
    (tmp_path / "garbled").write_text("clusters: [unclosed")
    assert from_kubeconfig(tmp_path / "garbled") is None
    (tmp_path / "no-context").write_text(yaml.safe_dump({"clusters": [], "users": [], "contexts": []}))
    assert from_kubeconfig(tmp_path / "no-context") is None


def test_in_a_pod_the_service_account_is_used_and_ipv6_hosts_are_bracketed(tmp_path: Path) -> None:
    account = service_account(tmp_path / "sa")
    config = in_cluster({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}, account)
    assert config is not None and config.server == "https://[fd00::1]:443" and config.token() == "sa-token"
    assert in_cluster({"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, account) is None
    (account / "token").write_text("")
    assert in_cluster({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}, account) is None


def test_the_token_file_is_read_again_when_the_kubelet_rotates_it(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first\n")
    token = TokenFile(path)
    assert token() == "first"
    path.write_text("second\n")
    os.utime(path, ns=(1, path.stat().st_mtime_ns + 1_000_000))  # a new file, whatever the clock's resolution
    assert token() == "second"
    path.unlink()  # mid-rotation: the last token still serves
    assert token() == "second"


def test_the_order_is_the_flag_then_the_pod_then_the_default_kubeconfig(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    account, flag = service_account(tmp_path / "sa"), kubeconfig(tmp_path / "flag")
    pod = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    assert direct_config(flag, pod, account).server == "https://10.0.0.1:6443"  # type: ignore[union-attr]
    assert direct_config(None, pod, account).server == "https://10.96.0.1:443"  # type: ignore[union-attr]
    assert direct_config(None, pod, tmp_path / "no-account") is None  # a pod, but incomplete: its own message
    default = kubeconfig(tmp_path / "default")
    assert direct_config(None, {"KUBECONFIG": str(default)}, account) is not None
    assert direct_config(None, {"KUBECONFIG": f"{default}{os.pathsep}{flag}"}, account) is None  # merged: not ours
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    assert direct_config(flag, pod, account) is None


async def test_the_direct_connection_speaks_tls_with_the_token_and_the_fallback_is_kubernetes_asyncio(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    ca = certificates.new_ca("test-ca")
    server_cert = certificates.issue_certificate(ca, "api", ip_addresses=["127.0.0.1"])
    seen: list[str] = []

    async def node(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        return web.json_response({"kind": "Node", "metadata": {"name": request.match_info["name"]}})

    app = web.Application()
    app.router.add_get("/api/v1/nodes/{name}", node)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=certificates.ssl_server_context(server_cert))
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        ca_data = base64.b64encode(ca.cert_pem).decode()
        plain = kubeconfig(tmp_path / "config", cluster={"server": f"https://127.0.0.1:{port}",
                                                         "certificate-authority-data": ca_data})
        async with agent_api(plain) as kube:
            assert isinstance(kube, SessionKube)
            assert await kube.request("GET", "/api/v1/nodes/n1", timeout=10) == (
                200, {"kind": "Node", "metadata": {"name": "n1"}})
        assert seen == ["Bearer t0k3n"]
        monkeypatch.setattr(api_connection, "direct_config", lambda *_: None)
        async with agent_api(plain) as kube:
            assert isinstance(kube, ApiClientKube)
            assert (await kube.request("GET", "/api/v1/nodes/n2", timeout=10))[0] == 200
        assert seen == ["Bearer t0k3n"] * 2
    finally:
        await runner.cleanup()
