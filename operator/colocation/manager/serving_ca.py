"""The operator's serving CA, as data: when to rotate it, what the bundle holds, when to renew a
serving certificate, and what an APIService needs patched. Pure: every function takes `now`.

The CA lives in a Secret of the operator's namespace (`colocation-operator-ca`), shared by all
replicas; each replica signs its own serving certificate with it and keeps that key to itself.
The Secret holds the current CA and, for an overlap, the previous one: clients trust the bundle of
both, so certificates signed by either verify while a rotation spreads. A new CA signs nothing
until it has been in the bundle for `propagation`, so the aggregator has it before it is needed.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from cryptography import x509

from colocation.apimachinery import certificates
from colocation.apimachinery.clock import format_micro_time, parse_micro_time
from colocation.apimachinery.objects import Obj
from colocation.kube.permissions import CA_SECRET_NAME

GENERATION_ANNOTATION = "colocation.dev/ca-generation"  # "<Secret uid>.<n>", n counts the Secret's changes
PUBLISHED_ANNOTATION = "colocation.dev/ca-published-at"  # when the current CA entered the bundle
_CURRENT = ("ca.crt", "ca.key")
_PREVIOUS = ("previous-ca.crt", "previous-ca.key")
BUNDLE_KEY = "ca-bundle.crt"  # written for people and other clients; the replicas recompute it
# Never renew a serving certificate more often than this, whatever the arithmetic says.
MIN_RENEWAL_INTERVAL = dt.timedelta(seconds=1)


@dataclass(frozen=True, kw_only=True)
class CaPolicy:
    """How long certificates live and when they are replaced."""

    ca_validity: dt.timedelta = dt.timedelta(days=365)
    serving_validity: dt.timedelta = dt.timedelta(days=30)
    renew_fraction: float = 2 / 3  # of a certificate's lifetime, after which it is replaced
    propagation: dt.timedelta = dt.timedelta(seconds=10)  # a new CA's time in the bundle before it signs

    def problem(self) -> str | None:
        """Why this policy cannot work, or None."""
        if not 0 < self.renew_fraction < 1:
            return f"the renewal fraction must be between 0 and 1, not {self.renew_fraction}"
        if self.serving_validity <= dt.timedelta(0):
            return "the serving certificate validity must be positive"
        # The previous CA must outlive the wait before its successor signs, twice over.
        if self.ca_validity * (1 - self.renew_fraction) < 2 * self.propagation:
            return (f"the CA validity ({self.ca_validity.total_seconds():g} s) must leave at least "
                    f"{2 * self.propagation.total_seconds():g} s after its renewal point")
        return None


@dataclass(frozen=True, kw_only=True)
class CaState:
    """What the CA Secret holds."""

    current: certificates.CertKey
    published_at: dt.datetime  # when `current` entered the bundle
    previous: certificates.CertKey | None = None
    uid: str = ""  # the Secret's uid ("" before it is created)
    revision: int = 1  # counts the Secret's changes
    resource_version: str = ""

    @property
    def generation(self) -> str:
        return f"{self.uid}.{self.revision}"

    def bundle(self) -> bytes:
        """The PEM CAs clients trust: the previous CA (while the Secret keeps it), then the current."""
        parts = [ca.cert_pem for ca in (self.previous, self.current) if ca is not None]
        return b"".join(part if part.endswith(b"\n") else part + b"\n" for part in parts)


def _renew_point(cert: x509.Certificate, fraction: float) -> dt.datetime:
    # Certificates are backdated: the fraction counts from when they were made, not from notBefore.
    start = cert.not_valid_before_utc + certificates.BACKDATE
    end = cert.not_valid_after_utc
    return start + (end - start) * fraction


def rotate_ca(state: CaState | None, now: dt.datetime, policy: CaPolicy,
              *, make_ca: Callable[[dt.datetime, dt.datetime], certificates.CertKey]) -> CaState | None:
    """The Secret's next content, or None while it stays as it is.

    A missing CA is made; a CA past its renewal point is replaced (it stays as the previous CA
    until it expires); an expired previous CA is dropped. `make_ca(now, not_after)` makes a CA.
    """
    if state is None:
        return CaState(current=make_ca(now, now + policy.ca_validity), published_at=now)
    current = state.current.certificate
    if now >= _renew_point(current, policy.renew_fraction) or now >= current.not_valid_after_utc:
        return CaState(current=make_ca(now, now + policy.ca_validity), published_at=now, previous=state.current,
                       uid=state.uid,
                       revision=state.revision + 1, resource_version=state.resource_version)
    if state.previous is not None and now >= state.previous.certificate.not_valid_after_utc:
        return CaState(current=state.current, published_at=state.published_at, previous=None, uid=state.uid,
                       revision=state.revision + 1, resource_version=state.resource_version)
    return None


def signing_ca(state: CaState, now: dt.datetime, policy: CaPolicy) -> certificates.CertKey:
    """The CA new serving certificates are signed with: the current one once it has been in the
    bundle for `propagation` (or when there is no other), else the previous one."""
    if state.previous is None or now >= state.published_at + policy.propagation:
        return state.current
    return state.previous


def serving_not_after(signer: certificates.CertKey, now: dt.datetime, policy: CaPolicy) -> dt.datetime:
    """A serving certificate issued now ends after its validity, but never after its CA."""
    return min(now + policy.serving_validity, signer.certificate.not_valid_after_utc)


def serving_renewal_due(serving: certificates.CertKey, signer: certificates.CertKey, now: dt.datetime,
                        *, policy: CaPolicy) -> bool:
    """Whether to replace the serving certificate now: past its renewal point, or signed by a CA
    other than the one that signs now (after a CA rotation has propagated)."""
    cert = serving.certificate
    if cert.issuer != signer.certificate.subject:
        return True
    return now >= max(_renew_point(cert, policy.renew_fraction),
                      cert.not_valid_before_utc + certificates.BACKDATE + MIN_RENEWAL_INTERVAL)


def next_check(state: CaState, serving: certificates.CertKey, now: dt.datetime,
               *, policy: CaPolicy) -> dt.datetime | None:
    """The earliest time after `now` anything may be due: the serving certificate's or the CA's
    renewal point, the end of a new CA's propagation, the previous CA's expiry; None if nothing is."""
    times = [max(_renew_point(serving.certificate, policy.renew_fraction),
                 serving.certificate.not_valid_before_utc + certificates.BACKDATE + MIN_RENEWAL_INTERVAL),
             _renew_point(state.current.certificate, policy.renew_fraction)]
    if state.previous is not None:
        times += [state.published_at + policy.propagation, state.previous.certificate.not_valid_after_utc]
    return min((time for time in times if time > now), default=None)


# ---- the Secret ---------------------------------------------------------------------------------

def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def secret_body(state: CaState, namespace: str) -> Obj:
    """The Secret holding `state`; with its resourceVersion, so that a replace is conditional."""
    data = {_CURRENT[0]: _b64(state.current.cert_pem), _CURRENT[1]: _b64(state.current.key_pem),
            BUNDLE_KEY: _b64(state.bundle())}
    if state.previous is not None:
        data |= {_PREVIOUS[0]: _b64(state.previous.cert_pem), _PREVIOUS[1]: _b64(state.previous.key_pem)}
    metadata: Obj = {"name": CA_SECRET_NAME, "namespace": namespace,
                     "labels": {"app.kubernetes.io/name": "colocation", "app.kubernetes.io/part-of": "colocation"},
                     "annotations": {GENERATION_ANNOTATION: str(state.revision),
                                     PUBLISHED_ANNOTATION: format_micro_time(state.published_at)}}
    if state.resource_version:
        metadata["resourceVersion"] = state.resource_version
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": metadata, "data": data}


def state_from_secret(secret: Obj) -> CaState:
    """The CAs a Secret holds; ValueError when it is not one this module wrote."""
    data = secret.get("data") or {}
    metadata = secret.get("metadata") or {}
    annotations = metadata.get("annotations") or {}

    def pair(keys: tuple[str, str]) -> certificates.CertKey | None:
        if keys[0] not in data:
            return None
        try:
            found = certificates.CertKey(base64.b64decode(data[keys[0]]), base64.b64decode(data[keys[1]]))
            found.certificate  # noqa: B018 - parse now, so that a broken Secret is reported here
        except (KeyError, ValueError) as error:
            raise ValueError(f"Secret {CA_SECRET_NAME}: {keys[0]} or {keys[1]} is not a PEM pair: {error}") from None
        return found

    current = pair(_CURRENT)
    if current is None:
        raise ValueError(f"Secret {CA_SECRET_NAME} has no {_CURRENT[0]}")
    revision_text = annotations.get(GENERATION_ANNOTATION, "1")
    published = parse_micro_time(annotations.get(PUBLISHED_ANNOTATION))
    if not revision_text.isdigit() or published is None:
        raise ValueError(f"Secret {CA_SECRET_NAME}: bad annotations {GENERATION_ANNOTATION}={revision_text!r}, "
                         f"{PUBLISHED_ANNOTATION}={annotations.get(PUBLISHED_ANNOTATION)!r}")
    revision = int(revision_text)
    return CaState(current=current, published_at=published, previous=pair(_PREVIOUS), uid=str(metadata.get("uid", "")),
                   revision=revision, resource_version=str(metadata.get("resourceVersion", "")))


# ---- the APIServices ----------------------------------------------------------------------------

def _generation_order(text: str) -> tuple[str, int]:
    uid, _, revision = text.rpartition(".")
    return uid, int(revision) if revision.isdigit() else -1


def _bundle_generation_current(metadata: Obj, state: CaState) -> bool | None:
    """Whether an object's CA generation annotation is `state`'s (None: it is newer, from a replica
    that read the Secret after this one did, and must not be undone)."""
    theirs = _generation_order((metadata.get("annotations") or {}).get(GENERATION_ANNOTATION, ""))
    ours = _generation_order(state.generation)
    if theirs[0] == ours[0] and theirs[1] > ours[1]:
        return None
    return theirs == ours


def apiservice_patch(apiservice: Obj, state: CaState, service: tuple[str, str]) -> Obj | None:
    """The merge patch that makes `apiservice` trust `state`'s bundle, or None: it already does,
    it is not backed by `service` (namespace, name), or it carries a newer generation of the CA
    than `state` (this replica read the Secret before another replica changed it).

    The patch holds the APIService's resourceVersion: it fails with a conflict, instead of undoing
    a newer bundle, when another replica patched in between.
    """
    spec = apiservice.get("spec") or {}
    backend = spec.get("service") or {}
    if (backend.get("namespace"), backend.get("name")) != service:
        return None
    metadata = apiservice.get("metadata") or {}
    current = _bundle_generation_current(metadata, state)
    if current is None:
        return None
    bundle = _b64(state.bundle())
    if current and spec.get("caBundle") == bundle and not spec.get("insecureSkipTLSVerify"):
        return None
    return {"metadata": {"resourceVersion": metadata.get("resourceVersion"),
                         "annotations": {GENERATION_ANNOTATION: state.generation}},
            "spec": {"caBundle": bundle, "insecureSkipTLSVerify": False}}


def webhook_configuration_patch(configuration: Obj, state: CaState, service: tuple[str, str]) -> Obj | None:
    """The merge patch that makes every webhook of `configuration` backed by `service` trust
    `state`'s bundle, or None: none needs it (the rules of `apiservice_patch`, per webhook).

    A merge patch replaces the whole `webhooks` list: it is the list as read with the bundles
    changed, and the resourceVersion makes it fail with a conflict if anything changed meanwhile.
    """
    metadata = configuration.get("metadata") or {}
    current = _bundle_generation_current(metadata, state)
    if current is None:
        return None
    bundle = _b64(state.bundle())
    webhooks = [dict(webhook) for webhook in configuration.get("webhooks") or []]
    ours_found = changed = False
    for webhook in webhooks:
        client = dict(webhook.get("clientConfig") or {})
        backend = client.get("service") or {}
        if (backend.get("namespace"), backend.get("name")) != service:
            continue
        ours_found = True
        if client.get("caBundle") != bundle:
            webhook["clientConfig"] = {**client, "caBundle": bundle}
            changed = True
    if not ours_found or (not changed and current):
        return None
    return {"metadata": {"resourceVersion": metadata.get("resourceVersion"),
                         "annotations": {GENERATION_ANNOTATION: state.generation}},
            "webhooks": webhooks}
