"""The operator's serving TLS: the shared CA Secret, this replica's serving certificate, and the
caBundle of the APIServices and the pod webhook's configuration, kept current by one loop (the
decisions are `serving_ca`'s, pure).

Every replica runs the loop. The CA Secret is created by whichever replica gets there first (the
others read it back when their create conflicts) and rotated the same way, by a replace that
fails on a stale resourceVersion. Each replica issues its own serving certificate, renews it
before it expires and loads it into the listening server's ssl contexts in place: new
connections get the new certificate, with no restart. Every APIService of ours that points at the
operator's Service has the bundle patched in, with `insecureSkipTLSVerify` false, and so has
every webhook of the pod webhook's MutatingWebhookConfiguration that calls that Service.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import ssl
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from kubernetes_asyncio.client import AdmissionregistrationV1Api, ApiClient, ApiregistrationV1Api, CoreV1Api
from prometheus_client import CollectorRegistry, Counter, Gauge

from colocation.apimachinery import certificates
from colocation.apimachinery.event_wait import wait_set
from colocation.apimachinery.objects import Obj
from colocation.kube import permissions
from colocation.kube.backoff import Backoff
from colocation.kube.client import call_json
from colocation.kube.permissions import OPERATOR_API_CALLS, ApiCall
from colocation.manager import serving_ca
from colocation.manager.serving_ca import CaPolicy, CaState

log = logging.getLogger(__name__)

CALL_TIMEOUT = 10.0  # seconds for each request to kube-apiserver
RESYNC = dt.timedelta(seconds=60)  # look again this often even when nothing is due: another replica may rotate
WRITE_ATTEMPTS = 5  # conflicting writes of the Secret in a row before a round gives up (and is retried)

_CREATE_SECRET = permissions.declared(OPERATOR_API_CALLS, ApiCall(group="", resource="secrets", verb="create",
                                                                  namespace=permissions.OPERATOR_NAMESPACE))
_READ_SECRET = permissions.declared(OPERATOR_API_CALLS, ApiCall(group="", resource="secrets", verb="get",
                                                                namespace=permissions.OPERATOR_NAMESPACE,
                                                                name=permissions.CA_SECRET_NAME))
_REPLACE_SECRET = permissions.declared(OPERATOR_API_CALLS, ApiCall(
    group="", resource="secrets", verb="update", namespace=permissions.OPERATOR_NAMESPACE,
    name=permissions.CA_SECRET_NAME))


class TlsSyncFailed(Exception):
    pass


class CaObjects(Protocol):
    """The CA Secret and our APIServices; bodies are plain JSON objects."""

    async def read_secret(self) -> Obj | None: ...  # None: it does not exist
    async def create_secret(self, body: Obj) -> Obj | None: ...  # None: it exists already
    async def replace_secret(self, body: Obj) -> Obj | None: ...  # None: it changed since it was read
    async def read_apiservice(self, name: str) -> Obj | None: ...  # None: not installed
    async def patch_apiservice(self, name: str, patch: Obj) -> bool: ...  # False: it changed since it was read
    async def read_webhook_configuration(self, name: str) -> Obj | None: ...  # a MutatingWebhookConfiguration
    async def patch_webhook_configuration(self, name: str, patch: Obj) -> bool: ...


def _answer(what: str, status: int, body: Any, *, absent: int | None = None) -> Obj | None:
    if status == absent:
        return None
    if 200 <= status < 300 and isinstance(body, dict):
        return body
    message = body.get("message", "") if isinstance(body, dict) else str(body or "")
    raise TlsSyncFailed(f"{what}: kube-apiserver answered {status}: {message or 'unexpected answer'}")


class KubeCaObjects:
    """CaObjects through kube-apiserver, with the calls `permissions` declares."""

    def __init__(self, api: ApiClient, namespace: str) -> None:
        self._core = CoreV1Api(api)
        self._registration = ApiregistrationV1Api(api)
        self._admission = AdmissionregistrationV1Api(api)
        self.namespace = namespace

    async def read_secret(self) -> Obj | None:
        status, body = await call_json(self._core.read_namespaced_secret, _READ_SECRET.name, self.namespace,
                                       timeout=CALL_TIMEOUT)
        return _answer(f"get Secret {_READ_SECRET.name}", status, body, absent=404)

    async def create_secret(self, body: Obj) -> Obj | None:
        status, answer = await call_json(self._core.create_namespaced_secret, self.namespace, body,
                                         timeout=CALL_TIMEOUT)
        return _answer(f"create Secret {permissions.CA_SECRET_NAME}", status, answer, absent=409)

    async def replace_secret(self, body: Obj) -> Obj | None:
        status, answer = await call_json(self._core.replace_namespaced_secret, _REPLACE_SECRET.name,
                                         self.namespace, body, timeout=CALL_TIMEOUT)
        return _answer(f"update Secret {_REPLACE_SECRET.name}", status, answer, absent=409)

    async def read_apiservice(self, name: str) -> Obj | None:
        permissions.declared(OPERATOR_API_CALLS,
                             ApiCall(group="apiregistration.k8s.io", resource="apiservices", verb="get", namespace=None,
                                                         name=name))
        status, body = await call_json(self._registration.read_api_service, name, timeout=CALL_TIMEOUT)
        return _answer(f"get APIService {name}", status, body, absent=404)

    async def patch_apiservice(self, name: str, patch: Obj) -> bool:
        permissions.declared(OPERATOR_API_CALLS, ApiCall(group="apiregistration.k8s.io", resource="apiservices",
                                                         verb="patch", namespace=None,
                                                         name=name))
        status, body = await call_json(self._registration.patch_api_service, name, patch,
                                       _content_type="application/merge-patch+json", timeout=CALL_TIMEOUT)
        return _answer(f"patch APIService {name}", status, body, absent=409) is not None

    async def read_webhook_configuration(self, name: str) -> Obj | None:
        permissions.declared(OPERATOR_API_CALLS,
                             ApiCall(group="admissionregistration.k8s.io", resource="mutatingwebhookconfigurations",
                                     verb="get", namespace=None, name=name))
        status, body = await call_json(self._admission.read_mutating_webhook_configuration, name,
                                       timeout=CALL_TIMEOUT)
        return _answer(f"get MutatingWebhookConfiguration {name}", status, body, absent=404)

    async def patch_webhook_configuration(self, name: str, patch: Obj) -> bool:
        permissions.declared(OPERATOR_API_CALLS,
                             ApiCall(group="admissionregistration.k8s.io", resource="mutatingwebhookconfigurations",
                                     verb="patch", namespace=None, name=name))
        status, body = await call_json(self._admission.patch_mutating_webhook_configuration, name, patch,
                                       _content_type="application/merge-patch+json", timeout=CALL_TIMEOUT)
        return _answer(f"patch MutatingWebhookConfiguration {name}", status, body, absent=409) is not None


class TlsMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.cert_expiry = Gauge("colocation_serving_certificate_expiry_timestamp_seconds",
                                 "When this replica's serving certificate expires (Unix time).", registry=r)
        self.ca_expiry = Gauge("colocation_serving_ca_expiry_timestamp_seconds",
                               "When the current serving CA expires (Unix time).", registry=r)
        self.cert_rotations = Counter("colocation_serving_certificate_rotations_total",
                                      "Serving certificates this replica issued after its first.", registry=r)
        self.ca_rotations = Counter("colocation_serving_ca_rotations_total",
                                    "Serving CAs this replica made (the first one included) or replaced.",
                                    registry=r)
        self.bundle_patches = Counter("colocation_apiservice_ca_bundle_patches_total",
                                      "caBundle patches this replica made to an APIService or the pod "
                                      "webhook's configuration (labelled with its name).", ["apiservice"],
                                      registry=r)
        self.sync_failures = Counter("colocation_serving_tls_sync_failures_total",
                                     "Rounds of the serving TLS loop that failed (retried with backoff).", registry=r)


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class _ServedCertificate:
    """The certificate the listening server presents, loaded into its ssl contexts in place."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.metrics = TlsMetrics(registry)
        self.cert: certificates.CertKey | None = None
        self._contexts: list[ssl.SSLContext] = []

    def server_context(self, client_ca_pem: bytes | None) -> ssl.SSLContext:
        """A server context with the current certificate; renewals are loaded into it in place."""
        if self.cert is None:
            raise RuntimeError("no serving certificate yet")
        context = certificates.ssl_server_context(self.cert, client_ca_pem=client_ca_pem)
        self._contexts.append(context)
        return context

    def _serve(self, cert: certificates.CertKey) -> None:
        renewed = self.cert is not None
        for context in self._contexts:
            certificates.reload_server_chain(context, cert)  # raises, changing nothing, on a bad pair
        self.cert = cert
        self.metrics.cert_expiry.set(cert.certificate.not_valid_after_utc.timestamp())
        if renewed:
            self.metrics.cert_rotations.inc()


