"""The node's pods as the agent knows them from its watch (or a fixed list), kept by what uses them."""

from __future__ import annotations

import logging
from typing import Any

from colocation.agent.batch_cgroups import PodResources, pod_resources
from colocation.agent.classify import PodInfo, classify
from colocation.agent.cpu_burst import BurstPod, burst_pod
from colocation.agent.scrape import ScrapeTarget, scrape_target

log = logging.getLogger(__name__)

_TERMINAL_PHASES = ("Succeeded", "Failed")


class NodePods:
    """The node's pods (from its watch, or a fixed list), classified, by UID and by name; and
    those annotated for scraping, by name; with `keep_batch`, those naming batch resources, by UID;
    with `keep_burst`, those that may burst (CPU burst), by UID."""

    def __init__(self, keep_batch: bool = False, keep_burst: bool = False) -> None:
        self.keep_batch = keep_batch
        self.keep_burst = keep_burst
        self.burst: dict[str, BurstPod] = {}
        self.by_uid: dict[str, PodInfo] = {}
        self.by_name: dict[tuple[str, str], PodInfo] = {}
        self.scrape_targets: dict[tuple[str, str], ScrapeTarget] = {}
        self.batch: dict[str, PodResources] = {}

    async def on_sync(self, items: list[dict[str, Any]], resource_version: str = "") -> None:
        self.by_uid, self.by_name, self.scrape_targets, self.batch, self.burst = {}, {}, {}, {}, {}
        for item in items:
            await self.on_event("ADDED", item)

    async def on_event(self, type_: str, pod: dict[str, Any]) -> None:
        metadata = pod.get("metadata") or {}
        uid, key = str(metadata.get("uid") or ""), (str(metadata.get("namespace") or ""), str(metadata.get("name")))
        old = self.by_name.pop(key, None)
        if old is not None:
            self.by_uid.pop(old.uid, None)
            self.batch.pop(old.uid, None)
            self.burst.pop(old.uid, None)
        self.scrape_targets.pop(key, None)
        if type_ == "DELETED" or (pod.get("status") or {}).get("phase") in _TERMINAL_PHASES:
            return
        resources = pod_resources(pod) if self.keep_batch else None
        if resources is not None and resources.uid:
            self.batch[resources.uid] = resources
        bursting = burst_pod(pod) if self.keep_burst else None
        if bursting is not None and bursting.resources.uid:
            self.burst[bursting.resources.uid] = bursting
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
