"""The serving CA's decisions, with an injected clock: when the CA and a serving certificate are
replaced, which CA signs, what the bundle holds, and what an APIService gets patched."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt

import pytest

from colocation.apimachinery import certificates
from colocation.manager import serving_ca
from colocation.manager.serving_ca import CaPolicy, CaState

T0 = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
S = dt.timedelta(seconds=1)
# CA: 100 s, replaced at 60 s; serving certificates: 20 s, replaced at 12 s; a new CA signs after 5 s.
POLICY = CaPolicy(ca_validity=100 * S, serving_validity=20 * S, renew_fraction=0.6, propagation=5 * S)
SERVICE = ("colocation-system", "colocation-operator")


def make_ca(now: dt.datetime, not_after: dt.datetime) -> certificates.CertKey:
    return certificates.new_ca(f"ca@{now.timestamp():.0f}", now=now, not_after=not_after)


def serving(signer: certificates.CertKey, now: dt.datetime) -> certificates.CertKey:
    return certificates.issue_certificate(signer, "colocation-operator", dns_names=("colocation-operator.x.svc",),
                                          now=now, not_after=serving_ca.serving_not_after(signer, now, POLICY))


def first_state() -> CaState:
    state = serving_ca.rotate_ca(None, T0, POLICY, make_ca=make_ca)
    assert state is not None
    return state


def test_a_missing_ca_is_made_and_then_kept_until_its_renewal_point() -> None:
    state = first_state()
    assert state.previous is None and state.current.certificate.not_valid_after_utc == T0 + 100 * S
    assert serving_ca.rotate_ca(state, T0 + 59 * S, POLICY, make_ca=make_ca) is None
    assert certificates.pem_certificates(state.bundle()) == [state.current.certificate]


def test_a_ca_past_its_renewal_point_is_replaced_and_both_are_trusted_until_the_old_one_expires() -> None:
    state = first_state()
    rotated = serving_ca.rotate_ca(state, T0 + 60 * S, POLICY, make_ca=make_ca)
    assert rotated is not None
    assert rotated.previous == state.current and rotated.current != state.current
    assert rotated.published_at == T0 + 60 * S and rotated.revision == state.revision + 1
    bundle = certificates.pem_certificates(rotated.bundle())
    assert bundle == [state.current.certificate, rotated.current.certificate]
    # Nothing more to do while the old CA is valid; once it expired it leaves the bundle.
    assert serving_ca.rotate_ca(rotated, T0 + 99 * S, POLICY, make_ca=make_ca) is None
    dropped = serving_ca.rotate_ca(rotated, T0 + 100 * S, POLICY, make_ca=make_ca)
    assert dropped is not None and dropped.previous is None and dropped.current == rotated.current
    assert certificates.pem_certificates(dropped.bundle()) == [rotated.current.certificate]


def test_a_new_ca_signs_only_after_it_had_time_to_reach_the_aggregator() -> None:
    rotated = serving_ca.rotate_ca(first_state(), T0 + 60 * S, POLICY, make_ca=make_ca)
    assert rotated is not None and rotated.previous is not None
    assert serving_ca.signing_ca(rotated, T0 + 64 * S, POLICY) == rotated.previous
    assert serving_ca.signing_ca(rotated, T0 + 65 * S, POLICY) == rotated.current


def test_a_serving_certificate_is_renewed_at_its_fraction_and_when_the_signer_changes() -> None:
    state = first_state()
    cert = serving(state.current, T0)
    assert cert.certificate.not_valid_after_utc == T0 + 20 * S
    assert not serving_ca.serving_renewal_due(cert, state.current, T0 + 11 * S, policy=POLICY)
    assert serving_ca.serving_renewal_due(cert, state.current, T0 + 12 * S, policy=POLICY)
    assert serving_ca.next_check(state, cert, T0, policy=POLICY) == T0 + 12 * S
    # Signed by the previous CA while the new one propagates: replaced once the new one signs.
    rotated = serving_ca.rotate_ca(state, T0 + 60 * S, POLICY, make_ca=make_ca)
    assert rotated is not None
    during = serving(serving_ca.signing_ca(rotated, T0 + 61 * S, POLICY), T0 + 61 * S)
    assert during.certificate.issuer == state.current.certificate.subject
    assert serving_ca.next_check(rotated, during, T0 + 61 * S, policy=POLICY) == T0 + 65 * S
    after = serving_ca.signing_ca(rotated, T0 + 65 * S, POLICY)
    assert serving_ca.serving_renewal_due(during, after, T0 + 65 * S, policy=POLICY)
    # Once renewed, what is past (the propagation) is never due again; the old CA's expiry is.
    renewed = serving(after, T0 + 65 * S)
    assert serving_ca.next_check(rotated, renewed, T0 + 65 * S, policy=POLICY) == T0 + 77 * S


def test_a_serving_certificate_never_outlives_its_ca() -> None:
    state = first_state()
    late = serving(state.current, T0 + 90 * S)
    assert late.certificate.not_valid_after_utc == T0 + 100 * S


def test_the_secret_round_trips_and_a_broken_one_is_reported() -> None:
    rotated = serving_ca.rotate_ca(first_state(), T0 + 60 * S, POLICY, make_ca=make_ca)
    assert rotated is not None
    body = serving_ca.secret_body(rotated, "colocation-system")
    body["metadata"] |= {"uid": "u-1", "resourceVersion": "7"}
    back = serving_ca.state_from_secret(body)
    assert (back.current, back.previous, back.published_at, back.revision, back.generation) == (
        rotated.current, rotated.previous, rotated.published_at, rotated.revision, f"u-1.{rotated.revision}")
    assert base64.b64decode(body["data"]["ca-bundle.crt"]) == rotated.bundle()
    with pytest.raises(ValueError, match=r"no ca\.crt"):
        serving_ca.state_from_secret({"metadata": {}, "data": {}})
    with pytest.raises(ValueError, match="not a PEM pair"):
        serving_ca.state_from_secret({"metadata": {}, "data": {"ca.crt": base64.b64encode(b"junk").decode(),
                                                               "ca.key": ""}})


def _apiservice(**spec: object) -> dict[str, object]:
    return {"metadata": {"name": "v1alpha1.metrics.colocation.dev", "resourceVersion": "3"},
            "spec": {"service": {"namespace": SERVICE[0], "name": SERVICE[1]}, **spec}}


def test_an_apiservice_gets_the_bundle_and_verification_once() -> None:
    state = dataclasses.replace(first_state(), uid="u-1")
    patch = serving_ca.apiservice_patch(_apiservice(insecureSkipTLSVerify=True), state, SERVICE)
    assert patch == {"metadata": {"resourceVersion": "3", "annotations": {serving_ca.GENERATION_ANNOTATION: "u-1.1"}},
                     "spec": {"caBundle": base64.b64encode(state.bundle()).decode(), "insecureSkipTLSVerify": False}}
    patched = _apiservice(caBundle=patch["spec"]["caBundle"], insecureSkipTLSVerify=False)
    patched["metadata"] = {**patch["metadata"], "name": "x"}
    assert serving_ca.apiservice_patch(patched, state, SERVICE) is None


def test_a_stale_replica_never_puts_back_an_older_bundle_nor_touches_a_foreign_apiservice() -> None:
    old = dataclasses.replace(first_state(), uid="u-1")
    newer = serving_ca.rotate_ca(old, T0 + 60 * S, POLICY, make_ca=make_ca)
    assert newer is not None
    patched = _apiservice(caBundle=base64.b64encode(newer.bundle()).decode())
    patched["metadata"] = {"annotations": {serving_ca.GENERATION_ANNOTATION: newer.generation}}
    assert serving_ca.apiservice_patch(patched, old, SERVICE) is None
    # A Secret deleted and made again (a new uid) counts again from 1, and wins.
    remade = dataclasses.replace(first_state(), uid="u-2")
    assert serving_ca.apiservice_patch(patched, remade, SERVICE) is not None
    metrics_server = {"metadata": {}, "spec": {"service": {"namespace": "kube-system", "name": "metrics-server"}}}
    assert serving_ca.apiservice_patch(metrics_server, old, SERVICE) is None


@pytest.mark.parametrize(("policy", "problem"), [
    (CaPolicy(renew_fraction=1.0), "between 0 and 1"),
    (CaPolicy(ca_validity=10 * S, renew_fraction=0.5, propagation=5 * S), "must leave at least 10 s"),
    (CaPolicy(), None),
])
def test_a_policy_that_cannot_work_is_refused(policy: CaPolicy, problem: str | None) -> None:
    found = policy.problem()
    assert (found is None) if problem is None else (found is not None and problem in found)


def _webhooks(*services: tuple[str, str], bundle: str = "") -> dict[str, object]:
    return {"metadata": {"name": "colocation-pod-profiles", "resourceVersion": "7"}, "webhooks": [
        {"name": f"w{i}", "clientConfig": {"service": {"namespace": ns, "name": name, "path": "/mutate-pods"},
                                           **({"caBundle": bundle} if bundle else {})}}
        for i, (ns, name) in enumerate(services)]}


def test_a_webhook_configuration_gets_the_bundle_on_our_webhooks_only_and_once() -> None:
    state = dataclasses.replace(first_state(), uid="u-1")
    configuration = _webhooks(SERVICE, ("other", "webhook"))
    patch = serving_ca.webhook_configuration_patch(configuration, state, SERVICE)
    bundle = base64.b64encode(state.bundle()).decode()
    assert patch is not None
    assert patch["metadata"] == {"resourceVersion": "7", "annotations": {serving_ca.GENERATION_ANNOTATION: "u-1.1"}}
    ours, theirs = patch["webhooks"]
    assert ours["clientConfig"] == {"service": {"namespace": SERVICE[0], "name": SERVICE[1], "path": "/mutate-pods"},
                                    "caBundle": bundle}
    assert theirs == configuration["webhooks"][1]  # type: ignore[index]
    patched = {**configuration, "metadata": {**patch["metadata"]}, "webhooks": patch["webhooks"]}
    assert serving_ca.webhook_configuration_patch(patched, state, SERVICE) is None
    assert serving_ca.webhook_configuration_patch(_webhooks(("other", "webhook")), state, SERVICE) is None


def test_a_stale_replica_never_puts_back_an_older_bundle_in_a_webhook_configuration() -> None:
    old = dataclasses.replace(first_state(), uid="u-1")
    newer = serving_ca.rotate_ca(old, T0 + 60 * S, POLICY, make_ca=make_ca)
    assert newer is not None
    patched = _webhooks(SERVICE, bundle=base64.b64encode(newer.bundle()).decode())
    patched["metadata"] = {"annotations": {serving_ca.GENERATION_ANNOTATION: newer.generation}}
    assert serving_ca.webhook_configuration_patch(patched, old, SERVICE) is None
