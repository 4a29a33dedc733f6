"""Contract: watches, as informers use them (order, resume, 410, bookmarks, initial events, selectors)."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.kube import TIME_FACTOR, Kube, configmap, create, event_names, events_until, get, next_event
from tests.timing import eventually_async

MERGE = "application/merge-patch+json"


def cm_path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    return f"{base}/{name}" if name else base


def named(name: str, type_: str) -> Any:
    return lambda event: event["type"] == type_ and event["object"]["metadata"].get("name") == name


def kubeconfig_ca(kubeconfig: Path) -> str:
    """The PEM of the CA the kubeconfig trusts for its cluster: the cluster's CA."""
    cluster = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]
    if "certificate-authority-data" in cluster:
        return base64.b64decode(cluster["certificate-authority-data"]).decode()
    return Path(cluster["certificate-authority"]).read_text()


async def list_rv(kube: Kube, path: str) -> str:
    return str((await get(kube, path))["metadata"]["resourceVersion"])


# Watches here select the objects their test creates: a real cluster writes to fresh namespaces too
# (kube-controller-manager's root-ca-cert-publisher creates ConfigMap kube-root-ca.crt in each).
OURS = {"watched": "yes"}
OURS_SELECTOR = "watched=yes"


async def test_added_modified_deleted_arrive_in_order(kube: Kube, namespace: str) -> None:
    rv = await list_rv(kube, cm_path(namespace))
    async with kube.watch(cm_path(namespace), resourceVersion=rv) as events:
        await create(kube, cm_path(namespace), configmap("watched", {"v": "1"}))
        status, _ = await kube.request("PATCH", cm_path(namespace, "watched"), {"data": {"v": "2"}},
                                       content_type=MERGE)
        assert status == 200
        status, _ = await kube.request("DELETE", cm_path(namespace, "watched"))
        assert status == 200
        seen = await events_until(events, named("watched", "DELETED"))
    ours = [e for e in seen if e["object"]["metadata"]["name"] == "watched"]
    assert [e["type"] for e in ours] == ["ADDED", "MODIFIED", "DELETED"]
    assert ours[1]["object"]["data"] == {"v": "2"}
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in ours]
    assert versions == sorted(versions) and len(set(versions)) == 3


async def test_every_namespace_gets_the_cluster_ca_from_the_root_ca_publisher(kube: Kube, namespace: str,
                                                                             kubeconfig: Path) -> None:
    cluster_ca = kubeconfig_ca(kubeconfig)

    async def published() -> dict[str, Any] | None:
        status, body = await kube.request("GET", cm_path(namespace, "kube-root-ca.crt"))
        return body if status == 200 else None

    root_ca = await eventually_async(published, timeout=30)
    assert root_ca["data"] == {"ca.crt": cluster_ca}
    assert root_ca["metadata"]["annotations"]["kubernetes.io/description"].startswith("Contains a CA bundle")

    status, _ = await kube.request("DELETE", cm_path(namespace, "kube-root-ca.crt"))
    assert status == 200
    assert (await eventually_async(published, timeout=30))["data"] == {"ca.crt": cluster_ca}  # put back

    async def reset() -> bool:
        return (await get(kube, cm_path(namespace, "kube-root-ca.crt"))).get("data") == {"ca.crt": cluster_ca}

    status, _ = await kube.request("PATCH", cm_path(namespace, "kube-root-ca.crt"), {"data": {"ca.crt": "mine"}},
                                   content_type=MERGE)
    assert status == 200
    await eventually_async(reset, timeout=30)


async def test_watch_resumes_after_the_given_resource_version(kube: Kube, namespace: str) -> None:
    first = await create(kube, cm_path(namespace), configmap("before", labels=OURS))
    status, _ = await kube.request("PATCH", cm_path(namespace, "before"), {"data": {"x": "1"}}, content_type=MERGE)
    assert status == 200
    await create(kube, cm_path(namespace), configmap("after", labels=OURS))
    async with kube.watch(cm_path(namespace), resourceVersion=first["metadata"]["resourceVersion"],
                          labelSelector=OURS_SELECTOR) as events:
        seen = await events_until(events, named("after", "ADDED"))
    # The creation at the given version is not replayed; everything after it is, in order.
    assert event_names(seen) == [("MODIFIED", "before"), ("ADDED", "after")]


