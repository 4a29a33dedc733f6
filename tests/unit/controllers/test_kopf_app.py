"""How Kopf is embedded: its credentials come from our client configuration, and it keeps no state."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from colocation.controllers import kopf_app


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None, str]] = []

    async def on_config_map(self, type_: str | None, obj: dict[str, Any]) -> None:
        self.seen.append(("configmap", type_, obj["metadata"]["name"]))

    def on_nodeslo(self, type_: str | None, obj: dict[str, Any]) -> None:
        self.seen.append(("nodeslo", type_, obj["metadata"]["name"]))

    def on_noderesource(self, type_: str | None, obj: dict[str, Any]) -> None:
        self.seen.append(("noderesource", type_, obj["metadata"]["name"]))


async def test_kopf_logs_in_with_the_token_and_ca_of_our_configuration() -> None:
    configuration = client.Configuration()
    configuration.host = "https://10.0.0.1:6443"
    configuration.ssl_ca_cert = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
    configuration.api_key = {"BearerToken": "Bearer abc.def"}
    info = await kopf_app.connection_info(configuration)
    assert (info.server, info.ca_path, info.scheme, info.token) == (
        "https://10.0.0.1:6443", "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt", "Bearer", "abc.def")
    assert info.insecure is False and info.expiration is not None


async def test_a_rotated_token_is_read_at_each_login() -> None:
    configuration = client.Configuration()
    configuration.host = "https://10.0.0.1:6443"
    configuration.api_key = {"BearerToken": "old"}

    def refresh(config: client.Configuration) -> None:
        config.api_key["BearerToken"] = "rotated"

    configuration.refresh_api_key_hook = refresh
    info = await kopf_app.connection_info(configuration)
    assert (info.scheme, info.token) == ("Bearer", "rotated")


async def test_kopf_client_certificates_are_passed_on() -> None:
    configuration = client.Configuration()
    configuration.host = "https://127.0.0.1:6443"
    configuration.cert_file, configuration.key_file = "/tmp/admin.crt", "/tmp/admin.key"
    info = await kopf_app.connection_info(configuration)
    assert (info.certificate_path, info.private_key_path, info.token) == ("/tmp/admin.crt", "/tmp/admin.key", None)


def test_only_event_handlers_are_registered_so_nothing_is_stored_on_objects() -> None:
    registry = kopf_app.build_registry(Recorder(), lambda: None, "colocation-system")  # type: ignore[arg-type,return-value]
    assert len(registry._watching.get_all_handlers()) == 3  # ConfigMap, NodeSLOs, NodeResources
    assert not registry._changing.get_all_handlers()  # no on.create/update/delete: no annotations
    assert not registry._spawning.get_all_handlers()  # no daemons or timers: no finalizers
    assert len(registry._activities.get_all_handlers()) == 1  # the login


def test_kopf_posts_no_events_and_watches_only_the_configuration_configmap() -> None:
    settings = kopf_app.build_settings()
    assert settings.posting.enabled is False
    assert [str(value) for value in settings.watching.field_selectors.values()] == ["metadata.name=colocation-config"]


def test_a_per_object_worker_ends_soon_after_its_last_event() -> None:
    # Kopf's default (5 s) kept a worker per NodeSLO and NodeResource alive through the leader's
    # startup, when it creates one of each per node: thousands of tasks and queues at once.
    assert kopf_app.build_settings().queueing.idle_timeout <= 1.0


def test_nodes_and_leases_are_not_kopfs() -> None:
    registry = kopf_app.build_registry(Recorder(), lambda: None, "colocation-system")  # type: ignore[arg-type,return-value]
    watched = {handler.selector.any_name for handler in registry._watching.get_all_handlers()
               if handler.selector is not None}
    assert watched == {"configmaps", "nodeslos", "noderesources"}
