"""API aggregation: APIServices routed to their Service's ready endpoints, as kube-aggregator does.

Requests go over HTTPS with the front-proxy client certificate and the caller in `X-Remote-*`
headers. The endpoints of locally run servers come from their Service's annotation
`LOCAL_ENDPOINTS_ANNOTATION`; a prober checks each one's /readyz and keeps the Service's
Endpoints current. Each APIService's Available condition comes from a discovery request to its
backend. Each backend's discovery is kept for aggregated discovery, and shows "Stale" while the
backend does not answer.

How, and the timings: docs/development.md#inside-the-builtin-api-server
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import ssl
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from colocation.apimachinery import certificates
from colocation.apimachinery.clock import format_time
from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.objects import Obj
from colocation.apimachinery.userinfo import UserInfo
from colocation_sandbox.server import api_discovery
from colocation_sandbox.server.api_core import ApiCore
from colocation_sandbox.server.request_paths import Target

log = logging.getLogger(__name__)

LOCAL_ENDPOINTS_ANNOTATION = "sandbox.colocation.dev/local-endpoints"
FRONT_PROXY_CLIENT_NAME = "front-proxy-client"
PROBE_TIMEOUT = aiohttp.ClientTimeout(total=2)
CONNECT_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=5, sock_connect=5)
DISCOVERY_TIMEOUT = aiohttp.ClientTimeout(total=5)  # kube-aggregator's limit on a backend's discovery
DISCOVERY_REFRESH = 60.0  # seconds a backend's discovery is kept before it is asked again
MAX_CLIENT_CONTEXTS = 64  # client ssl contexts kept, one per distinct caBundle
DISCOVERY_RETRY = (0.5, 60.0)  # first and longest wait before asking a failing backend again
AGGREGATED_ACCEPT = ",".join(f"application/json;g=apidiscovery.k8s.io;v={v};as=APIGroupDiscoveryList"
                             for v in ("v2", "v2beta1"))
# Who the aggregator is when it asks backends for discovery and availability.
AGGREGATOR_USER = UserInfo(username="system:kube-aggregator", groups=("system:masters",))
# Hop-by-hop and identity headers never forwarded to a backend.
_DROPPED_REQUEST_HEADERS = frozenset({"authorization", "host", "connection", "keep-alive", "transfer-encoding",
                                      "content-length", "upgrade", "te", "trailer", "proxy-authorization"})
_DROPPED_RESPONSE_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length",
                                       "content-encoding", "upgrade", "te", "trailer"})


def authentication_configmap(front_proxy_ca_pem: bytes, client_ca_pem: bytes) -> Obj:
    """kube-system/extension-apiserver-authentication: how extension servers authenticate callers."""
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "extension-apiserver-authentication", "namespace": "kube-system"},
        "data": {
            "client-ca-file": client_ca_pem.decode(),
            "requestheader-client-ca-file": front_proxy_ca_pem.decode(),
            "requestheader-allowed-names": orjson.dumps([FRONT_PROXY_CLIENT_NAME]).decode(),
            "requestheader-username-headers": orjson.dumps(["X-Remote-User"]).decode(),
            "requestheader-uid-headers": orjson.dumps(["X-Remote-Uid"]).decode(),
            "requestheader-group-headers": orjson.dumps(["X-Remote-Group"]).decode(),
            "requestheader-extra-headers-prefix": orjson.dumps(["X-Remote-Extra-"]).decode(),
        },
    }


def identity_headers(user: UserInfo) -> list[tuple[str, str]]:
    headers = [("X-Remote-User", user.username)]
    if user.uid:
        headers.append(("X-Remote-Uid", user.uid))
    headers += [("X-Remote-Group", group) for group in user.groups]
    for key, values in dict(user.extra).items():
        # Extra keys are case-insensitive header suffixes: escape what a header name cannot carry.
        escaped = urllib.parse.quote(key, safe="")
        headers += [(f"X-Remote-Extra-{escaped}", value) for value in values]
    return headers


def parse_local_endpoints(value: str) -> list[tuple[str, int]]:
    endpoints = []
    for item in filter(None, (part.strip() for part in value.split(","))):
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bad local endpoint {item!r}: expected HOST:PORT")
        endpoints.append((host.strip("[]"), int(port)))
    return endpoints


@dataclass(frozen=True, kw_only=True)
class _Discovered:
    """A backend's discovery of one APIService's group version, as last fetched."""

    key: tuple[str, tuple[tuple[str, int], ...]]  # the APIService's resourceVersion and ready addresses
    document: dict[str, Any]  # its APIVersionDiscovery, freshness included
    etag: str  # the backend's ETag for its aggregated /apis, if it sent one
    due: float  # time.monotonic() after which it is fetched again
    failures: int  # fetches failed in a row


class _DiscoveryFailed(Exception):
    pass


class Aggregator:
    def __init__(self, api: ApiCore, front_proxy_ca: certificates.CertKey, *, probe_interval: float = 1.0) -> None:
        self.api = api
        self.front_proxy_ca = front_proxy_ca
        self.client_cert = certificates.issue_certificate(front_proxy_ca, FRONT_PROXY_CLIENT_NAME, server=False,
                                                     client=True)
        self.probe_interval = probe_interval
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._discovered: dict[str, _Discovered] = {}  # by APIService name
        self._contexts: dict[bytes | None, ssl.SSLContext] = {}  # client contexts by caBundle

    # ---- which requests go where --------------------------------------------------------------

    def _apiservice(self, group: str, version: str) -> Obj | None:
        rt = self.api.rt("apiregistration.k8s.io", "apiservices")
        obj = self.api.store.find(rt, "", f"{version}.{group}")
        if obj is None or not (obj.get("spec") or {}).get("service"):
            return None
        return obj

    def serves(self, group: str, version: str) -> bool:
        return bool(group) and self._apiservice(group, version) is not None

    def served(self) -> list[api_discovery.Served]:
        """Every service-backed APIService's group version, for /apis discovery, with its backend's
        discovery once it has been fetched."""
        rt = self.api.rt("apiregistration.k8s.io", "apiservices")
        served = []
        for obj in self.api.store.objects(rt):
            spec = obj.get("spec") or {}
            if spec.get("service") and spec.get("group") and spec.get("version"):
                fetched = self._discovered.get(obj["metadata"]["name"])
                served.append(api_discovery.Served(
                    group=spec["group"], version=spec["version"],
                    group_priority=int(spec.get("groupPriorityMinimum") or 0),
                    version_priority=int(spec.get("versionPriority") or 0), source=api_discovery.AGGREGATOR,
                    document=fetched.document if fetched is not None else None))
        return served

    def _ready_addresses(self, apiservice: Obj) -> list[tuple[str, int]]:
        service_ref = apiservice["spec"]["service"]
        namespace, name = service_ref.get("namespace", ""), service_ref.get("name", "")
        service = self.api.store.find(self.api.rt("", "services"), namespace, name)
        if service is None:
            raise ApiError.service_unavailable(f'service "{namespace}/{name}" not found')
        wanted_port = int(service_ref.get("port", 443))
        ports = (service.get("spec") or {}).get("ports") or []
        port_spec = next((p for p in ports if int(p.get("port", 0)) == wanted_port), None)
        if port_spec is None:
            raise ApiError.service_unavailable(f'service "{namespace}/{name}" has no port {wanted_port}')
        endpoints = self.api.store.find(self.api.rt("", "endpoints"), namespace, name)
        addresses: list[tuple[str, int]] = []
        for subset in (endpoints or {}).get("subsets") or ():
            port_numbers = [int(p["port"]) for p in subset.get("ports") or ()
                            if p.get("name", "") == port_spec.get("name", "")] or \
                           [int(p["port"]) for p in subset.get("ports") or ()][:1]
            addresses += [(a["ip"], port) for a in subset.get("addresses") or () for port in port_numbers]
        return addresses

    # ---- proxying ------------------------------------------------------------------------------

    def _client_ssl(self, apiservice: Obj) -> dict[str, Any]:
        """The TLS arguments of a request to the APIService's backend, as kube-aggregator dials it:
        with `insecureSkipTLSVerify`, no verification at all; else the serving certificate must
        chain to `caBundle` and name the Service, `<service>.<namespace>.svc` (sent as SNI too),
        whatever address the request goes to."""
        spec = apiservice["spec"]
        if spec.get("insecureSkipTLSVerify"):
            return {"ssl": self._context(None)}
        ca_pem = base64.b64decode(spec.get("caBundle") or "")
        if not ca_pem:
            # kube-aggregator then trusts the system roots, which never signed a cluster's backend.
            raise ApiError.service_unavailable(f'apiservice {apiservice["metadata"]["name"]} has no caBundle: '
                                               "x509: certificate signed by unknown authority")
        service = spec.get("service") or {}
        return {"ssl": self._context(ca_pem),
                "server_hostname": f'{service.get("name", "")}.{service.get("namespace", "")}.svc'}

    def _context(self, ca_pem: bytes | None) -> ssl.SSLContext:
        """A client context presenting the front-proxy certificate, trusting `ca_pem` (None: nothing
        is verified); kept per bundle, since a context costs milliseconds to build."""
        context = self._contexts.get(ca_pem)
        if context is None:
            if ca_pem is None:
                context = certificates.ssl_client_context(self.front_proxy_ca.cert_pem, self.client_cert)
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            else:
                context = certificates.ssl_client_context(ca_pem, self.client_cert)
            if len(self._contexts) >= MAX_CLIENT_CONTEXTS:
                self._contexts.clear()  # bundles of APIServices long changed or gone
            self._contexts[ca_pem] = context
        return context

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=CONNECT_TIMEOUT, auto_decompress=False)
        return self._session

    async def proxy(self, request: web.Request, user: UserInfo, target: Target | None) -> web.StreamResponse:
        group, version = (target.group, target.version) if target else _group_version(request.path)
        apiservice = self._apiservice(group, version)
        if apiservice is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        addresses = self._ready_addresses(apiservice)
        if not addresses:
            raise ApiError.service_unavailable(f'no endpoints available for service of apiservice '
                                               f'"{apiservice["metadata"]["name"]}"')
        host, port = addresses[self.api.requests_total % len(addresses)]
        headers = [(k, v) for k, v in request.headers.items()
                   if k.lower() not in _DROPPED_REQUEST_HEADERS and not k.lower().startswith(
                       ("impersonate-", "x-remote-"))]
        headers += identity_headers(user)
        url = f"https://{host}:{port}{request.path_qs}"
        body = await request.read()
        try:
            upstream = await self.session().request(request.method, url, data=body or None,
                                                    headers=_multi(headers), **self._client_ssl(apiservice))
        except (aiohttp.ClientError, OSError) as exc:
            raise ApiError.service_unavailable(f"error trying to reach service: {exc}") from None
        async with upstream:
            response = web.StreamResponse(status=upstream.status, headers={
                k: v for k, v in upstream.headers.items() if k.lower() not in _DROPPED_RESPONSE_HEADERS})
            await response.prepare(request)
            with contextlib.suppress(aiohttp.ClientError, ConnectionResetError):
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
            await response.write_eof()
        return response

    # ---- endpoints and availability -------------------------------------------------------------

    async def run(self) -> None:
        """Probe local endpoints and APIService availability until cancelled."""
        while True:
            try:
                await self.reconcile()
            except Exception:  # a probe round must never end the loop
                log.exception("aggregation reconcile failed")
            await asyncio.sleep(self.probe_interval)  # the probe period, not synchronisation

    def start(self) -> None:
        self._task = asyncio.create_task(self.run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._session is not None:
            await self._session.close()

    async def reconcile(self) -> None:
        services_rt = self.api.rt("", "services")
        for service in list(self.api.store.objects(services_rt)):
            annotation = (service["metadata"].get("annotations") or {}).get(LOCAL_ENDPOINTS_ANNOTATION)
            if annotation is not None:
                await self._probe_service(service, annotation)
        apiservices_rt = self.api.rt("apiregistration.k8s.io", "apiservices")
        apiservices = list(self.api.store.objects(apiservices_rt))
        # Discovery first: once an APIService is Available, its discovery is already Current.
        await self.refresh_discovery(apiservices)
        for apiservice in apiservices:
            await self._check_available(apiservice)

    # ---- backends' discovery ---------------------------------------------------------------------

    async def refresh_discovery(self, apiservices: list[Obj]) -> None:
        """Fetch the discovery of every service-backed APIService that is due, all at once."""
        backed = {a["metadata"]["name"]: a for a in apiservices if (a.get("spec") or {}).get("service")}
        for name in set(self._discovered) - set(backed):
            del self._discovered[name]
        now = time.monotonic()
        due = []
        for name, apiservice in backed.items():
            key = self._discovery_key(apiservice)
            fetched = self._discovered.get(name)
            if fetched is None or fetched.key != key or now >= fetched.due:
                due.append(self._discover(name, apiservice, key, previous=fetched))
        await asyncio.gather(*due)

    def _discovery_key(self, apiservice: Obj) -> tuple[str, tuple[tuple[str, int], ...]]:
        try:
            addresses = tuple(self._ready_addresses(apiservice))
        except ApiError:
            addresses = ()
        return (apiservice["metadata"].get("resourceVersion", ""), addresses)

    async def _discover(self, name: str, apiservice: Obj, key: tuple[str, tuple[tuple[str, int], ...]],
                        *, previous: _Discovered | None) -> None:
        version = apiservice["spec"]["version"]
        try:
            document, etag = await self._fetch_discovery(apiservice, previous)
        except (_DiscoveryFailed, ApiError, aiohttp.ClientError, OSError, TimeoutError, ValueError, TypeError,
                AttributeError) as exc:
            failures = (previous.failures if previous is not None else 0) + 1
            first, longest = DISCOVERY_RETRY
            log.debug("aggregated discovery failed", extra={"apiservice": name, "error": str(exc)})
            self._discovered[name] = _Discovered(
                key=key, document=api_discovery.version_document(version, [], "Stale"), etag="",
                due=time.monotonic() + min(first * 2 ** (failures - 1), longest), failures=failures)
            return
        self._discovered[name] = _Discovered(key=key, document=document, etag=etag,
                                             due=time.monotonic() + DISCOVERY_REFRESH, failures=0)

    async def _fetch_discovery(self, apiservice: Obj, previous: _Discovered | None) -> tuple[Obj, str]:
        """The backend's APIVersionDiscovery for the APIService's group version, and its ETag."""
        group, version = apiservice["spec"]["group"], apiservice["spec"]["version"]
        addresses = self._ready_addresses(apiservice)
        if not addresses:
            raise _DiscoveryFailed("endpoints for service have no ready addresses")
        host, port = addresses[0]
        base, tls = f"https://{host}:{port}", self._client_ssl(apiservice)
        headers = [*identity_headers(AGGREGATOR_USER), ("Accept", AGGREGATED_ACCEPT)]
        if previous is not None and previous.etag:
            headers.append(("If-None-Match", previous.etag))
        async with self.session().get(f"{base}/apis", **tls, timeout=DISCOVERY_TIMEOUT,
                                      headers=_multi(headers)) as response:
            if response.status == 304 and previous is not None and previous.etag:
                return previous.document, previous.etag
            if response.status == 503:
                raise _DiscoveryFailed(f"service returned non-success response code: {response.status}")
            if response.status == 200 and api_discovery.is_aggregated_content_type(
                    response.headers.get("Content-Type", "")):
                listed = orjson.loads(await response.read())
                return _listed_version(listed, group, version), response.headers.get("ETag", "")
        # A backend without aggregated discovery: its APIResourceList, converted.
        async with self.session().get(f"{base}/apis/{group}/{version}", **tls, timeout=DISCOVERY_TIMEOUT,
                                      headers=_multi([*identity_headers(AGGREGATOR_USER),
                                                      ("Accept", "application/json")])) as response:
            if response.status != 200:
                raise _DiscoveryFailed(f"failed to download legacy discovery for /apis/{group}/{version}: "
                                       f"status {response.status}")
            listed = orjson.loads(await response.read())
        resources = api_discovery.resources_from_list(listed.get("resources") or [])
        return api_discovery.version_document(version, resources), ""

    async def _probe_service(self, service: Obj, annotation: str) -> None:
        meta = service["metadata"]
        try:
            endpoints = parse_local_endpoints(annotation)
        except ValueError as exc:
            log.warning("bad local endpoints annotation", extra={"service": meta["name"], "error": str(exc)})
            return
        results = await asyncio.gather(*(self._ready(host, port) for host, port in endpoints))
        port_name = ((service.get("spec") or {}).get("ports") or [{}])[0].get("name", "")
        subsets = []
        for (host, port), ready in zip(endpoints, results, strict=True):
            key = "addresses" if ready else "notReadyAddresses"
            subsets.append({key: [{"ip": host}], "ports": [{"name": port_name, "port": port, "protocol": "TCP"}]})
        wanted = {"apiVersion": "v1", "kind": "Endpoints",
                  "metadata": {"name": meta["name"], "namespace": meta["namespace"]}, "subsets": subsets}
        rt = self.api.rt("", "endpoints")
        current = self.api.store.find(rt, meta["namespace"], meta["name"])
        if current is None:
            self.api.store.create(rt, wanted)
        elif current.get("subsets") != subsets:
            self.api.store.update(rt, meta["namespace"], meta["name"], obj={**current, "subsets": subsets},
                                  check_rv=False)

    def endpoint_gone(self, host: str, port: int) -> None:
        """A backend's process died: list its address as not ready now, as the kubelet reports a dead
        container at once; the next probe confirms it (or finds its successor ready)."""
        rt = self.api.rt("", "endpoints")
        for endpoints in list(self.api.store.objects(rt)):
            subsets = endpoints.get("subsets") or []
            changed = [_not_ready_if(subset, host, port) for subset in subsets]
            if changed != subsets:
                meta = endpoints["metadata"]
                self.api.store.update(rt, meta["namespace"], meta["name"], obj={**endpoints, "subsets": changed},
                                      check_rv=False)

    async def _ready(self, host: str, port: int) -> bool:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # a readiness probe, like the kubelet's, does not verify
        try:
            async with self.session().get(f"https://{host}:{port}/readyz", ssl=context,
                                          timeout=PROBE_TIMEOUT) as response:
                return response.status == 200
        except (aiohttp.ClientError, OSError, TimeoutError):
            return False

    async def _check_available(self, apiservice: Obj) -> None:
        spec = apiservice.get("spec") or {}
        if not spec.get("service"):
            status, reason, message = "True", "Local", "Local APIServices are always available"
        else:
            status, reason, message = await self._probe_apiservice(apiservice)
        conditions = (apiservice.get("status") or {}).get("conditions") or []
        current = next((c for c in conditions if c.get("type") == "Available"), None)
        if current and (current.get("status"), current.get("reason"), current.get("message")) == (
                status, reason, message):
            return
        condition = {"type": "Available", "status": status, "reason": reason, "message": message,
                     "lastTransitionTime": format_time(self.api.clock())
                     if not current or current.get("status") != status else current["lastTransitionTime"]}
        rt = self.api.rt("apiregistration.k8s.io", "apiservices")
        self.api.store.update(rt, "", apiservice["metadata"]["name"],
                              obj={**apiservice, "status": {"conditions": [condition]}}, subresource="status",
                              check_rv=False)

    async def _probe_apiservice(self, apiservice: Obj) -> tuple[str, str, str]:
        spec = apiservice["spec"]
        try:
            addresses = self._ready_addresses(apiservice)
        except ApiError as error:
            return "False", "ServiceNotFound", error.message
        if not addresses:
            return "False", "MissingEndpoints", "endpoints for service have no ready addresses"
        host, port = addresses[0]
        try:
            async with self.session().get(f'https://{host}:{port}/apis/{spec["group"]}/{spec["version"]}',
                                          **self._client_ssl(apiservice), timeout=PROBE_TIMEOUT,
                                          headers=_multi(identity_headers(AGGREGATOR_USER))) as response:
                if response.status == 200:
                    return "True", "Passed", "all checks passed"
                return "False", "FailedDiscoveryCheck", f"failing or missing response from " \
                                                        f"https://{host}:{port}: bad status {response.status}"
        except ApiError as error:
            return "False", "FailedDiscoveryCheck", error.message
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            return "False", "FailedDiscoveryCheck", f"failing or missing response from https://{host}:{port}: {exc}"


def _not_ready_if(subset: Obj, host: str, port: int) -> Obj:
    ports = {int(p.get("port", 0)) for p in subset.get("ports") or ()}
    addresses = subset.get("addresses") or []
    if port not in ports or not any(a.get("ip") == host for a in addresses):
        return subset
    kept = [a for a in addresses if a.get("ip") != host]
    moved = [a for a in addresses if a.get("ip") == host]
    result = {**subset, "notReadyAddresses": [*(subset.get("notReadyAddresses") or []), *moved]}
    if kept:
        result["addresses"] = kept
    else:
        result.pop("addresses", None)
    return result


def _listed_version(listed: Obj, group: str, version: str) -> Obj:
    """One group version out of a backend's APIGroupDiscoveryList, Current; a version the backend
    does not list is there with no resources. Missing response kinds are filled in as empty."""
    for item in listed.get("items") or ():
        if (item.get("metadata") or {}).get("name", "") != group:
            continue
        for entry in item.get("versions") or ():
            if entry.get("version") == version:
                resources = [{**resource, "responseKind": resource.get("responseKind") or _EMPTY_KIND,
                              "subresources": [{**sub, "responseKind": sub.get("responseKind") or _EMPTY_KIND}
                                               for sub in resource.get("subresources") or ()]}
                             for resource in entry.get("resources") or ()]
                for resource in resources:
                    if not resource["subresources"]:
                        del resource["subresources"]
                return api_discovery.version_document(version, resources)
    return api_discovery.version_document(version, [])


_EMPTY_KIND = {"group": "", "version": "", "kind": ""}


def _multi(headers: list[tuple[str, str]]) -> Any:
    from multidict import CIMultiDict

    return CIMultiDict(headers)


def _group_version(path: str) -> tuple[str, str]:
    parts = [p for p in path.split("/") if p]
    return (parts[1], parts[2]) if len(parts) >= 3 and parts[0] == "apis" else ("", "")