async def test_watch_from_a_compacted_resource_version_is_expired_in_stream(kube: Kube, namespace: str) -> None:
    # Events are kept out of kube-apiserver's watch cache, so their watches are served by etcd, which
    # forgets old revisions at each compaction (every minute here, five by default). A young real
    # cluster may not have compacted revision 1 yet: wait for that, with a deadline. (A watch-cached
    # resource such as ConfigMaps expires a version only once its cache has dropped the events after
    # it, which a test cannot bring about in reasonable time; the sandbox-only test below shows it.)
    async def expired() -> tuple[dict[str, Any], dict[str, Any] | None] | None:
        async with kube.watch(f"/api/v1/namespaces/{namespace}/events", resourceVersion="1") as events:
            try:
                event = await next_event(events, timeout=2)
            except TimeoutError:
                return None  # revision 1 is still there: nothing happened in this namespace since
            assert event is not None
            return event, await next_event(events)

    event, after = await eventually_async(expired, timeout=300, interval=1)
    assert event["type"] == "ERROR"
    assert (event["object"]["kind"], event["object"]["code"], event["object"]["reason"]) == ("Status", 410, "Expired")
    assert after is None  # the server ends the stream after the error


@pytest.mark.sandbox_only
async def test_watch_position_that_fell_out_of_the_window_is_expired(small_window_kube: Kube) -> None:
    kube = small_window_kube
    await create(kube, "/api/v1/namespaces", {"metadata": {"name": "churn"}})
    start = await create(kube, cm_path("churn"), configmap("counter", {"n": "0"}))
    for n in range(1, 120):  # the small sandbox keeps the last 100 events per resource
        status, _ = await kube.request("PATCH", cm_path("churn", "counter"), {"data": {"n": str(n)}},
                                       content_type=MERGE)
        assert status == 200
    async with kube.watch(cm_path("churn"), resourceVersion=start["metadata"]["resourceVersion"]) as events:
        event = await next_event(events)
    assert event is not None and event["type"] == "ERROR"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")
    assert "too old resource version" in event["object"]["message"]


@pytest.mark.sandbox_only
async def test_bookmarks_report_progress_when_allowed(small_window_kube: Kube) -> None:
    kube = small_window_kube
    await create(kube, "/api/v1/namespaces", {"metadata": {"name": "bookmarked"}})
    created = await create(kube, cm_path("bookmarked"), configmap("quiet"))
    async with kube.watch(cm_path("bookmarked"), resourceVersion=created["metadata"]["resourceVersion"],
                          allowWatchBookmarks="true") as events:
        seen = await events_until(events, lambda e: e["type"] == "BOOKMARK", timeout=5)
    bookmark = seen[-1]["object"]
    assert (bookmark["kind"], bookmark["apiVersion"]) == ("ConfigMap", "v1")
    assert int(bookmark["metadata"]["resourceVersion"]) >= int(created["metadata"]["resourceVersion"])
    assert set(bookmark["metadata"]) <= {"resourceVersion", "annotations", "creationTimestamp"}


async def test_send_initial_events_lists_then_marks_the_end(kube: Kube, namespace: str) -> None:
    for name in ("x", "y"):
        await create(kube, cm_path(namespace), configmap(name, labels={"initial": "yes"}))
    async with kube.watch(cm_path(namespace), sendInitialEvents="true", resourceVersionMatch="NotOlderThan",
                          allowWatchBookmarks="true", labelSelector="initial=yes") as events:
        seen = await events_until(events, lambda e: e["type"] == "BOOKMARK"
                                  and (e["object"]["metadata"].get("annotations") or {})
                                  .get("k8s.io/initial-events-end") == "true")
        await create(kube, cm_path(namespace), configmap("z", labels={"initial": "yes"}))
        later = await events_until(events, named("z", "ADDED"))
    initial = [e for e in seen if e["type"] != "BOOKMARK"]
    assert sorted(event_names(initial)) == [("ADDED", "x"), ("ADDED", "y")]
    assert event_names(later)[-1] == ("ADDED", "z")


