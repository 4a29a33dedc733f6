"""The serving TLS loop against a fake API: replicas agree on one CA Secret, each serves a
certificate the bundle verifies for the Service's name, renewals reach a listening server without
a restart, and our APIServices (only ours) get the bundle."""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime as dt
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError
from prometheus_client import CollectorRegistry

from colocation.apimachinery import certificates
from colocation.apimachinery.objects import Obj
from colocation.kube import permissions
from colocation.manager.serving_ca import CaPolicy
from colocation.manager.serving_tls import ServingFiles, ServingTls, TlsSyncFailed
from tests.clock import FakeClock

S = dt.timedelta(seconds=1)
POLICY = CaPolicy(ca_validity=100 * S, serving_validity=20 * S, renew_fraction=0.6, propagation=5 * S)
NS, SERVICE = "colocation-system", "colocation-operator"
DNS = f"{SERVICE}.{NS}.svc"
OURS = "v1alpha1.metrics.colocation.dev"
FOREIGN = "v1beta1.metrics.k8s.io"  # left to metrics-server


class FakeApi:
    """The Secret and APIServices as kube-apiserver keeps them: resourceVersions, conflicts, uids."""

    def __init__(self) -> None:
        self.secret: Obj | None = None
        self.apiservices: dict[str, Obj] = {}
        self.webhook_configurations: dict[str, Obj] = {}
        self.version = 0
        self.conflicts_left = 0  # patches to refuse with a conflict, as when another replica patched first
        self.forbidden = False  # every APIService call answered 403, as without the RBAC for it

    def _stamp(self, obj: Obj) -> Obj:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(obj)

    def add_apiservice(self, name: str, service: tuple[str, str]) -> None:
        self.apiservices[name] = {"metadata": {"name": name, "resourceVersion": "0"}, "spec": {
            "service": {"namespace": service[0], "name": service[1]}, "insecureSkipTLSVerify": True}}

    async def read_secret(self) -> Obj | None:
        return copy.deepcopy(self.secret)

    async def create_secret(self, body: Obj) -> Obj | None:
        if self.secret is not None:
            return None
        self.secret = copy.deepcopy(body)
        self.secret["metadata"]["uid"] = "uid-1"
        return self._stamp(self.secret)

    async def replace_secret(self, body: Obj) -> Obj | None:
        assert self.secret is not None
        if body["metadata"].get("resourceVersion") != self.secret["metadata"]["resourceVersion"]:
            return None
        self.secret = {**copy.deepcopy(body), "metadata": {**body["metadata"], "uid": "uid-1"}}
        return self._stamp(self.secret)

    async def read_apiservice(self, name: str) -> Obj | None:
        if self.forbidden:
            raise TlsSyncFailed(f"get APIService {name}: kube-apiserver answered 403: forbidden")
        return copy.deepcopy(self.apiservices.get(name))

    async def patch_apiservice(self, name: str, patch: Obj) -> bool:
        current = self.apiservices[name]
        if self.conflicts_left or patch["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
            self.conflicts_left = max(0, self.conflicts_left - 1)
            self._stamp(current)  # "someone else" changed it
            return False
        annotations = {**(current["metadata"].get("annotations") or {}), **patch["metadata"]["annotations"]}
        current["metadata"]["annotations"] = annotations
        current["spec"] |= patch["spec"]
        self._stamp(current)
        return True


    async def read_webhook_configuration(self, name: str) -> Obj | None:
        return copy.deepcopy(self.webhook_configurations.get(name))

    async def patch_webhook_configuration(self, name: str, patch: Obj) -> bool:
        current = self.webhook_configurations[name]
        if patch["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
            return False
        current["metadata"]["annotations"] = patch["metadata"]["annotations"]
        current["webhooks"] = patch["webhooks"]
        self._stamp(current)
        return True


def whole_second_clock() -> FakeClock:
    return FakeClock(wall=float(int(time.time())))  # certificates count whole seconds


def replica(api: FakeApi, clock: FakeClock, registry: CollectorRegistry | None = None) -> ServingTls:
    return ServingTls(api, POLICY, namespace=NS, service_name=SERVICE, dns_names=(DNS,), ip_addresses=("127.0.0.1",),
                      registry=registry or CollectorRegistry(), apiservices=(OURS, FOREIGN, "v1beta1.not.installed"),
                      clock=clock.utc)


@pytest.fixture
def api() -> FakeApi:
    fake = FakeApi()
    fake.add_apiservice(OURS, (NS, SERVICE))
    fake.add_apiservice(FOREIGN, ("kube-system", "metrics-server"))
    return fake


def verifies(bundle: bytes, cert: certificates.CertKey) -> bool:
    """Whether a TLS client trusting `bundle` accepts `cert` for the Service's name."""
    verifier = PolicyBuilder().store(Store(certificates.pem_certificates(bundle))).build_server_verifier(
        x509.DNSName(DNS))
    try:
        verifier.verify(cert.certificate, [])
    except VerificationError:
        return False
    return True


async def test_two_replicas_agree_on_one_ca_and_patch_only_our_apiservice(api: FakeApi) -> None:
    clock = whole_second_clock()
    first, second = replica(api, clock), replica(api, clock)
    await asyncio.gather(first.sync(), second.sync())
    assert first.bundle == second.bundle != b""
    assert first.cert != second.cert  # each replica keeps its own key
    assert first.cert is not None and second.cert is not None
    assert verifies(first.bundle, first.cert) and verifies(first.bundle, second.cert)
    ours = api.apiservices[OURS]["spec"]
    assert ours["insecureSkipTLSVerify"] is False and base64.b64decode(ours["caBundle"]) == first.bundle
    assert api.apiservices[FOREIGN]["spec"] == {"service": {"namespace": "kube-system", "name": "metrics-server"},
                                                "insecureSkipTLSVerify": True}


async def test_a_ca_rotation_keeps_both_cas_trusted_until_every_replica_moved(api: FakeApi) -> None:
    clock = whole_second_clock()
    first, second = replica(api, clock), replica(api, clock)
    await first.sync()
    await second.sync()
    old_bundle, old_cert = first.bundle, second.cert
    assert old_cert is not None
    clock.advance(60)  # the CA's renewal point: the first replica to look replaces it
    await first.sync()
    rotated = base64.b64decode(api.apiservices[OURS]["spec"]["caBundle"])
    assert rotated == first.bundle != old_bundle and len(certificates.pem_certificates(rotated)) == 2
    assert verifies(rotated, old_cert)  # the second replica's certificate still verifies
    await second.sync()
    assert second.bundle == rotated
    clock.advance(5)  # the new CA has propagated: both move to it
    await first.sync()
    await second.sync()
    assert first.cert is not None and second.cert is not None
    new_ca = certificates.pem_certificates(rotated)[1]
    assert first.cert.certificate.issuer == second.cert.certificate.issuer == new_ca.subject
    clock.advance(40)  # the old CA expired: it leaves the bundle, and the APIService's
    await first.sync()
    assert certificates.pem_certificates(base64.b64decode(api.apiservices[OURS]["spec"]["caBundle"])) == [new_ca]


async def test_a_conflicting_patch_is_read_again_and_retried(api: FakeApi) -> None:
    api.conflicts_left = 2
    tls = replica(api, whole_second_clock())
    await tls.sync()
    assert base64.b64decode(api.apiservices[OURS]["spec"]["caBundle"]) == tls.bundle


async def test_a_refused_apiservice_fails_the_round_but_never_the_certificate(api: FakeApi) -> None:
    api.forbidden = True
    tls = replica(api, whole_second_clock())
    await tls.prepare()  # what the operator waits for before it serves
    assert tls.cert is not None and verifies(tls.bundle, tls.cert)
    with pytest.raises(TlsSyncFailed, match="403"):
        await tls.sync()  # the loop logs it, counts it, and tries again with backoff
    api.forbidden = False
    await tls.sync()
    assert base64.b64decode(api.apiservices[OURS]["spec"]["caBundle"]) == tls.bundle


async def test_a_broken_secret_fails_the_round_with_its_reason(api: FakeApi) -> None:
    api.secret = {"metadata": {"name": permissions.CA_SECRET_NAME, "resourceVersion": "1"}, "data": {}}
    with pytest.raises(ValueError, match=r"no ca\.crt"):
        await replica(api, whole_second_clock()).sync()


@pytest.fixture
async def served(api: FakeApi) -> AsyncIterator[tuple[ServingTls, FakeClock, int]]:
    clock = whole_second_clock()
    tls = replica(api, clock)
    await tls.sync()
    server = await _start_server(tls)
    assert server.port is not None
    yield tls, clock, server.port
    await server.close()


async def _start_server(served: ServingTls | ServingFiles) -> TestServer:
    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/", ok)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server(ssl=served.server_context(None))
    return server


async def _served_certificate(bundle: bytes, port: int) -> bytes:
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=certificates.ssl_client_context(bundle),
                                                   server_hostname=DNS)
    ssl_object = writer.get_extra_info("ssl_object")
    der = ssl_object.getpeercert(binary_form=True)
    writer.close()
    await writer.wait_closed()
    assert der is not None
    return bytes(der)


def _der(cert: certificates.CertKey | None) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding

    assert cert is not None
    return cert.certificate.public_bytes(Encoding.DER)


async def test_a_renewed_certificate_is_served_without_a_restart(served: tuple[ServingTls, FakeClock, int]) -> None:
    tls, clock, port = served
    before = tls.cert
    assert await _served_certificate(tls.bundle, port) == _der(before)
    clock.advance(12)
    due = await tls.sync()
    assert tls.cert != before and due == clock.utc() + 12 * S
    assert await _served_certificate(tls.bundle, port) == _der(tls.cert)


async def test_metrics_count_rotations_and_give_the_expiry(api: FakeApi) -> None:
    registry, clock = CollectorRegistry(), whole_second_clock()
    tls = replica(api, clock, registry)
    await tls.sync()
    clock.advance(12)
    await tls.sync()
    assert tls.cert is not None
    sample: Any = registry.get_sample_value
    assert sample("colocation_serving_certificate_rotations_total") == 1
    assert sample("colocation_serving_ca_rotations_total") == 1
    assert sample("colocation_serving_certificate_expiry_timestamp_seconds") == \
        tls.cert.certificate.not_valid_after_utc.timestamp()
    assert sample("colocation_apiservice_ca_bundle_patches_total", {"apiservice": OURS}) == 1


async def test_certificate_files_renewed_by_another_tool_are_served_and_a_bad_pair_is_not(tmp_path: Path) -> None:
    """--tls-cert-file (cert-manager's mounted Secret): a renewal on disk is served without a
    restart; a half-written one (a key of another certificate) is refused and the old one kept."""
    ca = certificates.new_ca("cert-manager-ca")
    first = certificates.issue_certificate(ca, SERVICE, dns_names=(DNS,))
    cert_path, key_path = first.write(tmp_path, "tls")
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    files = ServingFiles(cert_path, key_path, tmp_path / "ca.crt", registry=CollectorRegistry())
    assert files.bundle == ca.cert_pem and not files.reload()  # unchanged files: nothing to do
    server = await _start_server(files)
    try:
        assert await _served_certificate(files.bundle, server.port or 0) == _der(first)
        second = certificates.issue_certificate(ca, SERVICE, dns_names=(DNS,))
        second.write(tmp_path, "tls")
        assert files.reload()
        assert await _served_certificate(files.bundle, server.port or 0) == _der(second)
        key_path.write_bytes(certificates.issue_certificate(ca, "other").key_pem)
        with pytest.raises(ssl.SSLError):
            files.reload()
        assert files.cert == second
        assert await _served_certificate(files.bundle, server.port or 0) == _der(second)
    finally:
        await server.close()


async def test_the_pod_webhooks_configuration_trusts_the_bundle_across_a_ca_rotation(api: FakeApi) -> None:
    name = permissions.POD_WEBHOOK_CONFIGURATION
    api.webhook_configurations[name] = {"metadata": {"name": name, "resourceVersion": "0"}, "webhooks": [
        {"name": "pods", "clientConfig": {"service": {"namespace": NS, "name": SERVICE, "path": "/mutate-pods"}}}]}
    clock = whole_second_clock()
    one = replica(api, clock)
    await one.sync()

    def trusted() -> bytes:
        return base64.b64decode(api.webhook_configurations[name]["webhooks"][0]["clientConfig"]["caBundle"])

    assert trusted() == one.bundle != b""
    first_bundle = one.bundle
    clock.advance((POLICY.ca_validity * POLICY.renew_fraction).total_seconds())
    await one.sync()
    assert one.bundle != first_bundle and trusted() == one.bundle
