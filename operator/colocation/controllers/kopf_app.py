"""Kopf, embedded in the operator process on every replica: what it watches and how it connects.

Kopf runs namespaced over the operator's namespace (the ConfigMap) and watches the
cluster-scoped NodeSLOs and NodeResources. Only `@kopf.on.event` handlers, so Kopf writes no
annotation or finalizer anywhere; its own Events are off. It is started with `spawn_tasks` (the
first half of `kopf.operator`; `run_kopf` is the second), so that the process's own SIGINT and
SIGTERM handlers are put back: the process, not Kopf, decides when to stop.

Why: docs/controllers.md
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, Protocol

import kopf
from kubernetes_asyncio import client

from colocation.controllers.config import CONFIG_MAP_NAME
from colocation.kube import permissions

log = logging.getLogger(__name__)

CONFIG_MAPS = ("", "v1", "configmaps")
NODESLOS = (permissions.SLO_GROUP, "v1alpha1", "nodeslos")
NODERESOURCES = (permissions.SLO_GROUP, "v1alpha1", "noderesources")
# How long Kopf trusts the credentials it got: then it asks again, so a rotated token is picked up.
CREDENTIALS_LIFETIME = dt.timedelta(minutes=5)
# Kopf's share of the shutdown, which the release of the leader Lease waits for.
STOP_TIMEOUT = 1.0

_OP = permissions.OPERATOR_API_CALLS
for _call in (permissions.ApiCall(group=permissions.SLO_GROUP, resource="nodeslos", verb="watch", namespace=None),
              permissions.ApiCall(group=permissions.SLO_GROUP, resource="noderesources", verb="watch", namespace=None),
              permissions.ApiCall(group="", resource="configmaps", verb="watch",
                                  namespace=permissions.OPERATOR_NAMESPACE),
              permissions.ApiCall(group="", resource="namespaces", verb="watch", namespace=None),
              permissions.ApiCall(group="apiextensions.k8s.io", resource="customresourcedefinitions", verb="watch",
                                  namespace=None)):
    permissions.declared(_OP, _call)


class Handlers(Protocol):
    """What the controllers do with each event Kopf delivers (type None: the initial listing)."""

    async def on_config_map(self, type_: str | None, obj: dict[str, Any]) -> None: ...

    def on_nodeslo(self, type_: str | None, obj: dict[str, Any]) -> None: ...

    def on_noderesource(self, type_: str | None, obj: dict[str, Any]) -> None: ...


async def connection_info(configuration: client.Configuration) -> kopf.ConnectionInfo:
    """Kopf's credentials, from the kubernetes-asyncio configuration the process already uses.

    Reading the bearer token through `get_api_key_with_prefix` runs kubernetes-asyncio's refresh
    hook, which rereads a rotated service-account token.
    """
    header = await configuration.get_api_key_with_prefix("BearerToken") or ""
    scheme, _, token = str(header).partition(" ")
    if not token:
        scheme, token = "Bearer", scheme
    return kopf.ConnectionInfo(
        server=str(configuration.host),
        ca_path=configuration.ssl_ca_cert or None,
        insecure=not configuration.verify_ssl,
        scheme=scheme if token else None,
        token=token or None,
        certificate_path=configuration.cert_file or None,
        private_key_path=configuration.key_file or None,
        expiration=dt.datetime.now(tz=dt.UTC) + CREDENTIALS_LIFETIME,
    )


def _raw(event: Mapping[str, Any]) -> tuple[str | None, dict[str, Any]]:
    return event.get("type"), dict(event.get("object") or {})


def build_registry(handlers: Handlers, credentials: Callable[[], Awaitable[kopf.ConnectionInfo]],
                   operator_namespace: str) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return await credentials()

    @kopf.on.event(*CONFIG_MAPS, registry=registry, when=lambda namespace, **_: namespace == operator_namespace)
    async def config_map_event(event: kopf.RawEvent, **_: Any) -> None:
        await handlers.on_config_map(*_raw(event))

    @kopf.on.event(*NODESLOS, registry=registry)
    async def nodeslo_event(event: kopf.RawEvent, **_: Any) -> None:
        handlers.on_nodeslo(*_raw(event))

    @kopf.on.event(*NODERESOURCES, registry=registry)
    async def noderesource_event(event: kopf.RawEvent, **_: Any) -> None:
        handlers.on_noderesource(*_raw(event))

    return registry


def build_settings(config_map_name: str = CONFIG_MAP_NAME) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    settings.posting.enabled = False  # our Events are ours; Kopf would post one per handler log line
    settings.watching.server_timeout = 300  # watches end and resume, as every informer's do
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    settings.networking.request_timeout = 60
    # Only the configuration ConfigMap, server-side: the namespace holds others we do not need.
    settings.watching.field_selectors[CONFIG_MAPS] = f"metadata.name={config_map_name}"
    # Handlers only fill memory; a failed one is retried soon, not in a minute.
    settings.execution.default_backoff = 1.0
    # Handlers return at once; at shutdown, nothing is worth waiting for in the per-object queues.
    settings.queueing.exit_timeout = 0.2
    # A per-object worker (a task, its queue and timers) outlives its last event by this much. At
    # the default 5 s, the NodeSLOs and NodeResources the leader creates at startup, one pair per
    # node, had thousands of workers alive at once (4,000 at 2,000 nodes, counted); the handlers
    # only fill memory, so a worker has nothing to wait for.
    settings.queueing.idle_timeout = 0.5
    return settings


async def run_kopf(registry: kopf.OperatorRegistry, settings: kopf.OperatorSettings, stop_flag: asyncio.Event,
                   *, namespaces: Collection[str], restore_signals: Callable[[], None] | None) -> None:
    """Run Kopf until cancelled; return or raise only if Kopf fails (the caller treats that as fatal).

    Not `kopf.run_tasks`: at its end it cancels, as "hung", every task of the event loop created
    after Kopf started, which in this process includes the API server's request handlers (a
    standby's watch never ends by itself) and would hold the shutdown, and the release of the
    leader Lease, until they are gone. Kopf's root tasks stop their own watchers and workers.
    """
    # Kopf's quiet: per-object messages are DEBUG for us; warnings and errors still show.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    logging.getLogger("kopf.activities").setLevel(logging.WARNING)  # a login every CREDENTIALS_LIFETIME
    tasks = await kopf.spawn_tasks(registry=registry, settings=settings, stop_flag=stop_flag, standalone=True,
                                   namespaces=list(namespaces))
    if restore_signals is not None:
        restore_signals()
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()
    finally:
        stop_flag.set()  # an intended stop: Kopf arms no SIGKILL of its own
        for task in tasks:
            task.cancel()
        _, pending = await asyncio.wait(tasks, timeout=STOP_TIMEOUT)
        if pending:
            log.warning("Kopf did not stop in time", extra={"tasks": sorted(task.get_name() for task in pending)})