async def test_send_initial_events_requires_resource_version_match_not_older_than(kube: Kube,
                                                                                  namespace: str) -> None:
    status, body = await kube.request("GET", cm_path(namespace), params={
        "watch": "true", "sendInitialEvents": "true"})
    assert (status, body["reason"], body["details"]["kind"]) == (422, "Invalid", "ListOptions")
    assert body["details"]["causes"] == [{
        "reason": "FieldValueForbidden", "field": "resourceVersionMatch",
        "message": "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"}]
    status, body = await kube.request("GET", cm_path(namespace), params={"sendInitialEvents": "true"})
    assert (status, body["details"]["causes"][0]["message"]) == (
        422, "Forbidden: sendInitialEvents is forbidden for list")
    status, body = await kube.request("GET", cm_path(namespace), params={"resourceVersionMatch": "Exact"})
    assert (status, body["details"]["causes"][0]["message"]) == (
        422, "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided")


async def test_timeout_seconds_ends_the_stream(kube: Kube, namespace: str) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with kube.watch(cm_path(namespace), timeoutSeconds="1", labelSelector=OURS_SELECTOR) as events:
        assert await next_event(events, timeout=10) is None
    assert loop.time() - started < 10 * TIME_FACTOR


async def test_object_leaving_the_label_selection_is_seen_as_deleted(kube: Kube, namespace: str) -> None:
    rv = await list_rv(kube, cm_path(namespace))
    async with kube.watch(cm_path(namespace), resourceVersion=rv, labelSelector="team=blue") as events:
        await create(kube, cm_path(namespace), configmap("other", labels={"team": "red"}))
        await create(kube, cm_path(namespace), configmap("mover", labels={"team": "blue"}))
        moves = []
        for team in ("red", "blue"):
            status, moved = await kube.request("PATCH", cm_path(namespace, "mover"),
                                               {"metadata": {"labels": {"team": team}}}, content_type=MERGE)
            assert status == 200
            moves.append(moved["metadata"]["resourceVersion"])
        first = await events_until(events, named("mover", "ADDED"))
        rest = await events_until(events, named("mover", "ADDED"))
    seen = first + rest
    assert event_names(seen) == [("ADDED", "mover"), ("DELETED", "mover"), ("ADDED", "mover")]
    # The watch cache reports the last state that matched, at the version of the change that moved it out.
    left = seen[1]["object"]["metadata"]
    assert (left["labels"], left["resourceVersion"]) == ({"team": "blue"}, moves[0])


async def test_watch_of_one_object_by_name(kube: Kube, namespace: str) -> None:
    rv = await list_rv(kube, cm_path(namespace))
    async with kube.watch(cm_path(namespace), resourceVersion=rv, fieldSelector="metadata.name=target") as events:
        await create(kube, cm_path(namespace), configmap("bystander"))
        await create(kube, cm_path(namespace), configmap("target"))
        status, _ = await kube.request("DELETE", cm_path(namespace, "bystander"))
        assert status == 200
        status, _ = await kube.request("DELETE", cm_path(namespace, "target"))
        assert status == 200
        seen = await events_until(events, named("target", "DELETED"))
    assert event_names(seen) == [("ADDED", "target"), ("DELETED", "target")]


async def test_watch_without_a_resource_version_starts_with_the_current_objects(kube: Kube,
                                                                                namespace: str) -> None:
    await create(kube, cm_path(namespace), configmap("existing", labels={"start": "here"}))
    async with kube.watch(cm_path(namespace), labelSelector="start=here") as events:
        first = await next_event(events)
        await create(kube, cm_path(namespace), configmap("new", labels={"start": "here"}))
        rest = await events_until(events, named("new", "ADDED"))
    assert first is not None
    assert event_names([first, *rest]) == [("ADDED", "existing"), ("ADDED", "new")]


async def test_watch_from_a_list_of_a_quiet_resource_is_not_expired(kube: Kube, namespace: str) -> None:
    # An informer lists, other resources change meanwhile, then it watches from the list's version.
    path = f"/api/v1/namespaces/{namespace}/limitranges"
    rv = await list_rv(kube, path)
    await create(kube, cm_path(namespace), configmap("elsewhere"))
    async with kube.watch(path, resourceVersion=rv) as events:
        await create(kube, path, {"metadata": {"name": "limits"}, "spec": {"limits": [
            {"type": "Container", "default": {"cpu": "100m"}}]}})
        seen = await events_until(events, lambda e: e["type"] != "BOOKMARK")
    assert event_names(seen) == [("ADDED", "limits")]
