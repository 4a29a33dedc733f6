"""The sandbox's aggregator dials a backend as kube-aggregator does: with a caBundle, the serving
certificate must chain to it and name the Service (`<service>.<namespace>.svc`); with
insecureSkipTLSVerify, nothing is checked; with neither, nothing is trusted."""

from __future__ import annotations

import base64
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

from colocation.apimachinery import certificates
from colocation_sandbox.server.api_aggregator import Aggregator
from tests.unit.sandbox.conftest import register_things

SERVICE_DNS = "things.default.svc"


class TlsBackend:
    """Answers the availability check of things.example.com/v1 over HTTPS with a given certificate."""

    def __init__(self, cert: certificates.CertKey) -> None:
        self.cert = cert
        self.server: TestServer | None = None
        self.port = 0

    async def __aenter__(self) -> TlsBackend:
        async def handle(request: web.Request) -> web.Response:
            return web.json_response({"kind": "APIResourceList", "groupVersion": "things.example.com/v1",
                                      "resources": []})

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server(ssl=certificates.ssl_server_context(self.cert))
        assert self.server.port is not None
        self.port = self.server.port
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        await self.server.close()


async def _availability(aggregator: Aggregator) -> tuple[str, str]:
    api = aggregator.api
    rt = api.rt("apiregistration.k8s.io", "apiservices")
    await aggregator.reconcile()
    obj = api.store.find(rt, "", "v1.things.example.com")
    assert obj is not None
    (condition,) = obj["status"]["conditions"]
    return condition["status"], condition["message"]


def _bundle(*cas: certificates.CertKey) -> dict[str, Any]:
    return {"caBundle": base64.b64encode(b"".join(ca.cert_pem for ca in cas)).decode()}


async def test_a_certificate_for_the_service_name_from_the_bundle_is_trusted(aggregator: Aggregator) -> None:
    ca, other = certificates.new_ca("serving-ca"), certificates.new_ca("previous-ca")
    cert = certificates.issue_certificate(ca, "things", dns_names=(SERVICE_DNS,))
    async with TlsBackend(cert) as backend:
        register_things(aggregator.api, backend.port, _bundle(other, ca))  # a bundle of two CAs, during a rotation
        assert await _availability(aggregator) == ("True", "all checks passed")


async def test_a_certificate_from_another_ca_is_refused(aggregator: Aggregator) -> None:
    cert = certificates.issue_certificate(certificates.new_ca("serving-ca"), "things", dns_names=(SERVICE_DNS,))
    async with TlsBackend(cert) as backend:
        register_things(aggregator.api, backend.port, _bundle(certificates.new_ca("wrong-ca")))
        status, message = await _availability(aggregator)
    assert status == "False" and "certificate verify failed" in message


async def test_a_certificate_that_does_not_name_the_service_is_refused(aggregator: Aggregator) -> None:
    ca = certificates.new_ca("serving-ca")
    # Valid for the address dialled, but not for the Service's name that kube-aggregator checks.
    cert = certificates.issue_certificate(ca, "things", dns_names=("things.elsewhere.svc",),
                                          ip_addresses=("127.0.0.1",))
    async with TlsBackend(cert) as backend:
        register_things(aggregator.api, backend.port, _bundle(ca))
        status, message = await _availability(aggregator)
    assert status == "False" and "things.default.svc" in message


async def test_insecure_skip_tls_verify_checks_nothing(aggregator: Aggregator) -> None:
    cert = certificates.issue_certificate(certificates.new_ca("unknown-ca"), "anything", dns_names=("nowhere",))
    async with TlsBackend(cert) as backend:
        register_things(aggregator.api, backend.port, {"insecureSkipTLSVerify": True})
        assert await _availability(aggregator) == ("True", "all checks passed")


async def test_without_a_bundle_nothing_is_trusted(aggregator: Aggregator) -> None:
    ca = certificates.new_ca("serving-ca")
    async with TlsBackend(certificates.issue_certificate(ca, "things", dns_names=(SERVICE_DNS,))) as backend:
        register_things(aggregator.api, backend.port, {})
        status, message = await _availability(aggregator)
    assert status == "False" and "unknown authority" in message
