"""Contract: label and field selectors, and limit/continue pagination of lists."""

from __future__ import annotations

import pytest

from tests.e2e.kube import Kube, configmap, create, pod_manifest


async def names(kube: Kube, path: str, **params: str) -> set[str]:
    status, listed = await kube.request("GET", path, params=params)
    assert status == 200, listed
    return {item["metadata"]["name"] for item in listed["items"]}


@pytest.fixture
async def labelled(kube: Kube, namespace: str) -> str:
    """Four ConfigMaps: a (env=prod, tier=web), b (env=dev, tier=web), c (env=test), d (no labels)."""
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    for name, labels in (("a", {"env": "prod", "tier": "web"}), ("b", {"env": "dev", "tier": "web"}),
                         ("c", {"env": "test"}), ("d", {"e2e": "unlabelled"})):
        await create(kube, path, configmap(name, labels=labels))
    return path


@pytest.mark.parametrize(("selector", "expected"), [
    ("env=prod", {"a"}),
    ("env==prod", {"a"}),
    ("env!=prod", {"b", "c", "d"}),  # != also matches objects without the label
    ("env in (prod,dev)", {"a", "b"}),
    ("env notin (prod,dev)", {"c", "d"}),
    ("tier", {"a", "b"}),
    ("!tier", {"c", "d"}),
    ("tier=web,env!=dev", {"a"}),
])
async def test_label_selector(kube: Kube, labelled: str, selector: str, expected: set[str]) -> None:
    assert await names(kube, labelled, labelSelector=selector) - {"kube-root-ca.crt"} == expected


@pytest.mark.parametrize("selector", ["env in prod", "env=(", "=prod", "env notin", "a b"])
async def test_unparsable_label_selector_is_bad_request(kube: Kube, namespace: str, selector: str) -> None:
    status, body = await kube.request("GET", f"/api/v1/namespaces/{namespace}/configmaps",
                                      params={"labelSelector": selector})
    assert (status, body["reason"]) == (400, "BadRequest")


async def test_field_selector_on_metadata_name(kube: Kube, labelled: str) -> None:
    assert await names(kube, labelled, fieldSelector="metadata.name=b") == {"b"}
    assert await names(kube, labelled, fieldSelector="metadata.name!=b", labelSelector="env") == {"a", "c"}


async def test_field_selector_on_pod_node_name(kube: Kube, namespace: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/pods"
    await create(kube, path, pod_manifest("pending"))
    # Binding assigns a node, as the scheduler does; creating pods with nodeName would start them
    # on a real cluster's node.
    await create(kube, path, pod_manifest("placed"))
    status, body = await kube.request("POST", f"{path}/placed/binding", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "placed"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "e2e-node-that-does-not-exist"}})
    assert status == 201, body
    assert await names(kube, path, fieldSelector="spec.nodeName=e2e-node-that-does-not-exist") == {"placed"}
    assert await names(kube, path, fieldSelector="spec.nodeName=") == {"pending"}


async def test_field_selector_on_event_involved_object(kube: Kube, namespace: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/events"
    for event_name, about in (("e1", "alpha"), ("e2", "beta"), ("e3", "alpha")):
        await create(kube, path, {
            "metadata": {"name": event_name}, "reason": "Tested", "message": "contract test", "type": "Normal",
            "involvedObject": {"kind": "ConfigMap", "namespace": namespace, "name": about, "apiVersion": "v1"}})
    assert await names(kube, path, fieldSelector="involvedObject.name=alpha") == {"e1", "e3"}
    assert await names(kube, path, fieldSelector="involvedObject.name=alpha,involvedObject.kind=Pod") == set()


async def test_unsupported_field_selector_is_bad_request(kube: Kube, namespace: str) -> None:
    status, body = await kube.request("GET", f"/api/v1/namespaces/{namespace}/configmaps",
                                      params={"fieldSelector": "data.colour=blue"})
    assert (status, body["reason"]) == (400, "BadRequest")
    assert "data.colour" in body["message"]


async def test_limit_and_continue_return_every_object_exactly_once(kube: Kube, namespace: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    expected = {f"page-{i:02}" for i in range(7)}
    for name in sorted(expected):
        await create(kube, path, configmap(name, labels={"paged": "yes"}))

    seen: list[str] = []
    pages = 0
    token = ""
    while True:
        params = {"limit": "3", "labelSelector": "paged=yes", **({"continue": token} if token else {})}
        status, page = await kube.request("GET", path, params=params)
        assert status == 200, page
        pages += 1
        assert len(page["items"]) <= 3
        seen += [item["metadata"]["name"] for item in page["items"]]
        token = page["metadata"].get("continue", "")
        if not token:
            break
    assert pages == 3
    assert sorted(seen) == sorted(expected)  # none missing, none twice


async def test_first_page_counts_the_remaining_items(kube: Kube, namespace: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/secrets"
    for i in range(5):
        await create(kube, path, {"metadata": {"name": f"s{i}"}, "stringData": {"k": "v"}})
    status, page = await kube.request("GET", path, params={"limit": "2"})
    assert status == 200
    assert len(page["items"]) == 2
    assert page["metadata"]["remainingItemCount"] == 3
    assert page["metadata"]["continue"]


async def test_invalid_continue_token_is_bad_request(kube: Kube, namespace: str) -> None:
    status, body = await kube.request("GET", f"/api/v1/namespaces/{namespace}/configmaps",
                                      params={"limit": "1", "continue": "not-a-token"})
    assert (status, body["reason"]) == (400, "BadRequest")
