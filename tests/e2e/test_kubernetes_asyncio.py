"""The real kubernetes-asyncio client library, configured from the kubeconfig, as the operator uses it."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

from tests.e2e.kopf_example import widget_crd
from tests.e2e.kube import Kube, ensure_crd

WIDGET = ("e2e.colocation.dev", "v1")


@pytest.fixture
async def api(kubeconfig: Path) -> AsyncIterator[client.ApiClient]:
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as api_client:
        yield api_client


async def collect(stream: AsyncIterator[dict[str, Any]], count: int, timeout: float = 10) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []

    async def read() -> None:
        async for event in stream:
            events.append(event)
            if len(events) == count:
                return

    await asyncio.wait_for(read(), timeout)
    return events


async def test_typed_objects_and_a_resumed_watch(api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api)
    label = f"e2e-run={uuid.uuid4().hex[:8]}"
    key, value = label.split("=")
    first = await core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="first", labels={key: value}), data={"a": "1"}))
    assert first.metadata.uid and first.metadata.resource_version
    assert first.metadata.creation_timestamp is not None  # parsed into a datetime by the client

    read = await core.read_namespaced_config_map("first", namespace)
    assert read.data == {"a": "1"}
    listed = await core.list_namespaced_config_map(namespace, label_selector=label)
    assert [cm.metadata.name for cm in listed.items] == ["first"]
    since = listed.metadata.resource_version

    # Changes made before the watch starts are still delivered: it resumes from the list's version.
    patched = await core.patch_namespaced_config_map("first", namespace, {"data": {"b": "2"}})  # strategic
    assert patched.data == {"a": "1", "b": "2"}
    await core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="second", labels={key: value})))
    await core.delete_namespaced_config_map("first", namespace)
    await core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(
        name="unlabelled")))

    watcher = watch.Watch()
    stream = watcher.stream(core.list_namespaced_config_map, namespace, label_selector=label,
                            resource_version=since, timeout_seconds=10)
    try:
        events = await collect(stream, 3)
    finally:
        watcher.stop()
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("MODIFIED", "first"), ("ADDED", "second"), ("DELETED", "first")]
    assert events[0]["object"].data == {"a": "1", "b": "2"}
    assert isinstance(events[0]["object"], client.V1ConfigMap)
    versions = [int(e["object"].metadata.resource_version) for e in events]
    assert versions == sorted(versions) and versions[0] > int(since)

    with pytest.raises(ApiException) as missing:
        await core.read_namespaced_config_map("first", namespace)
    assert missing.value.status == 404
    assert json.loads(missing.value.body or b"{}")["reason"] == "NotFound"


async def test_custom_objects_patch_content_types(api: client.ApiClient, kube: Kube, namespace: str) -> None:
    await ensure_crd(kube, widget_crd())
    custom = client.CustomObjectsApi(api)
    group, version = WIDGET
    name = f"w-{uuid.uuid4().hex[:6]}"
    created = await custom.create_namespaced_custom_object(group, version, namespace, "widgets", {
        "apiVersion": f"{group}/{version}", "kind": "Widget", "metadata": {"name": name}, "spec": {"size": 2}})
    assert created["metadata"]["generation"] == 1

    # A dict body goes out as application/json-patch+json by default: a JSON patch must be a list,
    # so the server refuses it rather than guessing, and nothing changes.
    with pytest.raises(ApiException) as wrong_type:
        await custom.patch_namespaced_custom_object(group, version, namespace, "widgets", name,
                                                    {"spec": {"size": 7}})
    assert wrong_type.value.status == 400
    assert json.loads(wrong_type.value.body or b"{}")["reason"] == "BadRequest"
    unchanged = await custom.get_namespaced_custom_object(group, version, namespace, "widgets", name)
    assert unchanged["spec"] == {"size": 2}
    assert unchanged["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]

    merged = await custom.patch_namespaced_custom_object(group, version, namespace, "widgets", name,
                                                         {"spec": {"size": 7}},
                                                         _content_type="application/merge-patch+json")  # type: ignore[call-arg]
    assert merged["spec"] == {"size": 7}
    assert merged["metadata"]["generation"] == 2
    # A list is a JSON patch, the default content type's natural body.
    replaced = await custom.patch_namespaced_custom_object(group, version, namespace, "widgets", name,
                                                           [{"op": "replace", "path": "/spec/size", "value": 8}])
    assert replaced["spec"] == {"size": 8}

    # The status subresource takes only the status; the main resource ignores it.
    with_status = await custom.patch_namespaced_custom_object_status(
        group, version, namespace, "widgets", name, {"status": {"phase": "Tested"}, "spec": {"size": 99}},
        _content_type="application/merge-patch+json")  # type: ignore[call-arg]
    assert with_status["status"] == {"phase": "Tested"} and with_status["spec"] == {"size": 8}
    main = await custom.patch_namespaced_custom_object(group, version, namespace, "widgets", name,
                                                       {"status": {"phase": "Ignored"}},
                                                       _content_type="application/merge-patch+json")  # type: ignore[call-arg]
    assert main["status"] == {"phase": "Tested"}

    # The structural schema is enforced, with the offending field named.
    with pytest.raises(ApiException) as invalid:
        await custom.patch_namespaced_custom_object(group, version, namespace, "widgets", name,
                                                    {"spec": {"size": 0}},
                                                    _content_type="application/merge-patch+json")  # type: ignore[call-arg]
    assert invalid.value.status == 422
    causes = json.loads(invalid.value.body or b"{}")["details"]["causes"]
    assert [c["field"] for c in causes] == ["spec.size"]

    # A watch on custom objects yields plain dicts.
    listed = await custom.list_namespaced_custom_object(group, version, namespace, "widgets")
    watcher = watch.Watch()
    stream = watcher.stream(custom.list_namespaced_custom_object, group, version, namespace, "widgets",
                            resource_version=listed["metadata"]["resourceVersion"], timeout_seconds=10)
    await custom.delete_namespaced_custom_object(group, version, namespace, "widgets", name)
    try:
        events = await collect(stream, 1)
    finally:
        watcher.stop()
    assert events[0]["type"] == "DELETED"
    assert events[0]["object"]["metadata"]["name"] == name
