"""A deliberately plain HTTP client for contract tests: status codes and bodies exactly as sent."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import random
import selectors
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from colocation.kube.permissions import OPERATOR_NAMESPACE
from tests.timing import TIME_FACTOR as TIME_FACTOR  # every deadline is multiplied by it (re-exported)
from tests.timing import eventually_async

REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=30)


def _data_file(directory: Path, name: str, entry: dict[str, Any], key: str) -> str | None:
    if entry.get(f"{key}-data"):
        path = directory / name
        path.write_bytes(base64.b64decode(entry[f"{key}-data"]))
        return str(path)
    value = entry.get(key)
    return str(value) if value else None


class Kube:
    def __init__(self, server: str, ssl_context: ssl.SSLContext, token: str | None,
                 ca_file: str | None = None) -> None:
        self.server = server.rstrip("/")
        self.ssl = ssl_context
        self.token = token
        self.ca_file = ca_file  # to trust the same server without the client certificate
        self.session: aiohttp.ClientSession | None = None

    @classmethod
    def from_kubeconfig(cls, path: Path, *, token: str | None = None) -> Kube:
        config = yaml.safe_load(path.read_text())
        context_name = config["current-context"]
        context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        tmp = Path(tempfile.mkdtemp(prefix="kube-"))
        ca = _data_file(tmp, "ca.crt", cluster, "certificate-authority")
        context_ssl = ssl.create_default_context(cafile=ca)
        cert = _data_file(tmp, "client.crt", user, "client-certificate")
        key = _data_file(tmp, "client.key", user, "client-key")
        if cert and key:
            context_ssl.load_cert_chain(cert, key)
        return cls(cluster["server"], context_ssl, token if token is not None else user.get("token"), ca)

    def with_token(self, token: str | None) -> Kube:
        """The same cluster as another user (or anonymous with None): the token alone, never the
        kubeconfig's client certificate, which a real cluster would authenticate first."""
        return Kube(self.server, ssl.create_default_context(cafile=self.ca_file), token, self.ca_file)

    async def __aenter__(self) -> Kube:
        self.session = aiohttp.ClientSession(timeout=REQUEST_TIMEOUT)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.session is not None:
            await self.session.close()

    def _headers(self, content_type: str | None, extra: dict[str, str] | None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if content_type:
            headers["Content-Type"] = content_type
        headers.update(extra or {})
        return headers

    async def request(self, method: str, path: str, body: Any = None, *,
                      content_type: str = "application/json", params: dict[str, str] | None = None,
                      headers: dict[str, str] | None = None) -> tuple[int, Any]:
        assert self.session is not None, "use `async with`"
        data = body if isinstance(body, bytes | str) or body is None else orjson.dumps(body)
        async with self.session.request(method, self.server + path, data=data, params=params, ssl=self.ssl,
                                        headers=self._headers(content_type if body is not None else None,
                                                              headers)) as response:
            raw = await response.read()
            try:
                return response.status, orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                return response.status, raw.decode(errors="replace")

    @contextlib.asynccontextmanager
    async def watch(self, path: str, **params: str) -> AsyncIterator[asyncio.Queue[dict[str, Any] | None]]:
        """Stream watch events into a queue (None marks the end of the stream)."""
        assert self.session is not None
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        response = await self.session.get(self.server + path, params={"watch": "true", **params}, ssl=self.ssl,
                                           headers=self._headers(None, None),
                                           timeout=aiohttp.ClientTimeout(total=None, sock_read=None))
        if response.status != 200:
            body = await response.read()
            response.release()
            raise WatchRefused(response.status, f"watch {path} answered {response.status}: {body!r}")

        async def pump() -> None:
            try:
                async for line in response.content:
                    if line.strip():
                        await queue.put(orjson.loads(line))
            except (aiohttp.ClientError, asyncio.CancelledError):
                pass
            finally:
                await queue.put(None)

        task = asyncio.create_task(pump())
        try:
            yield queue
        finally:
            task.cancel()
            response.close()


class WatchRefused(AssertionError):
    """A watch answered with an error status instead of a stream."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def scrape_samples(url: str, context: ssl.SSLContext | bool = True) -> list[Sample]:
    """Every sample a process exposes on its Prometheus `url` (/metrics), parsed."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session, \
            session.get(url, ssl=context) as response:
        text = await response.text()
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


async def next_event(queue: asyncio.Queue[dict[str, Any] | None], timeout: float = 10) -> dict[str, Any] | None:
    """The next watch event (None: the stream ended); TimeoutError after `timeout` (times TIME_FACTOR)."""
    return await asyncio.wait_for(queue.get(), timeout * TIME_FACTOR)


@contextlib.asynccontextmanager
async def fresh_namespace(kube: Kube) -> AsyncIterator[str]:
    """A namespace of a random name for one test's objects, deleted afterwards."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    status, body = await kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    assert status == 201, body
    try:
        yield name
    finally:
        await kube.request("DELETE", f"/api/v1/namespaces/{name}")


@contextlib.contextmanager
def start_sandbox_process(state_dir: Path, extra_args: list[str], timeout: float = 300) -> Iterator[Path]:
    """`colocation sandbox` as a real process; yields its kubeconfig once it prints `ready:`."""
    command = [sys.executable, "-m", "colocation", "sandbox", "--port", "0", "--state-dir", str(state_dir),
               "--log-format", "text", *extra_args]
    log_path = state_dir / "sandbox.log"
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log_file,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert process.stdout is not None
        try:
            kubeconfig = _await_ready(process, timeout, log_path)
            yield kubeconfig
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)  # the real control plane stops its components one by one
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _await_ready(process: subprocess.Popen[bytes], timeout: float, log_path: Path) -> Path:
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not selector.select(timeout=max(deadline - time.monotonic(), 0)):
            break
        line = process.stdout.readline().decode()
        if not line:
            break
        if line.startswith("ready: kubeconfig="):
            return Path(line.split("=", 1)[1].strip())
    process.kill()
    raise RuntimeError(f"the sandbox did not become ready within {timeout}s:\n{log_path.read_text()[-4000:]}")


# ---- helpers for the contract tests ------------------------------------------------------------

# Pods in contract tests name a scheduler nobody runs: on a real cluster they stay unscheduled, so no
# kubelet overwrites the status a test writes, and deleting them is immediate.
UNSCHEDULED = "e2e-nobody-schedules-this"


def pod_manifest(name: str, *, labels: dict[str, str] | None = None, service_account: str | None = None,
                 node_name: str | None = None, containers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers or [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]}
    if node_name:
        spec["nodeName"] = node_name
    else:
        spec["schedulerName"] = UNSCHEDULED
    if service_account:
        spec["serviceAccountName"] = service_account
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def configmap(name: str, data: dict[str, str] | None = None, *, labels: dict[str, str] | None = None,
              **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": labels or {}, **metadata}, "data": data or {}}


async def create(kube: Kube, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST that must succeed: the created object."""
    status, created = await kube.request("POST", path, body)
    assert status == 201, (status, created)
    return created  # type: ignore[no-any-return]


async def get(kube: Kube, path: str) -> dict[str, Any]:
    """GET that must succeed."""
    status, obj = await kube.request("GET", path)
    assert status == 200, (status, obj)
    return obj  # type: ignore[no-any-return]


async def is_gone(kube: Kube, path: str) -> bool:
    status, _ = await kube.request("GET", path)
    return status == 404


async def make_pod_ready(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    """Report a pod Running and Ready through its status subresource, as a kubelet would."""
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    pod = await get(kube, path)
    pod["status"] = {**(pod.get("status") or {}), "phase": "Running",
                     "conditions": [{"type": "Ready", "status": "True"},
                                    {"type": "PodScheduled", "status": "True"}]}
    status, updated = await kube.request("PUT", path + "/status", pod)
    assert status == 200, (status, updated)
    return updated  # type: ignore[no-any-return]


async def events_until(queue: asyncio.Queue[dict[str, Any] | None], predicate: Any,
                       timeout: float = 10) -> list[dict[str, Any]]:
    """Read watch events until one satisfies `predicate` (included); fail on timeout (times
    TIME_FACTOR) or end of stream."""
    seen: list[dict[str, Any]] = []
    timeout *= TIME_FACTOR
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"no matching watch event within {timeout}s; saw {_summary(seen)}")
        try:
            event = await asyncio.wait_for(queue.get(), remaining)
        except TimeoutError:
            raise AssertionError(f"no matching watch event within {timeout}s; saw {_summary(seen)}") from None
        if event is None:
            raise AssertionError(f"the watch ended before a matching event; saw {_summary(seen)}")
        seen.append(event)
        if predicate(event):
            return seen


def _summary(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], (e["object"].get("metadata") or {}).get("name", "")) for e in events]


