"""API aggregation: an APIService routes its group to an extension server with front-proxy identity.

The extension server here is a small aiohttp HTTPS server in the test process. It trusts exactly
what a real one reads from kube-system/extension-apiserver-authentication, so the test proves the
sandbox publishes a usable front-proxy CA and header names, and forwards the caller's identity.
"""

from __future__ import annotations

import base64
import ssl
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import web

from colocation.apimachinery import certificates
from tests.e2e.kube import Kube
from tests.timing import eventually_async

pytestmark = pytest.mark.sandbox_only(
    reason="the extension server is on loopback, registered with the sandbox's local-endpoints annotation")

GROUP = "e2e.aggregation.dev"


class ExtensionServer:
    """Answers discovery and one resource, echoing the identity the front proxy asserted."""

    def __init__(self, front_proxy_ca_pem: bytes, allowed_names: list[str], namespace: str) -> None:
        self.ca = certificates.new_ca("e2e-extension-ca")
        # The name the aggregator verifies: its Service's, whatever address it dials.
        self.service_dns = f"extension.{namespace}.svc"
        self.cert = certificates.issue_certificate(self.ca, self.service_dns, dns_names=(self.service_dns,))
        self.front_proxy_ca_pem = front_proxy_ca_pem
        self.allowed_names = allowed_names
        self.runner: web.AppRunner | None = None
        self.port = 0

    def _identity(self, request: web.Request) -> dict[str, Any] | None:
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
        peer = certificates.peer_common_name_and_orgs(ssl_object) if ssl_object is not None else None
        if peer is None or peer[0] not in self.allowed_names:
            return None  # X-Remote-* headers are only believed from the verified front proxy
        return {"user": request.headers.get("X-Remote-User"),
                "groups": request.headers.getall("X-Remote-Group", [])}

    async def handle(self, request: web.Request) -> web.Response:
        if request.path == "/readyz":
            return web.Response(text="ok")
        identity = self._identity(request)
        if identity is None:
            return web.json_response({"kind": "Status", "code": 401, "status": "Failure"}, status=401)
        if request.path == f"/apis/{GROUP}/v1":
            return web.json_response({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{GROUP}/v1",
                                      "resources": [{"name": "things", "namespaced": False, "kind": "Thing",
                                                     "verbs": ["get", "list"]}]})
        if request.path == f"/apis/{GROUP}/v1/things":
            return web.json_response({"kind": "ThingList", "apiVersion": f"{GROUP}/v1", "metadata": {},
                                      "items": [], "seenBy": identity})
        return web.json_response({"kind": "Status", "code": 404}, status=404)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        context = certificates.ssl_server_context(self.cert, client_ca_pem=self.front_proxy_ca_pem)
        site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        server = site._server
        assert server is not None and server.sockets  # type: ignore[attr-defined]
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture
async def extension(kube: Kube, namespace: str) -> AsyncIterator[ExtensionServer]:
    status, cm = await kube.request("GET", "/api/v1/namespaces/kube-system/configmaps/"
                                           "extension-apiserver-authentication")
    assert status == 200, cm
    data = cm["data"]
    assert orjson.loads(data["requestheader-username-headers"]) == ["X-Remote-User"]
    server = ExtensionServer(data["requestheader-client-ca-file"].encode(),
                             orjson.loads(data["requestheader-allowed-names"]), namespace)
    await server.start()
    yield server
    await server.stop()


async def _available(kube: Kube, name: str) -> str | None:
    status, body = await kube.request("GET", f"/apis/apiregistration.k8s.io/v1/apiservices/{name}")
    conditions = (body.get("status") or {}).get("conditions") or [] if status == 200 else []
    return next((c["status"] for c in conditions if c["type"] == "Available"), None)


async def test_apiservice_routes_to_extension_with_front_proxy_identity(
        kube: Kube, namespace: str, extension: ExtensionServer) -> None:
    service = {"metadata": {"name": "extension", "namespace": namespace,
                            "annotations": {"sandbox.colocation.dev/local-endpoints": f"127.0.0.1:{extension.port}"}},
               "spec": {"ports": [{"name": "https", "port": 443, "targetPort": extension.port}]}}
    status, body = await kube.request("POST", f"/api/v1/namespaces/{namespace}/services", service)
    assert status == 201, body
    name = f"v1.{GROUP}"
    apiservice = {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": name},
                  "spec": {"group": GROUP, "version": "v1", "groupPriorityMinimum": 100, "versionPriority": 100,
                           "service": {"namespace": namespace, "name": "extension", "port": 443},
                           "caBundle": base64.b64encode(extension.ca.cert_pem).decode()}}
    status, body = await kube.request("POST", "/apis/apiregistration.k8s.io/v1/apiservices", apiservice)
    assert status == 201, body
    try:
        async def is_available() -> bool:
            return await _available(kube, name) == "True"

        await eventually_async(is_available, timeout=15)

        status, groups = await kube.request("GET", "/apis")
        assert GROUP in [g["name"] for g in groups["groups"]]
        status, resources = await kube.request("GET", f"/apis/{GROUP}/v1")
        assert status == 200 and resources["resources"][0]["name"] == "things"

        status, things = await kube.request("GET", f"/apis/{GROUP}/v1/things")
        assert status == 200, things
        assert things["seenBy"]["user"] == "sandbox-admin"
        assert "system:masters" in things["seenBy"]["groups"]

        # kube-apiserver authorizes aggregated requests before proxying them.
        sa = f"reader-{uuid.uuid4().hex[:6]}"
        await kube.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": sa}})
        status, token = await kube.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{sa}/token",
                                           {"spec": {"expirationSeconds": 600}})
        assert status == 201, token
        async with kube.with_token(token["status"]["token"]) as reader:
            status, denied = await reader.request("GET", f"/apis/{GROUP}/v1/things")
        assert status == 403, denied

        await extension.stop()

        async def is_unavailable() -> bool:
            return await _available(kube, name) == "False"

        await eventually_async(is_unavailable, timeout=15)
        status, body = await kube.request("GET", f"/apis/{GROUP}/v1/things")
        assert status == 503, body
    finally:
        await kube.request("DELETE", f"/apis/apiregistration.k8s.io/v1/apiservices/{name}")


async def test_extension_rejects_callers_without_the_front_proxy_certificate(extension: ExtensionServer) -> None:
    """The other half of the contract: identity headers from anyone else are not believed."""
    import aiohttp

    context = ssl.create_default_context(cadata=extension.ca.cert_pem.decode())
    async with aiohttp.ClientSession() as session, session.get(
            f"https://127.0.0.1:{extension.port}/apis/{GROUP}/v1/things", ssl=context,
            server_hostname=extension.service_dns,
            headers={"X-Remote-User": "system:admin", "X-Remote-Group": "system:masters"}) as response:
        assert response.status == 401
