"""kube-scheduler's configuration file, with the operator's load-aware extender, and the relay that
reaches a Ready operator replica from this machine.

kube-scheduler runs with `--config` (where `--kubeconfig` is ignored: the file's
`clientConnection.kubeconfig`). Once the operator's CA exists, the file gains the extender and the
scheduler restarts (`ControlPlane.restart_scheduler`). Its `urlPrefix` is a relay on loopback,
because nothing here routes a ClusterIP: the relay plays kube-proxy for the one Service, passing
each connection, TLS untouched, to the extender port of a Ready endpoint of Service
`colocation-operator` (round robin; the endpoints read every second). So the scheduler verifies the
Service's DNS name (`tlsConfig.serverName`) against the operator's CA, as it would through a
ClusterIP, and presents a client certificate of the cluster's CA, which the replicas require
(`--scheduler-extender-client-ca-file`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from colocation.apimachinery.event_wait import wait_set
from colocation.kube import permissions

log = logging.getLogger(__name__)

EXTENDER_PORT = 8444  # every replica's --scheduler-extender-port
SERVICE_NAME = "colocation-operator"
SERVER_NAME = f"{SERVICE_NAME}.{permissions.OPERATOR_NAMESPACE}.svc"
HTTP_TIMEOUT = "1s"  # a hung replica costs a pod this long, then the scheduler goes on without it
ENDPOINTS_PERIOD = 1.0
CONNECT_TIMEOUT = 1.0
MAX_CONNECTIONS = 64
_CHUNK = 65536
CLIENT_QPS = 500  # kube-scheduler's requests a second to kube-apiserver (burst twice that)


@dataclass(frozen=True, kw_only=True)
class ExtenderSettings:
    url_prefix: str
    ca_pem: bytes  # the operator's CA bundle
    client_cert_file: str
    client_key_file: str


def scheduler_configuration(kubeconfig: str, extender: ExtenderSettings | None) -> dict[str, Any]:
    """A KubeSchedulerConfiguration: this kubeconfig, no leader election, and the extender if given."""
    config: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        # qps and burst: the defaults (50, 100) would cap bindings near 50 pods a second, which is
        # less than kube-scheduler places here, and would hide what the extender costs.
        "clientConnection": {"kubeconfig": kubeconfig, "qps": CLIENT_QPS, "burst": 2 * CLIENT_QPS},
        "leaderElection": {"leaderElect": False},
    }
    if extender is not None:
        config["extenders"] = [{
            "urlPrefix": extender.url_prefix, "filterVerb": "filter", "prioritizeVerb": "prioritize",
            "weight": 1, "enableHTTPS": True, "nodeCacheCapable": True, "ignorable": True,
            "httpTimeout": HTTP_TIMEOUT,
            "tlsConfig": {"serverName": SERVER_NAME, "caData": base64.b64encode(extender.ca_pem).decode(),
                          "certFile": extender.client_cert_file, "keyFile": extender.client_key_file},
        }]
    return config


def ready_addresses(slices: dict[str, Any]) -> list[str]:
    """The addresses of the ready endpoints in an EndpointSliceList, in order, once each."""
    found: dict[str, None] = {}
    for item in slices.get("items") or ():
        for endpoint in item.get("endpoints") or ():
            if (endpoint.get("conditions") or {}).get("ready") is not False:
                found.update(dict.fromkeys(endpoint.get("addresses") or ()))
    return list(found)


class ServiceRelay:
    """TCP on loopback to `port` of a ready endpoint of the Service, as `list_slices` reads them."""

    def __init__(self, list_slices: Callable[[], Awaitable[dict[str, Any]]], *, port: int = EXTENDER_PORT) -> None:
        self._list_slices = list_slices
        self._port = port
        self._ready: list[str] = []
        self._turn = 0
        self._slots = asyncio.Semaphore(MAX_CONNECTIONS)
        self._server: asyncio.Server | None = None

    async def start(self, host: str = "127.0.0.1") -> int:
        self._server = await asyncio.start_server(self._relay, host, 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def follow_endpoints(self, stop: asyncio.Event) -> None:
        """Read the endpoints now, then every ENDPOINTS_PERIOD until `stop`."""
        while True:
            try:
                self._ready = ready_addresses(await self._list_slices())
            except Exception as error:  # a slow or restarting API server: keep the last addresses
                log.warning("reading the operator's endpoints failed", extra={"error": str(error)})
            if stop.is_set() or await wait_set(stop, ENDPOINTS_PERIOD):
                return

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with self._slots:
            upstream = await self._connect()
            if upstream is None:
                writer.close()
                return
            up_reader, up_writer = upstream
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        addresses = list(self._ready)
        for _ in addresses:
            self._turn = (self._turn + 1) % len(addresses)
            with contextlib.suppress(OSError, TimeoutError):
                return await asyncio.wait_for(asyncio.open_connection(addresses[self._turn], self._port),
                                              CONNECT_TIMEOUT)
        return None


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(_CHUNK):
            writer.write(chunk)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()
