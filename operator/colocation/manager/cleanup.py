"""`colocation cleanup`'s I/O: strip every Node of batch and mid resources and delete our Leases.

The run repeats passes until one finds nothing left to do, and fails when the deadline passes
first. A pass lists each collection in pages, sends a page's writes with at most `concurrency`
in flight, and retries a call that got no answer, 429 or 5xx with backoff and jitter. Before
each pass the leader Lease is read: while an operator leads (`cleanup_rules.leader_hold`) the run
waits up to `wait_for_leader` seconds, then refuses, unless `force`. With `settle`, a clean pass
counts only once another pass that much later is clean too.

Why: docs/install.md#uninstall
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from colocation.apimachinery.clock import wall_time
from colocation.controllers.writers import GROUP, MERGE_PATCH, NODERESOURCES, NODESLOS, VERSION
from colocation.kube import permissions
from colocation.kube.backoff import Backoff
from colocation.kube.client import call_json
from colocation.manager.cleanup_rules import is_done, leader_hold, node_cleanup_patch, retriable

log = logging.getLogger(__name__)

Result = tuple[int, Any]
_ALL = permissions.CLEANUP_API_CALLS + permissions.CLEANUP_CUSTOM_RESOURCE_CALLS


def _declare(group: str, resource: str, verb: str, *, namespace: str | None, subresource: str = "",
             name: str = "") -> permissions.ApiCall:
    return permissions.declared(_ALL, permissions.ApiCall(group=group, resource=resource, verb=verb,
                                                          namespace=namespace, subresource=subresource, name=name))


_LEASES = ("coordination.k8s.io", "leases")
_LIST_NODES = _declare("", "nodes", "list", namespace=None)
_PATCH_NODE_STATUS = _declare("", "nodes", "patch", namespace=None, subresource="status")
_LIST_NODE_LEASES = _declare(*_LEASES, "list", namespace=permissions.NODE_LEASE_NAMESPACE)
_DELETE_NODE_LEASE = _declare(*_LEASES, "delete", namespace=permissions.NODE_LEASE_NAMESPACE)
_GET_LEADER_LEASE = _declare(*_LEASES, "get", namespace=permissions.OPERATOR_NAMESPACE,
                             name=permissions.LEADER_LEASE_NAME)
_DELETE_LEADER_LEASE = _declare(*_LEASES, "delete", namespace=permissions.OPERATOR_NAMESPACE,
                                name=permissions.LEADER_LEASE_NAME)
_DELETE_SHARD_LEASES = {name: _declare(*_LEASES, "delete", namespace=permissions.OPERATOR_NAMESPACE, name=name)
                        for name in permissions.SHARD_LEASE_NAMES}
for _plural in (NODESLOS, NODERESOURCES):
    _declare(GROUP, _plural, "list", namespace=None)
    _declare(GROUP, _plural, "delete", namespace=None)


class CleanupError(Exception):
    """Cleanup could not finish; the message is one line, fit for the CLI."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class CleanupOptions:
    timeout: float = 300.0  # seconds for the whole run
    call_timeout: float = 10.0  # seconds for one API call
    page_size: int = 250
    concurrency: int = 16
    attempts: int = 6  # per call, counting the first
    wait_for_leader: float = 0.0  # seconds to wait for a leading operator to stop before refusing
    settle: float = 0.0  # seconds a clean pass must stay clean: checked again this much later
    force: bool = False  # go on even while an operator leads
    delete_custom_resources: bool = False  # also every NodeSLO and NodeResource


@dataclasses.dataclass
class CleanupCounts:
    nodes: int = 0  # Nodes stripped of batch and mid resources
    leases: int = 0
    custom_resources: int = 0

    def total(self) -> int:
        return self.nodes + self.leases + self.custom_resources