class ServingFiles(_ServedCertificate):
    """A serving certificate from files that another tool renews (cert-manager's Secret, mounted):
    read again every `interval` seconds and served from then on when they changed."""

    def __init__(self, cert_file: Path, key_file: Path, ca_file: Path | None, *, registry: CollectorRegistry,
                 interval: float = 10.0) -> None:
        super().__init__(registry)
        self.paths = (cert_file, key_file, ca_file)
        self.interval = interval
        self._read: tuple[bytes, ...] = ()
        self.reload()

    @property
    def bundle(self) -> bytes:
        """--tls-ca-file's CAs, else the certificate itself (a self-signed one verifies so)."""
        ca = self._read[2] if len(self._read) == 3 and self._read[2] else b""
        return ca or (self.cert.cert_pem if self.cert is not None else b"")

    def reload(self) -> bool:
        """Read the files; serve them if they changed (True). A pair that does not load raises
        ValueError or ssl.SSLError and leaves the served certificate as it was."""
        read = tuple(path.read_bytes() if path is not None else b"" for path in self.paths)
        if read == self._read:
            return False
        cert = certificates.CertKey(read[0], read[1])
        certificates.ssl_server_context(cert)  # the key must match the certificate
        self._serve(cert)
        self._read = read
        log.info("serving certificate loaded from files", extra={
            "file": str(self.paths[0]), "expires": cert.certificate.not_valid_after_utc.isoformat()})
        return True

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await wait_set(stop, self.interval)  # the polling period
            try:
                self.reload()
            except (OSError, ValueError, ssl.SSLError) as error:  # a renewal half written: next time
                self.metrics.sync_failures.inc()
                log.warning("serving certificate files unreadable, keeping the served one",
                            extra={"error": str(error)})


