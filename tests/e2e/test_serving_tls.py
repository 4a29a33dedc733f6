"""Serving TLS end to end: the aggregator verifies the operator's certificate, across rotations.

The sandbox runs two operator replicas with short lifetimes (serving certificates 20 s, the CA
60 s, both replaced at 60 % of their life), so serving certificates are renewed every 12 s, the CA
is replaced every 36 s, and the replaced CA leaves the bundle 24 s later. On the real control plane (`--apiserver kube`)
kube-apiserver's own aggregator does the verifying; on the builtin one, the sandbox's, which
dials the same way (the caBundle, and the Service's name `<service>.<namespace>.svc`).
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509

from colocation.apimachinery import certificates
from colocation.kube.permissions import CA_SECRET_NAME, OPERATOR_NAMESPACE
from colocation.manager.serving_ca import GENERATION_ANNOTATION
from colocation_sandbox.launcher.controlplane.binaries import kubectl_binary
from tests.e2e.conftest import Kubectl, sandbox_kind_args
from tests.e2e.kube import Kube, reading_continuously, start_sandbox_process
from tests.timing import eventually_async

APISERVICE = "/apis/apiregistration.k8s.io/v1/apiservices/v1alpha1.metrics.colocation.dev"
NODEMETRICS = "/apis/metrics.colocation.dev/v1alpha1/nodemetrics"
LIFETIMES = ["--operator-arg=--serving-cert-validity=20", "--operator-arg=--ca-validity=60",
             "--operator-arg=--cert-renew-fraction=0.6"]
READ_PACE = 0.1  # seconds between two reads of the continuous reader: a steady load, not a wait


@pytest.fixture(scope="module")
def tls_sandbox(request: pytest.FixtureRequest,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    if request.config.getoption("--kubeconfig"):
        pytest.skip("the operator replicas are the sandbox's, started with short certificate lifetimes")
    state = tmp_path_factory.mktemp("tls-sandbox")
    args = [*sandbox_kind_args(request.config), "--operators", "2", "--nodes", "0", "--probe-interval=0.1",
            *LIFETIMES]
    with start_sandbox_process(state, args) as kubeconfig:
        yield kubeconfig, state


@pytest.fixture
async def admin(tls_sandbox: tuple[Path, Path]) -> AsyncIterator[Kube]:
    async with Kube.from_kubeconfig(tls_sandbox[0]) as kube:
        await eventually_async(lambda: _condition(kube), timeout=60)
        yield kube


async def _apiservice(kube: Kube) -> dict[str, Any]:
    status, body = await kube.request("GET", APISERVICE)
    assert status == 200, body
    return dict(body)


async def _condition(kube: Kube, want: str = "True") -> dict[str, Any] | None:
    conditions = ((await _apiservice(kube)).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Available" and c["status"] == want), None)


async def _secret_bundle(kube: Kube) -> tuple[bytes, str]:
    """(the CA bundle in the operator's Secret, the Secret's uid)."""
    status, secret = await kube.request("GET", f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/secrets/{CA_SECRET_NAME}")
    assert status == 200, secret
    return base64.b64decode(secret["data"]["ca-bundle.crt"]), secret["metadata"]["uid"]


async def _trusted(kube: Kube) -> list[x509.Certificate]:
    """The CAs the APIService trusts."""
    return certificates.pem_certificates(base64.b64decode((await _apiservice(kube))["spec"].get("caBundle") or ""))


async def _served_issuers(state: Path) -> list[x509.Name | None]:
    """The issuer of the certificate each replica serves now (None: not reachable)."""
    unverified = ssl.create_default_context()
    unverified.check_hostname, unverified.verify_mode = False, ssl.CERT_NONE
    issuers: list[x509.Name | None] = []
    for replica in json.loads((state / "operators.json").read_text()):
        try:
            async with asyncio.timeout(5):
                _, writer = await asyncio.open_connection(replica.get("host", "127.0.0.1"), replica["port"],
                                                          ssl=unverified)
        except (OSError, TimeoutError):
            issuers.append(None)
            continue
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        issuers.append(x509.load_der_x509_certificate(der).issuer)
    return issuers


async def test_the_apiservice_is_verified_and_available(admin: Kube, tls_sandbox: tuple[Path, Path],
                                                        tmp_path: Path) -> None:
    spec = (await _apiservice(admin))["spec"]
    assert not spec.get("insecureSkipTLSVerify")
    bundle, _ = await _secret_bundle(admin)
    assert base64.b64decode(spec["caBundle"]) == bundle
    binary = kubectl_binary()
    if binary is None:
        pytest.skip("no kubectl: neither built by hack/kube/build.sh (needs Go) nor on the PATH")
    result = Kubectl(binary, tls_sandbox[0], tmp_path / "kubectl-cache").run("get", "nodemetrics")
    assert "No resources found" in result.stderr + result.stdout


@pytest.mark.timeout(300)  # a whole CA rotation takes a minute of wall time, whatever the machine's speed
async def test_reads_never_fail_across_certificate_and_ca_rotations(admin: Kube,
                                                                    tls_sandbox: tuple[Path, Path]) -> None:
    first = await _trusted(admin)
    assert len(first) in (1, 2)  # two while an earlier rotation overlaps
    async with reading_continuously(admin, NODEMETRICS, pace=READ_PACE) as outcomes:
        # The CA is replaced: the bundle carries a new CA next to the one it trusted so far...
        async def new_ca() -> x509.Certificate | None:
            trusted = await _trusted(admin)
            fresh = [ca for ca in trusted if ca not in first]
            return fresh[0] if fresh and len(trusted) == 2 else None

        ca = await eventually_async(new_ca, timeout=60, interval=0.5)
        # ...every replica moves to a certificate it signed...
        await eventually_async(lambda: _all_issued_by(tls_sandbox[1], ca.subject), timeout=30, interval=0.5)
        # ...and once the old CA expired, the bundle holds the new one alone.
        await eventually_async(lambda: _only(admin, ca), timeout=60, interval=0.5)
    assert len(outcomes) > 50 and set(outcomes) == {200}


async def _all_issued_by(state: Path, issuer: x509.Name) -> bool:
    return all(served == issuer for served in await _served_issuers(state))


async def _only(kube: Kube, ca: x509.Certificate) -> bool:
    return await _trusted(kube) == [ca]


async def test_a_wrong_ca_bundle_makes_the_apiservice_unavailable(admin: Kube) -> None:
    """The aggregator verifies: with a bundle of an unrelated CA it refuses the operator. Marked
    with a newer generation than the Secret's, the operator leaves it alone; without the mark,
    the operator puts its bundle back."""
    _, uid = await _secret_bundle(admin)
    wrong = certificates.new_ca("not-the-operators-ca").cert_pem
    patch = {"metadata": {"annotations": {GENERATION_ANNOTATION: f"{uid}.999999"}},
             "spec": {"caBundle": base64.b64encode(wrong).decode()}}
    status, body = await admin.request("PATCH", APISERVICE, patch, content_type="application/merge-patch+json")
    assert status == 200, body
    try:
        refused = await eventually_async(lambda: _condition(admin, "False"), timeout=30)
        assert "certificate" in refused["message"] or "x509" in refused["message"], refused
        status, body = await admin.request("GET", NODEMETRICS)
        assert status == 503, body
    finally:
        status, body = await admin.request("PATCH", APISERVICE, {"metadata": {"annotations": {
            GENERATION_ANNOTATION: None}}}, content_type="application/merge-patch+json")
        assert status == 200, body
    await eventually_async(lambda: _condition(admin), timeout=60, interval=0.5)
    bundle, _ = await _secret_bundle(admin)
    assert base64.b64decode((await _apiservice(admin))["spec"]["caBundle"]) == bundle


async def test_an_agent_reaches_the_leader_with_the_published_bundle(admin: Kube) -> None:
    """The leader Lease publishes the same bundle: agents and standbys verify the leader with it (the
    certificate names the address it advertises)."""
    status, lease = await admin.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{OPERATOR_NAMESPACE}/"
                                               "leases/colocation-operator")
    assert status == 200, lease
    annotations = lease["metadata"]["annotations"]
    published = base64.b64decode(annotations["colocation.dev/leader-ca"])
    context = certificates.ssl_client_context(published)
    async with aiohttp.ClientSession() as session, session.get(
            f'{annotations["colocation.dev/leader-endpoint"]}/livez', ssl=context,
            timeout=aiohttp.ClientTimeout(total=10)) as response:
        assert response.status == 200
