"""The pod mutating admission webhook of ClusterColocationProfiles, served by every replica.

kube-apiserver POSTs an AdmissionReview (admission.k8s.io/v1) to `WEBHOOK_PATH` for each new pod;
the answer allows it, with the JSON patch `koordinator.colocation_profile` computes from what
this replica's `ProfileCache` follows (profiles, namespace labels, PriorityClasses). Anything but
a pod's CREATE is allowed unchanged. A pod that cannot be read, or profiles not listed yet, is
allowed unchanged with a warning; a missing PriorityClass is denied (403). A body that is no
AdmissionReview gets 400 with a Status.

The answers, and why: docs/operator.md#the-pod-webhook-clustercolocationprofile
"""

from __future__ import annotations

import base64
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.objects import Obj
from colocation.apimachinery.served_apigroups import Authenticate, Document, OpenApiDocuments, json_response
from colocation.koordinator.colocation_profile import (
    ColocationProfile,
    Mutation,
    MutationRefused,
    PriorityClassValue,
    ProfileInvalid,
    mutate_pod,
    parse_profile,
)
from colocation.kube import permissions
from colocation.kube.informer import Informer, Transport
from colocation.kube.permissions import OPERATOR_API_CALLS, ApiCall

log = logging.getLogger(__name__)

WEBHOOK_PATH = "/mutate-pods"
REVIEW_VERSION = "admission.k8s.io/v1"

# What the cache lists and watches, declared (permissions) so that the RBAC grants exactly it.
_PROFILES = permissions.declared(OPERATOR_API_CALLS,
                                 ApiCall(group=permissions.SLO_GROUP, resource="clustercolocationprofiles",
                                         verb="watch", namespace=None))
_NAMESPACES = permissions.declared(OPERATOR_API_CALLS,
                                   ApiCall(group="", resource="namespaces", verb="watch", namespace=None))
_PRIORITY_CLASSES = permissions.declared(OPERATOR_API_CALLS,
                                         ApiCall(group="scheduling.k8s.io", resource="priorityclasses", verb="watch",
                                                 namespace=None))


class ProfileCache:
    """The ClusterColocationProfiles, namespace labels and PriorityClass values this replica follows."""

    def __init__(self) -> None:
        self.profiles: dict[str, ColocationProfile] = {}
        self.namespace_labels: dict[str, Mapping[str, str]] = {}
        self.priority_classes: dict[str, PriorityClassValue] = {}
        self._informers: list[Informer[Any]] = []

    @property
    def synced(self) -> bool:
        return bool(self._informers) and all(informer.synced.is_set() for informer in self._informers)

    def informers(self, transport: Transport,
                  on_error: Callable[[str, str], None] | None = None) -> list[Informer[Any]]:
        """The three informers to run (each until cancelled); `on_error(informer, reason)` hears
        of every failed list or watch."""
        self._informers = [
            _informer(transport, f"/apis/{_PROFILES.group}/v1alpha1/{_PROFILES.resource}", self.profiles,
                      entry=_profile_entry, on_error=on_error),
            _informer(transport, f"/api/v1/{_NAMESPACES.resource}", self.namespace_labels,
                      entry=lambda obj: dict((obj.get("metadata") or {}).get("labels") or {}), on_error=on_error),
            _informer(transport, f"/apis/{_PRIORITY_CLASSES.group}/v1/{_PRIORITY_CLASSES.resource}",
                      self.priority_classes, entry=_priority_class_entry, on_error=on_error),
        ]
        return self._informers


def _profile_entry(obj: Obj) -> ColocationProfile | None:
    try:
        return parse_profile(obj)
    except ProfileInvalid as error:  # the CRD's schema lets few through; this one is left out
        log.warning("ClusterColocationProfile ignored", extra={"error": str(error)})
        return None


def _priority_class_entry(obj: Obj) -> PriorityClassValue | None:
    value = obj.get("value")
    if not isinstance(value, int):
        return None
    return PriorityClassValue(value, obj.get("preemptionPolicy"))


def _informer(transport: Transport, path: str, into: dict[str, Any], *, entry: Callable[[Obj], Any],
              on_error: Callable[[str, str], None] | None) -> Informer[Any]:
    """An informer keeping `into` as name -> entry(object) (objects whose entry is None left out)."""

    def put(obj: Obj) -> None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        value = entry(obj)
        if value is None:
            into.pop(name, None)
        else:
            into[name] = value

    async def on_sync(items: list[Obj], resource_version: str) -> None:
        into.clear()
        for item in items:
            put(item)

    async def on_event(type_: str, obj: Obj) -> None:
        if type_ == "DELETED":
            into.pop(str((obj.get("metadata") or {}).get("name") or ""), None)
        else:
            put(obj)

    name = path.rsplit("/", 1)[-1]
    return Informer(transport, path, on_sync=on_sync, on_event=on_event, name=name,
                    on_error=(lambda reason: on_error(name, reason)) if on_error is not None else None)


class WebhookMetrics:
    def __init__(self, registry: CollectorRegistry, cache: ProfileCache) -> None:
        self.reviews = Counter("colocation_pod_webhook_reviews_total",
                               "AdmissionReviews of pods answered, by result (mutated, unchanged, warned, "
                               "denied).", ["result"], registry=registry)
        self.left_out = Counter("colocation_pod_webhook_left_out_total",
                                "Parts of ClusterColocationProfiles left out of pods they applied to (a patch "
                                "that cannot be applied safely, a label or annotation kube-apiserver would "
                                "refuse), one per warning.", registry=registry)
        self.informer_failures = Counter("colocation_pod_webhook_informer_failures_total",
                                         "Failed lists and watches of the pod webhook's informers, by informer "
                                         "and reason (retried with backoff).", ["informer", "reason"],
                                         registry=registry)
        profiles = Gauge("colocation_pod_webhook_profiles", "ClusterColocationProfiles this replica applies.",
                         registry=registry)
        profiles.set_function(lambda: len(cache.profiles))


