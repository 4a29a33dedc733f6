"""The node's pods as the agent knows them from its watch (or a fixed list), kept by what uses them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from colocation.agent.classify import PodInfo, classify
from colocation.agent.scrape import ScrapeTarget, scrape_target

log = logging.getLogger(__name__)

_TERMINAL_PHASES = ("Succeeded", "Failed")

V = TypeVar("V")


class PodView(Generic[V]):
    """The node's pods one strategy keeps (colocation.agent.strategies), by UID: what `parse` makes
    of each pod that is neither deleted nor finished (None: not kept)."""

    def __init__(self, name: str, parse: Callable[[Mapping[str, Any]], V | None]) -> None:
        self.name = name
        self.parse = parse
        self.by_uid: dict[str, V] = {}


class NodePods:
    """The node's pods (from its watch, or a fixed list), classified, by UID and by name; and
    those annotated for scraping, by name; and, for each of `views`, the pods it keeps, by UID."""

    def __init__(self, views: Sequence[PodView[Any]] = ()) -> None:
        self.views = tuple(views)
        self.by_uid: dict[str, PodInfo] = {}
        self.by_name: dict[tuple[str, str], PodInfo] = {}
        self.scrape_targets: dict[tuple[str, str], ScrapeTarget] = {}

    def kept(self, name: str) -> Mapping[str, Any]:
        """The pods the view `name` keeps, by UID (none without such a view)."""
        return next((view.by_uid for view in self.views if view.name == name), {})

    async def on_sync(self, items: list[dict[str, Any]], resource_version: str = "") -> None:
        self.by_uid, self.by_name, self.scrape_targets = {}, {}, {}
        for view in self.views:
            view.by_uid = {}
        for item in items:
            await self.on_event("ADDED", item)

    async def on_event(self, type_: str, pod: dict[str, Any]) -> None:
        metadata = pod.get("metadata") or {}
        uid, key = str(metadata.get("uid") or ""), (str(metadata.get("namespace") or ""), str(metadata.get("name")))
        old = self.by_name.pop(key, None)
        if old is not None:
            self.by_uid.pop(old.uid, None)
            for view in self.views:
                view.by_uid.pop(old.uid, None)
        self.scrape_targets.pop(key, None)
        if type_ == "DELETED" or (pod.get("status") or {}).get("phase") in _TERMINAL_PHASES:
            return
        for view in self.views:
            kept = view.parse(pod)
            if kept is not None and uid:
                view.by_uid[uid] = kept
        target = scrape_target(pod)
        if target is not None:  # scraped whether or not the pod can be classified
            self.scrape_targets[key] = target
        try:
            info = classify(pod)
        except Exception as error:  # a pod the conventions cannot place is left out of reports, not fatal
            log.warning("cannot classify pod", extra={"pod": f"{key[0]}/{key[1]}", "error": str(error)})
            return
        self.by_name[key] = info
        if uid:
            self.by_uid[uid] = info