class Cleanup:
    def __init__(self, api: client.ApiClient, options: CleanupOptions, *, say: Callable[[str], None],
                 wall: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, rng: random.Random | None = None) -> None:
        self.core = client.CoreV1Api(api)
        self.leases = client.CoordinationV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.options = options
        self.say = say  # progress lines, for the person or the Job log watching
        self._wall, self._monotonic, self._sleep = wall, monotonic, sleep
        self._rng = rng if rng is not None else random.Random()
        self._slots = asyncio.Semaphore(options.concurrency)
        self._deadline = 0.0

    async def run(self) -> CleanupCounts:
        """Clean until a pass finds nothing; raises CleanupError on refusal, failure or timeout."""
        self._deadline = self._monotonic() + self.options.timeout
        await self._await_no_leader(wait=self.options.wait_for_leader)
        done, backoff = CleanupCounts(), Backoff(initial=1.0, maximum=10.0, jitter=0.5, rng=self._rng)
        clean_since: float | None = None
        while True:
            found = await self._pass()
            done.nodes += found.nodes
            done.leases += found.leases
            done.custom_resources += found.custom_resources
            if found.total() == 0:
                clean_since = self._monotonic() if clean_since is None else clean_since
                left = clean_since + self.options.settle - self._monotonic()
                if left <= 0:
                    return done
                if self._monotonic() + left >= self._deadline:
                    raise CleanupError(f"clean, but no time left within {self.options.timeout:.0f}s to check it "
                                       f"stays clean for {self.options.settle:.0f}s (--settle)")
                self.say(f"clean; checking again in {left:.0f}s (--settle)")
                await self._sleep(left)
                continue
            clean_since = None
            # What we removed may come back while something still runs: check again, from the leader.
            await self._await_no_leader(wait=0.0)
            delay = backoff.next_delay()
            if self._monotonic() + delay >= self._deadline:
                raise CleanupError(f"not clean after {self.options.timeout:.0f}s: the last pass still found "
                                   f"{_describe_counts(found)} (is an agent or operator still running?)")
            await self._sleep(delay)

    # ---- the leader ---------------------------------------------------------------------------------

    async def _await_no_leader(self, wait: float) -> None:
        until = min(self._monotonic() + wait, self._deadline)
        backoff = Backoff(initial=1.0, maximum=5.0, jitter=0.5, rng=self._rng)
        while True:
            status, lease = await self._retrying(f"read Lease {permissions.LEADER_LEASE_NAME}", _GET_LEADER_LEASE,
                                                 self.leases.read_namespaced_lease, permissions.LEADER_LEASE_NAME,
                                                 permissions.OPERATOR_NAMESPACE)
            if status != 404 and not 200 <= status < 300:
                raise CleanupError(f"cannot read Lease {permissions.LEADER_LEASE_NAME}: {_describe(status, lease)}")
            hold = leader_hold(lease if status != 404 else None, wall_time(self._wall()))
            if hold is None:
                return
            if self.options.force:
                self.say(f"warning: {hold}; going on because of --force")
                return
            delay = backoff.next_delay()
            if self._monotonic() + delay > until:
                raise CleanupError(str(hold))
            self.say(f"waiting for the operator to stop: {hold}")
            await self._sleep(delay)

    # ---- one pass -----------------------------------------------------------------------------------

    async def _pass(self) -> CleanupCounts:
        found = CleanupCounts()
        checked = 0
        async for page in self._pages("list Nodes", _LIST_NODES, self.core.list_node):
            patches = [(node["metadata"]["name"], patch) for node in page
                       if (patch := node_cleanup_patch(node)) is not None]
            await asyncio.gather(*(self._write(f"patch the status of Node {name}", _PATCH_NODE_STATUS,
                                               self.core.patch_node_status, name, patch, _content_type=MERGE_PATCH)
                                   for name, patch in patches))
            checked += len(page)
            found.nodes += len(patches)
            self.say(f"nodes: {checked} checked, {found.nodes} stripped of batch and mid resources")
        namespace = permissions.NODE_LEASE_NAMESPACE
        async for page in self._pages(f"list Leases in {namespace}", _LIST_NODE_LEASES,
                                      self.leases.list_namespaced_lease, namespace):
            await asyncio.gather(*(self._write(f"delete Lease {namespace}/{name}", _DELETE_NODE_LEASE,
                                               self.leases.delete_namespaced_lease, name, namespace)
                                   for name in _names(page)))
            found.leases += len(page)
            self.say(f"leases: {found.leases} node Leases deleted")
        status, _ = await self._write(f"delete Lease {permissions.LEADER_LEASE_NAME}", _DELETE_LEADER_LEASE,
                                      self.leases.delete_namespaced_lease, permissions.LEADER_LEASE_NAME,
                                      permissions.OPERATOR_NAMESPACE)
        if status != 404:
            found.leases += 1
            self.say(f"leases: the leader Lease {permissions.OPERATOR_NAMESPACE}/{permissions.LEADER_LEASE_NAME} "
                     f"deleted")
        statuses = await asyncio.gather(*(self._write(f"delete Lease {name}", call, self.leases.delete_namespaced_lease,
                                                      name, permissions.OPERATOR_NAMESPACE)
                                          for name, call in _DELETE_SHARD_LEASES.items()))
        if shards := sum(1 for status, _ in statuses if status != 404):
            found.leases += shards
            self.say(f"leases: {shards} evaluation shard Leases deleted")
        if self.options.delete_custom_resources:
            for plural in (NODESLOS, NODERESOURCES):
                found.custom_resources += await self._delete_every(plural)
        return found

    async def _delete_every(self, plural: str) -> int:
        deleted = 0
        listing = _declare(GROUP, plural, "list", namespace=None)
        deleting = _declare(GROUP, plural, "delete", namespace=None)
        async for page in self._pages(f"list {plural}", listing, self.custom.list_cluster_custom_object,
                                      GROUP, VERSION, plural):
            await asyncio.gather(*(self._write(f"delete {plural} {name}", deleting,
                                               self.custom.delete_cluster_custom_object, GROUP, VERSION, plural,
                                               name) for name in _names(page)))
            deleted += len(page)
            self.say(f"{plural}: {deleted} deleted")
        return deleted

    async def _pages(self, what: str, call: permissions.ApiCall, fn: Callable[..., Awaitable[Any]],
                     *args: Any) -> AsyncIterator[list[dict[str, Any]]]:
        """The collection's items a page at a time; none when its namespace does not exist (404)."""
        token = ""
        while True:
            kwargs: dict[str, Any] = {"limit": self.options.page_size}
            if token:
                kwargs["_continue"] = token
            status, body = await self._retrying(what, call, fn, *args, **kwargs)
            if status == 404:
                return
            if status == 410 and token:
                token = ""  # the continue token expired (a long pass): list again from the start
                continue
            if not 200 <= status < 300 or not isinstance(body, dict):
                raise CleanupError(f"cannot {what}: {_describe(status, body)}")
            yield list(body.get("items") or [])
            token = str((body.get("metadata") or {}).get("continue") or "")
            if not token:
                return

    async def _write(self, what: str, call: permissions.ApiCall, fn: Callable[..., Awaitable[Any]], *args: Any,
                     **kwargs: Any) -> Result:
        status, body = await self._retrying(what, call, fn, *args, **kwargs)
        if not is_done(status):
            raise CleanupError(f"cannot {what}: {_describe(status, body)}")
        return status, body

    async def _retrying(self, what: str, call: permissions.ApiCall, fn: Callable[..., Awaitable[Any]], *args: Any,
                        **kwargs: Any) -> Result:
        backoff = Backoff(initial=0.5, maximum=8.0, jitter=0.5, rng=self._rng)
        for attempt in range(1, self.options.attempts + 1):
            status, body = await self._send(call, fn, *args, **kwargs)
            if not retriable(status):
                return status, body
            delay = backoff.next_delay()
            if attempt == self.options.attempts or self._monotonic() + delay >= self._deadline:
                break
            log.warning("API call failed; retrying", extra={"call": str(call), "status": status, "attempt": attempt,
                                                            "delay": round(delay, 3)})
            await self._sleep(delay)
        raise CleanupError(f"cannot {what} after {attempt} attempts: {_describe(status, body)}")

    async def _send(self, call: permissions.ApiCall, fn: Callable[..., Awaitable[Any]], *args: Any,
                    **kwargs: Any) -> Result:
        async with self._slots:
            timeout = min(self.options.call_timeout, self._deadline - self._monotonic())
            if timeout <= 0:
                raise CleanupError(f"not clean after {self.options.timeout:.0f}s: out of time before {call}")
            try:
                return await call_json(fn, *args, timeout=timeout, **kwargs)
            except (TimeoutError, OSError, aiohttp.ClientError, client.ApiException) as error:  # no answer
                return 0, str(error) or type(error).__name__


def _names(page: list[dict[str, Any]]) -> list[str]:
    return [str(item["metadata"]["name"]) for item in page]


def _describe(status: int, body: Any) -> str:
    if status == 0:
        return f"no answer ({body})"
    message = body.get("message") if isinstance(body, dict) else body
    return f"{status} {' '.join(str(message or '').split())}".strip()


def _describe_counts(counts: CleanupCounts) -> str:
    return (f"{counts.nodes} Nodes with batch or mid resources, {counts.leases} Leases, "
            f"{counts.custom_resources} NodeSLOs and NodeResources")