class PodMutationWebhook:
    """An ApiGroup with no API of its own: the webhook's route on the operator's HTTPS server."""

    def __init__(self, cache: ProfileCache, registry: CollectorRegistry,
                 roll: Callable[[], int] = lambda: random.randrange(100)) -> None:
        self.cache = cache
        self.metrics = WebhookMetrics(registry, cache)
        self.roll = roll

    def informers(self, transport: Transport) -> list[Informer[Any]]:
        """The cache's informers, their failures counted."""
        return self.cache.informers(transport, lambda name, reason: self.metrics.informer_failures.labels(
            name, reason).inc())

    def discovery_groups(self) -> Mapping[str, Sequence[str]]:
        return {}

    def resource_lists(self) -> Mapping[str, Document]:
        return {}

    def openapi(self) -> OpenApiDocuments | None:
        return None

    def add_routes(self, router: web.UrlDispatcher, authenticate: Authenticate) -> None:
        # kube-apiserver calls webhooks without credentials unless its admission configuration
        # gives it some; the answer is computed from what the caller sent and reveals nothing else.
        router.add_post(WEBHOOK_PATH, self._review)

    async def _review(self, request: web.Request) -> web.Response:
        try:
            review = orjson.loads(await request.read())
        except orjson.JSONDecodeError as error:
            raise ApiError.bad_request(f"the body is not JSON: {error}") from None
        answer = self.answer(review)
        return json_response(answer)

    def answer(self, review: Any) -> dict[str, Any]:
        """The AdmissionReview answering `review` (raises ApiError 400 when it is none)."""
        if not isinstance(review, dict) or review.get("kind") != "AdmissionReview" or \
                review.get("apiVersion") != REVIEW_VERSION or not isinstance(review.get("request"), dict):
            raise ApiError.bad_request(f"expected an AdmissionReview of {REVIEW_VERSION} with a request")
        request = review["request"]
        uid = request.get("uid")
        if not isinstance(uid, str) or not uid:
            raise ApiError.bad_request("the AdmissionReview's request has no uid")
        response = self._decide(request)
        response["uid"] = uid
        return {"apiVersion": REVIEW_VERSION, "kind": "AdmissionReview", "response": response}

    def _decide(self, request: dict[str, Any]) -> dict[str, Any]:
        resource = request.get("resource") or {}
        if (request.get("operation") != "CREATE" or request.get("subResource")
                or (resource.get("group"), resource.get("resource")) != ("", "pods")):
            return {"allowed": True}
        pod = request.get("object")
        namespace = request.get("namespace") or ""
        if not isinstance(pod, dict) or not isinstance(pod.get("spec"), dict):
            return self._warned("the request holds no pod object", namespace)
        if not self.cache.synced:
            return self._warned("this replica has not listed the ClusterColocationProfiles yet", namespace)
        warnings = []
        labels = self.cache.namespace_labels.get(namespace)
        if labels is None:
            warnings.append(f"namespace {namespace!r} is not known to this replica yet: its labels taken as none")
        try:
            mutation = mutate_pod(self.cache.profiles.values(), labels or {}, pod,
                                  priority_classes=self.cache.priority_classes, roll=self.roll)
        except MutationRefused as error:
            self.metrics.reviews.labels("denied").inc()
            log.info("pod creation denied", extra={"namespace": namespace, "reason": str(error)})
            return {"allowed": False, "status": {"status": "Failure", "code": 403, "reason": "Forbidden",
                                                 "message": str(error)}}
        return self._allowed(mutation, namespace, pod, warnings=warnings)

    def _allowed(self, mutation: Mutation, namespace: str, pod: dict[str, Any],
                 *, warnings: list[str]) -> dict[str, Any]:
        response: dict[str, Any] = {"allowed": True}
        metadata = pod.get("metadata") or {}
        if mutation.warnings:
            self.metrics.left_out.inc(len(mutation.warnings))
            warnings = [*warnings, *mutation.warnings]
            log.warning("ClusterColocationProfiles applied in part", extra={
                "namespace": namespace, "pod": metadata.get("name") or metadata.get("generateName") or "",
                "profiles": ",".join(mutation.applied), "reason": "; ".join(mutation.warnings)})
        if warnings:
            response["warnings"] = warnings
        if not mutation.patch:
            self.metrics.reviews.labels("unchanged").inc()
            return response
        self.metrics.reviews.labels("mutated").inc()
        log.info("pod mutated by ClusterColocationProfiles", extra={
            "namespace": namespace, "pod": metadata.get("name") or metadata.get("generateName") or "",
            "profiles": ",".join(mutation.applied)})
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(mutation.patch)).decode()
        return response

    def _warned(self, why: str, namespace: str) -> dict[str, Any]:
        self.metrics.reviews.labels("warned").inc()
        log.warning("pod admitted without ClusterColocationProfiles", extra={"namespace": namespace, "reason": why})
        return {"allowed": True, "warnings": [f"ClusterColocationProfiles not applied: {why}"]}

