"""Host applications: NodeSLO `spec.hostApplications` → the cgroups the collector measures.

A host application is a process outside Kubernetes in a cgroup of its own. For each one its
NodeSLO lists, this finds the cgroup as koordlet places it, relative to each controller's root;
the agent measures it, reports it in `hostApplicationMetric` and leaves it out of
`systemUsage`. An entry that cannot be used (a bad or repeated name, a path with `..`, an
unknown base, beyond 256 entries) is left out with a one-line reason for the caller to log. A
priority or qos class that is not Koordinator's is dropped, not the application.

Where the cgroups are, and how they are measured: docs/agent.md#host-applications
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from colocation.agent.cgroups import KUBEPODS_ROOTS
from colocation.koordinator.classes import PRIORITY_CLASSES, QOS_CLASSES
from colocation.koordinator.slo_strategies import MAX_HOST_APPLICATIONS

__all__ = ["CgroupBase", "HostApplication", "follow_host_applications", "host_applications_of",
           "resolve_cgroup_path"]

log = logging.getLogger(__name__)

CgroupBase = Literal["CgroupRoot", "Kubepods", "KubepodsBurstable", "KubepodsBesteffort"]
_BASES: tuple[CgroupBase, ...] = ("CgroupRoot", "Kubepods", "KubepodsBurstable", "KubepodsBesteffort")
_TIERS: Mapping[CgroupBase, str] = {"Kubepods": "", "KubepodsBurstable": "burstable",
                                    "KubepodsBesteffort": "besteffort"}
_MAX_NAME = 253


@dataclass(frozen=True, kw_only=True)
class HostApplication:
    """A non-containerized application whose cgroup the agent measures (NodeSLO hostApplications)."""

    name: str
    cgroup_path: str  # under `base`, e.g. "system.slice/nginx.service" under the root
    priority: str | None = None  # Koordinator's classes, None when the NodeSLO leaves them unset
    qos: str | None = None
    base: CgroupBase = "CgroupRoot"


def host_applications_of(nodeslo: Mapping[str, Any] | None) -> tuple[tuple[HostApplication, ...], list[str]]:
    """The NodeSLO's host applications, and why any entry was left out or changed."""
    spec = (nodeslo or {}).get("spec")
    listed = spec.get("hostApplications") if isinstance(spec, Mapping) else None
    if listed is None:
        return (), []
    if not isinstance(listed, list):
        return (), ["hostApplications is not a list"]
    apps: list[HostApplication] = []
    problems: list[str] = []
    for index, entry in enumerate(listed):
        if len(apps) == MAX_HOST_APPLICATIONS:
            problems.append(f"hostApplications beyond the first {MAX_HOST_APPLICATIONS} are ignored")
            break
        app = _application(entry, f"hostApplications[{index}]", {app.name for app in apps}, problems=problems)
        if app is not None:
            apps.append(app)
    return tuple(apps), problems


def follow_host_applications(current: Sequence[HostApplication], nodeslo: Mapping[str, Any] | None,
                             node: str) -> tuple[HostApplication, ...]:
    """The host applications to measure now that the NodeSLO is `nodeslo`; a log line when they
    change and for every entry left out (NodeSLO changes are rare: not a line per sample)."""
    apps, problems = host_applications_of(nodeslo)
    for problem in problems:
        log.info("host application ignored", extra={"node": node, "reason": problem})
    if apps != tuple(current):
        log.info("host applications changed", extra={
            "node": node, "host_applications": {app.name: f"{app.base}:{app.cgroup_path}" for app in apps}})
    return apps


def _application(entry: Any, where: str, taken: set[str], *, problems: list[str]) -> HostApplication | None:
    if not isinstance(entry, Mapping):
        problems.append(f"{where} is not an object")
        return None
    name = entry.get("name")
    if not isinstance(name, str) or not 0 < len(name) <= _MAX_NAME:
        problems.append(f"{where}: name {name!r} is not a string of 1 to {_MAX_NAME} characters")
        return None
    if name in taken:
        problems.append(f"{where}: name {name!r} repeats an earlier entry")
        return None
    priority, qos = entry.get("priority"), entry.get("qos")
    if priority not in (None, "", *PRIORITY_CLASSES):
        problems.append(f"{where} ({name}): priority {priority!r} is not a Koordinator priority class; left out")
    if qos not in (None, "", *QOS_CLASSES):
        problems.append(f"{where} ({name}): qos {qos!r} is not a Koordinator QoS class; left out")
    priority = priority if priority in PRIORITY_CLASSES else None
    qos = qos if qos in QOS_CLASSES else None
    located = _location(entry.get("cgroupPath"), name, qos)
    if isinstance(located, str):
        problems.append(f"{where} ({name}): {located}")
        return None
    base, path = located
    return HostApplication(name=name, cgroup_path=path, priority=priority, qos=qos, base=base)


def _location(cgroup_path: Any, name: str, qos: str | None) -> tuple[CgroupBase, str] | str:
    """(base, path under it), or why there is none."""
    if cgroup_path is None:
        parts: Sequence[Any] = ("host-latency-sensitive" if qos in ("LSE", "LSR", "LS") else
                                "host-best-effort" if qos == "BE" else "", name)
        base: Any = "CgroupRoot"
    elif isinstance(cgroup_path, Mapping):
        base = cgroup_path.get("base") or "CgroupRoot"
        parts = (cgroup_path.get("parentDir") or "", cgroup_path.get("relativePath") or "")
        if base not in _BASES:
            return f"cgroupPath.base {base!r} is none of {', '.join(_BASES)}"
    else:
        return "cgroupPath is not an object"
    if not all(isinstance(part, str) for part in parts):
        return "cgroupPath.parentDir and relativePath must be strings"
    segments = [segment for part in parts for segment in part.split("/") if segment and segment != "."]
    if ".." in segments:
        return "its cgroup path may not contain '..'"
    return base, "/".join(segments)


def resolve_cgroup_path(app: HostApplication, controller_root: Path) -> str | None:
    """The application's cgroup relative to `controller_root`; None when its kubepods base is not there."""
    if app.base == "CgroupRoot":
        return app.cgroup_path.strip("/")
    tier = _TIERS[app.base]
    for root in KUBEPODS_ROOTS:
        if not (controller_root / root).is_dir():
            continue
        if not tier:
            directory = root
        elif root.endswith(".slice"):  # systemd: each unit's name repeats its parents'
            directory = f"{root}/{root.rsplit('/', 1)[-1].removesuffix('.slice')}-{tier}.slice"
        else:
            directory = f"{root}/{tier}"
        return f"{directory}/{app.cgroup_path.strip('/')}".rstrip("/")
    return None
