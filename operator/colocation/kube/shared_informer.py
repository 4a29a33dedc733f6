"""One list/watch handed to several consumers, as client-go's shared informers do it.

Each `InformerConsumer` has its own transform, `on_sync` and `on_event`. `shared_informer` builds
one `colocation.kube.informer.Informer` whose transform keeps, of each listed or watched object,
the tuple of every consumer's kept value (so a list is still never held whole as raw objects),
and whose callbacks hand each consumer its own values, in the consumers' order. A relist reaches
every consumer; the informer's `synced` is set once every consumer has had the list.
`bound_pods_informer` is the one Pod list/watch of an operator replica.

Limits: every consumer sees the same collection with the same selectors; callbacks run inline one
after the other, so a slow consumer slows the others, and one that raises fails the list or the
event for all (the informer then retries, or relists, for all). Consumers are fixed when the
informer is built.

Why: docs/architecture.md#the-replicas-watches
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic

from colocation.apimachinery.objects import Obj
from colocation.kube import permissions
from colocation.kube.backoff import Backoff
from colocation.kube.informer import Informer, InformerOptions, Kept, Transport

_LIST_PODS = permissions.declared(permissions.OPERATOR_API_CALLS,
                                  permissions.ApiCall(group="", resource="pods", verb="list", namespace=None))
_WATCH_PODS = permissions.declared(permissions.OPERATOR_API_CALLS,
                                   permissions.ApiCall(group="", resource="pods", verb="watch", namespace=None))
PODS_PATH = "/api/v1/pods"
# Bound pods that have not finished: what the controllers' formulas, the extender and the metric
# APIs read. A pod that finishes leaves the selector: the watch shows it DELETED.
BOUND_UNFINISHED_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


@dataclass(frozen=True, kw_only=True)
class InformerConsumer(Generic[Kept]):
    """One reader of a shared informer: what it keeps of each object, and its two callbacks."""

    name: str  # in the informer's name, for its logs
    transform: Callable[[Obj], Kept]
    on_sync: Callable[[list[Kept], str], Awaitable[None]]
    on_event: Callable[[str, Kept], Awaitable[None]]


def shared_informer(transport: Transport, path: str, consumers: Sequence[InformerConsumer[Any]], *,
                    options: InformerOptions | None = None, backoff: Backoff | None = None,
                    name: str = "", on_error: Callable[[str], None] | None = None) -> Informer[tuple[Any, ...]]:
    """One informer of `path` whose every object and event reaches each of `consumers`."""
    if not consumers:
        raise ValueError("a shared informer needs at least one consumer")
    readers = tuple(consumers)

    def kept_by_each(obj: Obj) -> tuple[Any, ...]:
        return tuple(consumer.transform(obj) for consumer in readers)

    async def on_sync(items: list[tuple[Any, ...]], resource_version: str) -> None:
        for index, consumer in enumerate(readers):
            await consumer.on_sync([kept[index] for kept in items], resource_version)

    async def on_event(type_: str, kept: tuple[Any, ...]) -> None:
        for consumer, value in zip(readers, kept, strict=True):
            await consumer.on_event(type_, value)

    label = name or path
    return Informer(transport, path, on_sync=on_sync, on_event=on_event, options=options, backoff=backoff,
                    name=f"{label} ({', '.join(consumer.name for consumer in readers)})", on_error=on_error,
                    transform=kept_by_each)


def bound_pods_informer(transport: Transport, consumers: Sequence[InformerConsumer[Any]], *,
                        backoff: Backoff | None = None) -> Informer[tuple[Any, ...]]:
    """The bound, unfinished pods (`BOUND_UNFINISHED_PODS`), to every one of `consumers`."""
    return shared_informer(transport, PODS_PATH, consumers, backoff=backoff, name="pods",
                           options=InformerOptions(field_selector=BOUND_UNFINISHED_PODS))