class ServingTls(_ServedCertificate):
    """This replica's serving certificate from the shared CA, and the APIServices' trust in it."""

    def __init__(self, objects: CaObjects, policy: CaPolicy, *, namespace: str, service_name: str,
                 dns_names: Iterable[str], ip_addresses: Iterable[str], registry: CollectorRegistry,
                 apiservices: Iterable[str] = permissions.OPERATOR_APISERVICES,
                 webhook_configurations: Iterable[str] = (permissions.POD_WEBHOOK_CONFIGURATION,),
                 clock: Callable[[], dt.datetime] = _utc_now) -> None:
        super().__init__(registry)
        self.objects = objects
        self.policy = policy
        self.namespace = namespace
        self.service_name = service_name
        self.dns_names = tuple(dns_names)
        self.ip_addresses = tuple(ip_addresses)
        self.apiservices = tuple(apiservices)
        self.webhook_configurations = tuple(webhook_configurations)
        self.clock = clock
        self.state: CaState | None = None

    @property
    def bundle(self) -> bytes:
        """The PEM CAs that verify this replica's certificate (empty before the first sync)."""
        return self.state.bundle() if self.state is not None else b""

    async def prepare(self) -> tuple[CaState, dt.datetime]:
        """The CA, and this replica's certificate renewed if due: all a replica needs to serve.
        Returns the CA and the time it was judged at."""
        state = await self._current_ca()
        now = self.clock()
        signer = serving_ca.signing_ca(state, now, self.policy)
        if self.cert is None or serving_ca.serving_renewal_due(self.cert, signer, now, policy=self.policy):
            self._issue(signer, now)
        return state, now

    async def sync(self) -> dt.datetime | None:
        """One round: `prepare()`, then the APIServices. Returns when something is due next (None:
        nothing is)."""
        state, now = await self.prepare()
        assert self.cert is not None
        await self._patch_bundles("APIService", self.apiservices, self.objects.read_apiservice,
                                  patch_object=self.objects.patch_apiservice, make_patch=serving_ca.apiservice_patch,
                                  state=state)
        await self._patch_bundles("MutatingWebhookConfiguration", self.webhook_configurations,
                                  self.objects.read_webhook_configuration,
                                  patch_object=self.objects.patch_webhook_configuration,
                                  make_patch=serving_ca.webhook_configuration_patch, state=state)
        return serving_ca.next_check(state, self.cert, now, policy=self.policy)

    async def _current_ca(self) -> CaState:
        for _ in range(WRITE_ATTEMPTS):
            secret = await self.objects.read_secret()
            state = serving_ca.state_from_secret(secret) if secret is not None else None
            now = self.clock()
            wanted = serving_ca.rotate_ca(state, now, self.policy, make_ca=self._make_ca)
            if wanted is None:
                assert state is not None
                return self._adopt(state)
            body = serving_ca.secret_body(wanted, self.namespace)
            written = await (self.objects.create_secret(body) if state is None else self.objects.replace_secret(body))
            if written is None:
                continue  # another replica wrote it first: theirs is read and judged again
            self.metrics.ca_rotations.inc()
            log.info("serving CA written", extra={
                "event": "created" if state is None else "rotated" if wanted.current != state.current
                else "dropped expired previous CA",
                "ca_expires": wanted.current.certificate.not_valid_after_utc.isoformat(),
                "bundle_cas": 1 + (wanted.previous is not None)})
            return self._adopt(serving_ca.state_from_secret(written))
        raise TlsSyncFailed(f"Secret {permissions.CA_SECRET_NAME}: {WRITE_ATTEMPTS} conflicting writes in a row")

    def _adopt(self, state: CaState) -> CaState:
        if self.state is None or state.generation != self.state.generation:
            log.info("serving CA bundle loaded", extra={"generation": state.generation,
                                                         "bundle_cas": 1 + (state.previous is not None)})
        self.state = state
        self.metrics.ca_expiry.set(state.current.certificate.not_valid_after_utc.timestamp())
        return state

    def _make_ca(self, now: dt.datetime, not_after: dt.datetime) -> certificates.CertKey:
        return certificates.new_ca(f"{self.service_name}-ca@{int(now.timestamp())}", now=now, not_after=not_after)

    def _issue(self, signer: certificates.CertKey, now: dt.datetime) -> None:
        renewed = self.cert is not None
        cert = certificates.issue_certificate(
            signer, self.service_name, dns_names=self.dns_names, ip_addresses=self.ip_addresses, now=now,
            not_after=serving_ca.serving_not_after(signer, now, self.policy))
        self._serve(cert)
        expires = cert.certificate.not_valid_after_utc
        log.info("serving certificate issued", extra={"renewal": renewed, "expires": expires.isoformat(),
                                                      "issuer": signer.certificate.subject.rfc4514_string()})

    async def _patch_bundles(self, kind: str, names: Iterable[str], read: Callable[[str], Awaitable[Obj | None]],
                             *, patch_object: Callable[[str, Obj], Awaitable[bool]],
                             make_patch: Callable[[Obj, CaState, tuple[str, str]], Obj | None],
                             state: CaState) -> None:
        """Each object of `names` that exists made to trust `state`'s bundle, retried on conflicts."""
        for name in names:
            for _ in range(WRITE_ATTEMPTS):
                found = await read(name)
                if found is None:
                    break  # its component is not installed
                patch = make_patch(found, state, (self.namespace, self.service_name))
                if patch is None:
                    break
                if await patch_object(name, patch):
                    self.metrics.bundle_patches.labels(name).inc()
                    log.info(f"{kind} caBundle patched", extra={"object": name, "generation": state.generation})
                    break

    async def run(self, stop: asyncio.Event) -> None:
        """Sync now, then at every due time (and at least every RESYNC) until `stop`; failures
        retried with backoff."""
        backoff = Backoff(initial=0.5, maximum=30.0, jitter=0.5)
        while not stop.is_set():
            try:
                due = await self.sync()
                backoff.reset()
                wait = RESYNC if due is None else min(due - self.clock(), RESYNC)
                delay = max(0.0, wait.total_seconds())
            except Exception as error:  # the next round retries; the log and the counter say why
                self.metrics.sync_failures.inc()
                delay = backoff.next_delay()
                log.warning("serving TLS sync failed, retrying", extra={"error": str(error),
                                                                       "retry_in": round(delay, 2)})
            await wait_set(stop, delay)
