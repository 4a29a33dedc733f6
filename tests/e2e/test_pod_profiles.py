"""ClusterColocationProfiles end to end: kube-apiserver calls the operator's pod webhook.

Real control plane only (`--apiserver kube`): the builtin sandbox calls no admission webhooks, so
there is nothing to test there. The sandbox runs two operator replicas behind the manifests'
Service; the MutatingWebhookConfiguration is the manifests' own, its caBundle patched by the
operator. A pod created in a namespace a profile picks comes back with the profile's priority
class, QoS label, scheduler and batch resources (and, from a second profile, labels and
annotations copied and suffixed, and its patch's labels, node selector and tolerations); a pod
elsewhere is untouched; and a webhook configured as ours but calling a Service with no endpoints
never blocks pod creation.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from colocation.apiserver.pod_mutation_webhook import WEBHOOK_PATH
from colocation.kube.permissions import POD_WEBHOOK_CONFIGURATION
from tests.e2e.conftest import apiserver_kind, sandbox_kind_args
from tests.e2e.kube import Kube, create, fresh_namespace, get, pod_manifest, start_sandbox_process
from tests.timing import eventually_async

WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
PROFILES = "/apis/slo.colocation.dev/v1alpha1/clustercolocationprofiles"
PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
BATCH_SCHEDULER = "e2e-batch-scheduler"  # nobody runs it: the pods stay unscheduled, as the test wants
RESOURCES = {"requests": {"cpu": "500m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}}


@pytest.fixture(scope="module")
def webhook_sandbox(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if apiserver_kind(request.config) != "kube":
        pytest.skip("real control plane only: the builtin sandbox calls no admission webhooks")
    if request.config.getoption("--kubeconfig"):
        pytest.skip("the operator replicas are the sandbox's")
    state = tmp_path_factory.mktemp("webhook-sandbox")
    args = [*sandbox_kind_args(request.config), "--operators", "2", "--nodes", "0", "--probe-interval=0.1"]
    with start_sandbox_process(state, args) as kubeconfig:
        yield kubeconfig


@pytest.fixture
async def admin(webhook_sandbox: Path) -> AsyncIterator[Kube]:
    async with Kube.from_kubeconfig(webhook_sandbox) as kube:
        await eventually_async(lambda: _webhook_trusts_the_operator(kube), timeout=60)
        yield kube


async def _webhook_trusts_the_operator(kube: Kube) -> bool:
    configuration = await get(kube, f"{WEBHOOKS}/{POD_WEBHOOK_CONFIGURATION}")
    return all(webhook["clientConfig"].get("caBundle") for webhook in configuration["webhooks"])


@pytest.fixture
async def batch_profile(admin: Kube) -> AsyncIterator[tuple[str, str]]:
    """(PriorityClass, namespace label) of a batch profile that picks namespaces with that label."""
    suffix = uuid.uuid4().hex[:8]
    priority_class, label = f"e2e-batch-{suffix}", f"e2e-profile-{suffix}"
    await create(admin, PRIORITY_CLASSES, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                           "metadata": {"name": priority_class}, "value": 5500,
                                           "preemptionPolicy": "Never"})
    await create(admin, PROFILES, {
        "apiVersion": "slo.colocation.dev/v1alpha1", "kind": "ClusterColocationProfile",
        "metadata": {"name": f"e2e-{suffix}"},
        "spec": {"namespaceSelector": {"matchLabels": {label: "on"}}, "qosClass": "BE",
                 "priorityClassName": priority_class, "schedulerName": BATCH_SCHEDULER}})
    try:
        yield priority_class, label
    finally:
        await admin.request("DELETE", f"{PROFILES}/e2e-{suffix}")
        await admin.request("DELETE", f"{PRIORITY_CLASSES}/{priority_class}")


@pytest.fixture
async def namespace_of(admin: Kube) -> AsyncIterator[Any]:
    """Fresh namespaces with given labels, deleted afterwards."""
    async with contextlib.AsyncExitStack() as stack:
        async def make(labels: dict[str, str]) -> str:
            name = await stack.enter_async_context(fresh_namespace(admin))
            status, body = await admin.request("PATCH", f"/api/v1/namespaces/{name}",
                                               {"metadata": {"labels": labels}},
                                               content_type="application/merge-patch+json")
            assert status == 200, body
            return name

        yield make


def _pod(name: str) -> dict[str, Any]:
    body = pod_manifest(name, labels={"app": "etl"})
    body["metadata"]["annotations"] = {"example.com/owner": "data-team"}
    body["spec"]["containers"][0]["resources"] = copy.deepcopy(RESOURCES)
    return body


async def _created(kube: Kube, namespace: str, name: str, *, dry_run: bool = False) -> dict[str, Any] | None:
    """The pod as kube-apiserver created it (None while it refuses, e.g. before the namespace's
    ServiceAccount exists)."""
    status, body = await kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", _pod(name),
                                      params={"dryRun": "All"} if dry_run else None)
    return body if status == 201 else None


async def test_a_pod_a_profile_picks_is_created_as_a_batch_pod(admin: Kube, batch_profile: tuple[str, str],
                                                               namespace_of: Any) -> None:
    priority_class, label = batch_profile
    namespace = await namespace_of({label: "on"})

    async def mutated_dry_run() -> bool:
        # Every replica follows the profiles with its own informer: a dry run shows when the
        # answering one has seen it (dry runs call webhooks whose sideEffects are None).
        pod = await _created(admin, namespace, "probe", dry_run=True)
        return pod is not None and pod["spec"].get("priorityClassName") == priority_class

    await eventually_async(mutated_dry_run, timeout=30)
    pod = await _created(admin, namespace, "etl")
    assert pod is not None
    spec, labels = pod["spec"], pod["metadata"]["labels"]
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == (priority_class, 5500, "Never")
    assert spec["schedulerName"] == BATCH_SCHEDULER
    assert labels == {"app": "etl", "koordinator.sh/qosClass": "BE"}
    assert pod["metadata"]["annotations"] == {"example.com/owner": "data-team"}
    assert spec["containers"][0]["resources"] == {
        "requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "64Mi"},
        "limits": {"kubernetes.io/batch-cpu": "1k", "kubernetes.io/batch-memory": "128Mi"}}


TOLERATION = {"key": "colocation.example.com/batch", "operator": "Exists", "effect": "NoSchedule"}


async def test_a_profile_copies_suffixes_and_patches_what_it_picks(admin: Kube, batch_profile: tuple[str, str],
                                                                   namespace_of: Any) -> None:
    """A second profile, after the batch one by name, with Koordinator's mapping, suffix and patch
    fields: kube-apiserver stores the pod with both profiles' changes."""
    priority_class, label = batch_profile
    name = f"zz-{label}"  # after the batch profile's name: it applies second
    await create(admin, PROFILES, {
        "apiVersion": "slo.colocation.dev/v1alpha1", "kind": "ClusterColocationProfile", "metadata": {"name": name},
        "spec": {"namespaceSelector": {"matchLabels": {label: "on"}},
                 "labelKeysMapping": {"app": "example.com/workload"},
                 "annotationKeysMapping": {"example.com/owner": "example.com/billed-to"},
                 "labelSuffixes": {"app": "-batch"},
                 "patch": {"metadata": {"labels": {"patched": "yes"}},
                           "spec": {"nodeSelector": {"pool": "batch"}, "tolerations": [TOLERATION]}}}})
    try:
        namespace = await namespace_of({label: "on"})

        async def both_applied() -> bool:
            pod = await _created(admin, namespace, "probe", dry_run=True)
            return pod is not None and pod["spec"].get("priorityClassName") == priority_class and \
                "patched" in pod["metadata"]["labels"]

        await eventually_async(both_applied, timeout=30)
        pod = await _created(admin, namespace, "etl")
        assert pod is not None
        assert pod["metadata"]["labels"] == {"app": "etl-batch", "example.com/workload": "etl", "patched": "yes",
                                             "koordinator.sh/qosClass": "BE"}
        assert pod["metadata"]["annotations"] == {"example.com/owner": "data-team",
                                                  "example.com/billed-to": "data-team"}
        assert pod["spec"]["nodeSelector"] == {"pool": "batch"}
        # The patch's list, then kube-apiserver's defaults: it runs its own admission plugins
        # (DefaultTolerationSeconds) again after a webhook changed the pod.
        tolerations = pod["spec"]["tolerations"]
        assert tolerations[0] == TOLERATION
        assert {(t["key"], t["effect"]) for t in tolerations[1:]} == {
            ("node.kubernetes.io/not-ready", "NoExecute"), ("node.kubernetes.io/unreachable", "NoExecute")}
        assert pod["spec"]["containers"][0]["resources"]["requests"] == {
            "kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "64Mi"}
    finally:
        await admin.request("DELETE", f"{PROFILES}/{name}")


async def test_a_pod_no_profile_picks_is_created_as_it_was_sent(admin: Kube, batch_profile: tuple[str, str],
                                                                namespace_of: Any) -> None:
    priority_class, label = batch_profile
    picked, elsewhere = await namespace_of({label: "on"}), await namespace_of({})

    async def profile_seen() -> bool:
        pod = await _created(admin, picked, "probe", dry_run=True)
        return pod is not None and pod["spec"].get("priorityClassName") == priority_class

    await eventually_async(profile_seen, timeout=30)  # the replicas know the profile: what follows is its choice
    pod = await eventually_async(lambda: _created(admin, elsewhere, "web"), timeout=30)
    assert "priorityClassName" not in pod["spec"] and "koordinator.sh/qosClass" not in pod["metadata"]["labels"]
    assert pod["spec"]["schedulerName"] != BATCH_SCHEDULER
    assert pod["spec"]["containers"][0]["resources"] == RESOURCES


async def test_a_webhook_nobody_answers_never_blocks_pod_creation(admin: Kube, namespace_of: Any) -> None:
    """Our webhook's settings, calling a Service without endpoints: first with failurePolicy Fail,
    which shows kube-apiserver calls it and fails, then with the manifests' own failurePolicy."""
    namespace = await namespace_of({})
    await create(admin, f"/api/v1/namespaces/{namespace}/services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "nobody"},
        "spec": {"ports": [{"port": 443, "targetPort": 8443}]}})  # no selector, no endpoints
    ours = (await get(admin, f"{WEBHOOKS}/{POD_WEBHOOK_CONFIGURATION}"))["webhooks"][0]
    dead = copy.deepcopy(ours)
    dead["clientConfig"] = {"service": {"namespace": namespace, "name": "nobody", "path": WEBHOOK_PATH, "port": 443},
                            "caBundle": base64.b64encode(b"not a CA").decode()}
    dead["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    name = f"e2e-dead-{namespace}"
    await create(admin, WEBHOOKS, {"apiVersion": "admissionregistration.k8s.io/v1",
                                   "kind": "MutatingWebhookConfiguration", "metadata": {"name": name},
                                   "webhooks": [{**dead, "failurePolicy": "Fail"}]})
    try:
        async def refused_by_the_dead_webhook() -> bool:
            status, body = await admin.request("POST", f"/api/v1/namespaces/{namespace}/pods", _pod("blocked"),
                                               params={"dryRun": "All"})
            return status >= 500 and "failed calling webhook" in str(body)

        await eventually_async(refused_by_the_dead_webhook, timeout=30)
        status, body = await admin.request("PATCH", f"{WEBHOOKS}/{name}", [
            {"op": "replace", "path": "/webhooks/0/failurePolicy", "value": ours["failurePolicy"]}],
                                           content_type="application/json-patch+json")
        assert status == 200, body
        assert ours["failurePolicy"] == "Ignore"
        pod = await eventually_async(lambda: _created(admin, namespace, "created"), timeout=30)
        assert pod["metadata"]["name"] == "created"
    finally:
        await admin.request("DELETE", f"{WEBHOOKS}/{name}")


@pytest.mark.parametrize(("spec", "field"), [
    ({"probability": 150}, "spec.probability"), ({"probability": "150%"}, "spec.probability"),
    ({"qosClass": "GOLD"}, "spec.qosClass"),
    ({"patch": {"spec": {"tolerations": [{"key": "a", "operator": "Exists", "effect": "Evict"}]}}},
     "spec.patch.spec.tolerations[0].effect")])
async def test_a_profile_the_webhook_could_not_apply_is_refused_naming_the_field(admin: Kube, spec: dict[str, Any],
                                                                                 field: str) -> None:
    status, body = await admin.request("POST", PROFILES, {
        "apiVersion": "slo.colocation.dev/v1alpha1", "kind": "ClusterColocationProfile",
        "metadata": {"name": f"e2e-bad-{uuid.uuid4().hex[:8]}"}, "spec": spec})
    assert status == 422, body
    assert field in body["message"]


async def test_a_patch_of_an_unsupported_field_is_refused_under_strict_field_validation(admin: Kube) -> None:
    """kubectl asks for strict field validation: a patch field the schema does not list is refused."""
    status, body = await admin.request("POST", PROFILES, {
        "apiVersion": "slo.colocation.dev/v1alpha1", "kind": "ClusterColocationProfile",
        "metadata": {"name": f"e2e-bad-{uuid.uuid4().hex[:8]}"},
        "spec": {"patch": {"spec": {"hostNetwork": True}}}}, params={"fieldValidation": "Strict"})
    assert status == 400, body
    assert 'unknown field "spec.patch.spec.hostNetwork"' in body["message"]
