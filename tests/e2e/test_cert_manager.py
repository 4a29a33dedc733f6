"""manifests/components/cert-manager against cert-manager itself, on the real control plane.

`colocation sandbox --apiserver kube --cert-manager` applies cert-manager's CRDs, runs its
controller and cainjector (hack/cert-manager/build.sh: v1.21.2's packages, the self-signed and CA
issuers only) as processes, and installs the project with the component: cert-manager issues the
serving certificate, the stand-in kubelet mounts its Secret into the operator replicas, and
cainjector fills the APIServices' and the pod webhook's caBundle, which kube-apiserver's
aggregator verifies the replicas with. A renewal is forced as `cmctl renew` forces one.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from colocation.kube.permissions import CA_SECRET_NAME, OPERATOR_NAMESPACE, POD_WEBHOOK_CONFIGURATION
from colocation_sandbox.launcher.controlplane.binaries import BinariesMissing, locate_cert_manager
from tests.e2e.conftest import apiserver_kind, sandbox_kind_args
from tests.e2e.kube import Kube, reading_continuously, start_sandbox_process
from tests.timing import eventually_async

CERTIFICATE = f"/apis/cert-manager.io/v1/namespaces/{OPERATOR_NAMESPACE}/certificates/colocation-operator-serving"
SECRET = f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/secrets/colocation-operator-serving"
APISERVICES = "/apis/apiregistration.k8s.io/v1/apiservices?labelSelector=app.kubernetes.io%2Fpart-of%3Dcolocation"
WEBHOOK = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{POD_WEBHOOK_CONFIGURATION}"
NODEMETRICS = "/apis/metrics.colocation.dev/v1alpha1/nodemetrics"
READ_PACE = 0.1  # seconds between two reads of the continuous reader: a steady load, not a wait


@pytest.fixture(scope="module")
def cert_manager_sandbox(request: pytest.FixtureRequest,
                         tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    if apiserver_kind(request.config) != "kube" or request.config.getoption("--kubeconfig"):
        pytest.skip("cert-manager runs against the sandbox's real control plane only (--apiserver kube)")
    try:
        locate_cert_manager(build=False)
    except BinariesMissing:
        pytest.skip("cert-manager is not built: run hack/cert-manager/build.sh (or make cert-manager)")
    state = tmp_path_factory.mktemp("cert-manager-sandbox")
    args = [*sandbox_kind_args(request.config), "--cert-manager", "--operators", "2", "--nodes", "0"]
    with start_sandbox_process(state, args) as kubeconfig:
        yield kubeconfig, state


@pytest.fixture
async def admin(cert_manager_sandbox: tuple[Path, Path]) -> AsyncIterator[Kube]:
    async with Kube.from_kubeconfig(cert_manager_sandbox[0]) as kube:
        yield kube


async def _get(kube: Kube, path: str) -> dict[str, Any]:
    status, body = await kube.request("GET", path)
    assert status == 200, body
    return dict(body)


async def _secret(kube: Kube) -> dict[str, bytes]:
    return {key: base64.b64decode(value) for key, value in (await _get(kube, SECRET))["data"].items()}


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == kind), None)


async def _served(state: Path) -> list[bytes | None]:
    """The certificate (DER) each operator replica serves now (None: not reachable)."""
    unverified = ssl.create_default_context()
    unverified.check_hostname, unverified.verify_mode = False, ssl.CERT_NONE
    served: list[bytes | None] = []
    for replica in json.loads((state / "operators.json").read_text()):
        try:
            async with asyncio.timeout(5):
                _, writer = await asyncio.open_connection(replica["host"], replica["port"], ssl=unverified)
        except (OSError, TimeoutError):
            served.append(None)
            continue
        served.append(writer.get_extra_info("ssl_object").getpeercert(binary_form=True))
        writer.close()
    return served


def _der(pem: bytes) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem.decode())


async def test_cert_manager_issues_the_certificate_the_aggregator_verifies(
        admin: Kube, cert_manager_sandbox: tuple[Path, Path]) -> None:
    certificate = await _get(admin, CERTIFICATE)
    assert (_condition(certificate, "Ready") or {}).get("status") == "True", certificate.get("status")
    secret = await _secret(admin)
    # cainjector put the CA of the Certificate's Secret in every APIService and in the pod webhook.
    apiservices = (await _get(admin, APISERVICES))["items"]
    assert len(apiservices) == 5
    for apiservice in apiservices:
        assert not apiservice["spec"].get("insecureSkipTLSVerify")
        assert base64.b64decode(apiservice["spec"]["caBundle"]) == secret["ca.crt"], apiservice["metadata"]["name"]
        assert (_condition(apiservice, "Available") or {}).get("status") == "True", apiservice["status"]
    for webhook in (await _get(admin, WEBHOOK))["webhooks"]:
        assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == secret["ca.crt"], webhook["name"]
    # Every replica serves the Secret's certificate, and kube-apiserver reaches them through it.
    assert await _served(cert_manager_sandbox[1]) == [_der(secret["tls.crt"])] * 2
    status, body = await admin.request("GET", NODEMETRICS)
    assert status == 200, body
    # The operator manages no CA of its own with the component.
    status, _ = await admin.request("GET", f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/secrets/{CA_SECRET_NAME}")
    assert status == 404


async def _force_renewal(kube: Kube) -> None:
    """What `cmctl renew` does: the Certificate's Issuing condition set True (reason
    ManuallyTriggered) in its status, the other conditions kept."""
    certificate = await _get(kube, CERTIFICATE)
    status = certificate.setdefault("status", {})
    status["conditions"] = [c for c in status.get("conditions") or () if c["type"] != "Issuing"] + [{
        "type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
        "message": "Certificate re-issuance manually triggered",
        "observedGeneration": certificate["metadata"]["generation"], "lastTransitionTime": _now()}]
    code, body = await kube.request("PUT", f"{CERTIFICATE}/status", certificate)
    assert code == 200, body


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.timeout(300)
async def test_a_forced_renewal_is_served_without_a_failed_read(
        admin: Kube, cert_manager_sandbox: tuple[Path, Path]) -> None:
    before = await _secret(admin)
    revision = (await _get(admin, CERTIFICATE))["status"]["revision"]
    async with reading_continuously(admin, NODEMETRICS, pace=READ_PACE) as outcomes:
        await _force_renewal(admin)

        async def renewed() -> dict[str, bytes] | None:
            certificate = await _get(admin, CERTIFICATE)
            ready = (_condition(certificate, "Ready") or {}).get("status") == "True"
            if certificate["status"].get("revision") != revision + 1 or not ready:
                return None
            secret = await _secret(admin)
            return secret if secret["tls.crt"] != before["tls.crt"] else None

        after = await eventually_async(renewed, timeout=60, interval=0.5)
        assert after["tls.key"] != before["tls.key"]  # rotationPolicy: Always, a new key
        assert after["ca.crt"] == before["ca.crt"]  # the same CA: the caBundle stays valid
        # The kubelet rewrites the mounted Secret, and each replica reads the files again.
        await eventually_async(lambda: _serve(cert_manager_sandbox[1], after["tls.crt"]), timeout=60, interval=0.5)
    assert len(outcomes) > 20 and set(outcomes) == {200}


async def _serve(state: Path, pem: bytes) -> bool:
    return await _served(state) == [_der(pem)] * 2