def event_names(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(type, name) per event: the shape most watch assertions compare."""
    return _summary(events)


class Widgets:
    """A CustomResourceDefinition made for one test: a namespaced Widget with a structural schema."""

    kind = "Widget"
    plural = "widgets"
    version = "v1"

    def __init__(self, group: str) -> None:
        self.group = group
        self.api_version = f"{group}/{self.version}"
        self.crd_name = f"{self.plural}.{group}"

    def path(self, namespace: str, name: str = "") -> str:
        base = f"/apis/{self.group}/{self.version}/namespaces/{namespace}/{self.plural}"
        return f"{base}/{name}" if name else base

    def body(self, name: str, spec: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
        return {"apiVersion": self.api_version, "kind": self.kind, "metadata": {"name": name},
                "spec": spec if spec is not None else {"image": "nginx"}, **extra}

    def definition(self) -> dict[str, Any]:
        spec_schema = {
            "type": "object", "required": ["image"],
            "properties": {
                "image": {"type": "string", "pattern": "^[a-z0-9./:-]+$"},
                "replicas": {"type": "integer", "minimum": 0, "maximum": 10},
                "mode": {"type": "string", "enum": ["fast", "safe"]},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        }
        status_schema = {"type": "object", "properties": {"phase": {"type": "string"},
                                                          "ready": {"type": "integer"}}}
        return {
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": self.crd_name},
            "spec": {
                "group": self.group, "scope": "Namespaced",
                "names": {"plural": self.plural, "singular": "widget", "kind": self.kind, "listKind": "WidgetList"},
                "versions": [{
                    "name": self.version, "served": True, "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": spec_schema, "status": status_schema}}},
                    "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas",
                                                             "statusReplicasPath": ".status.ready"}},
                    "additionalPrinterColumns": [
                        {"name": "Image", "type": "string", "jsonPath": ".spec.image"},
                        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    ],
                }],
            },
        }


def condition(obj: dict[str, Any], type_: str) -> str | None:
    """The status ("True", "False", ...) of a condition, or None when it is absent."""
    for item in (obj.get("status") or {}).get("conditions") or ():
        if item.get("type") == type_:
            return str(item.get("status"))
    return None


async def install_crd(kube: Kube, widgets: Widgets, timeout: float = 30) -> dict[str, Any]:
    """Create the CRD and wait until it is Established (its resource is then served)."""
    await create(kube, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", widgets.definition())

    async def established() -> dict[str, Any] | None:
        crd = await get(kube, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{widgets.crd_name}")
        return crd if condition(crd, "Established") == "True" else None

    crd: dict[str, Any] = await eventually_async(established, timeout)
    return crd


async def ensure_crd(kube: Kube, crd: dict[str, Any], timeout: float = 30) -> None:
    """Create a CRD unless it exists, then wait until it is Established. Never deletes it: CRDs are
    cluster-scoped and shared by every test of the session (and by other runs on a real cluster)."""
    status, body = await kube.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    assert status in (201, 409), body
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"

    async def established() -> bool:
        status, body = await kube.request("GET", path)
        conditions = (body.get("status") or {}).get("conditions") or [] if status == 200 else []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    await eventually_async(established, timeout=timeout)


def token_client(kubeconfig: Path, token: str | None) -> Kube:
    """A client of the kubeconfig's cluster that authenticates with `token` alone (None: anonymous).

    Unlike `Kube.with_token`, it never presents the kubeconfig's client certificate, which a real
    cluster would authenticate first (as the admin) whatever the token says.
    """
    config = yaml.safe_load(kubeconfig.read_text())
    context_name = config["current-context"]
    context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    ca = _data_file(Path(tempfile.mkdtemp(prefix="kube-")), "ca.crt", cluster, "certificate-authority")
    return Kube(cluster["server"], ssl.create_default_context(cafile=ca), token)


async def bound_token(admin: Kube, name: str, rules: list[dict[str, Any]]) -> str:
    """A token of ServiceAccount default/NAME, which a ClusterRole of that name binds to `rules`: what a
    client sends an operator replica directly (the admin of the real control plane authenticates with
    a client certificate, which replicas do not take)."""
    subject = {"kind": "ServiceAccount", "name": name, "namespace": "default"}
    for path, body in (
            ("/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": name}}),
            ("/apis/rbac.authorization.k8s.io/v1/clusterroles", {"metadata": {"name": name}, "rules": rules}),
            ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
                "metadata": {"name": name}, "subjects": [subject],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}})):
        status, answer = await admin.request("POST", path, body)
        assert status in (201, 409), answer
    status, token = await admin.request("POST", f"/api/v1/namespaces/default/serviceaccounts/{name}/token",
                                        {"spec": {"expirationSeconds": 3600}})
    assert status == 201, token
    return str(token["status"]["token"])


@contextlib.asynccontextmanager
async def reading_continuously(kube: Kube, path: str, *, pace: float = 0.1) -> AsyncIterator[list[int]]:
    """GET `path` every `pace` seconds (a steady load, not a wait) while the block runs; yields the
    status of every read. The first read that is not 200 fails the block when it ends, with its body."""
    outcomes: list[int] = []
    done = asyncio.Event()

    async def read() -> None:
        while not done.is_set():
            status, body = await kube.request("GET", path)
            outcomes.append(status)
            assert status == 200, body
            await asyncio.sleep(pace)

    reader = asyncio.create_task(read())
    try:
        yield outcomes
        assert not reader.done(), reader
    finally:
        done.set()
        await reader


async def get_from_replica(replica: dict[str, Any], path: str, token: str) -> tuple[int, Any]:
    """GET straight from an operator replica of STATE_DIR/operators.json (loopback on the builtin
    sandbox, its pod's address on the real one), its certificate unchecked: what these tests ask is
    the replica's answer (tests/e2e/test_serving_tls.py checks certificates). (0, None) when it
    cannot be reached."""
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    url = f"https://{replica.get('host', '127.0.0.1')}:{replica['port']}{path}"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session, session.get(
                url, ssl=unverified, headers={"Authorization": f"Bearer {token}"}) as response:
            return response.status, orjson.loads(await response.read())
    except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError):
        return 0, None


async def put_as_client_go(client: Kube, path: str, body: Any) -> tuple[int, Any, int]:
    """A PUT retried as client-go retries it (`as_client_go`)."""
    return await as_client_go(client, "PUT", path, body)


async def as_client_go(client: Kube, method: str, path: str, body: Any = None, *,
                       params: dict[str, str] | None = None) -> tuple[int, Any, int]:
    """A request retried as client-go retries it: on 503 with Retry-After, up to 10 times. A 503 that
    is not a Status is kube-apiserver's own "service unavailable" (the aggregator found the APIService
    unavailable for a moment, as a loaded machine makes it): retried after a jittered backoff, as
    the agents retry a failed report. (status, answer, attempts)"""
    for attempt in range(1, 11):
        status, answer = await client.request(method, path, body, params=params)
        if status == 503 and not isinstance(answer, dict):
            await asyncio.sleep(random.uniform(0.5, 1.0))  # the client's own backoff
            continue
        retry_after = ((answer or {}).get("details") or {}).get("retryAfterSeconds") if status == 503 else None
        if retry_after is None:
            return status, answer, attempt
        await asyncio.sleep(float(retry_after))  # the server's Retry-After, as client-go waits it
    return status, answer, 10


def token_kubeconfig(kubeconfig: Path, token: str, out: Path) -> Path:
    """A copy of `kubeconfig` whose users authenticate with `token`."""
    config = yaml.safe_load(kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    out.write_text(yaml.safe_dump(config))
    return out


async def start_agent_process(kubeconfig: Path, token: str, node: str, work_dir: Path,
                              *args: str) -> asyncio.subprocess.Process:
    """A `colocation agent` process for `node` that authenticates with `token`, its output
    discarded; the caller kills it."""
    agent_kubeconfig = token_kubeconfig(kubeconfig, token, work_dir / f"agent-{node}.kubeconfig")
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "colocation", "agent", "--kubeconfig", str(agent_kubeconfig), "--node-name", node,
        "--metrics-port", "0", "--log-format", "text", *args,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)


async def node_agent_token(kube: Kube, node: str, namespace: str = "colocation-system") -> str:
    """A token of the agents' ServiceAccount bound to an agent pod on `node` (created here): the
    leader's node rule then holds it to that node, as a DaemonSet pod's token."""
    agent = await create(kube, f"/api/v1/namespaces/{namespace}/pods", {
        "metadata": {"name": f"agent-{node}"},
        "spec": {"nodeName": node, "serviceAccountName": "colocation-agent",
                 "containers": [{"name": "agent", "image": "colocation:test"}]}})
    token = await create(kube, f"/api/v1/namespaces/{namespace}/serviceaccounts/colocation-agent/token", {
        "spec": {"expirationSeconds": 3600, "boundObjectRef": {
            "kind": "Pod", "apiVersion": "v1", "name": agent["metadata"]["name"], "uid": agent["metadata"]["uid"]}}})
    return str(token["status"]["token"])


async def apiservice_available(kube: Kube, name: str = "v1alpha1.metrics.colocation.dev") -> bool:
    """Whether APIService `name` (the NodeMetric one by default) is Available: the aggregator reaches a replica."""
    status, body = await kube.request("GET", f"/apis/apiregistration.k8s.io/v1/apiservices/{name}")
    conditions = (body.get("status") or {}).get("conditions") or [] if status == 200 else []
    return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)


async def ready_operator_endpoints(kube: Kube, count: int) -> bool:
    """Whether at least `count` operator replicas are Ready behind the Service (their readiness probes)."""
    namespace = OPERATOR_NAMESPACE
    status, slices = await kube.request("GET", f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
                                        params={"labelSelector": "kubernetes.io/service-name=colocation-operator"})
    if status == 200 and slices.get("items"):
        ready = [endpoint for item in slices["items"] for endpoint in item.get("endpoints") or ()
                 if (endpoint.get("conditions") or {}).get("ready")]
        return len(ready) >= count
    status, endpoints = await kube.request("GET", f"/api/v1/namespaces/{namespace}/endpoints/colocation-operator")
    return status == 200 and sum(len(subset.get("addresses") or ()) for subset in endpoints.get("subsets") or ()) \
        >= count
