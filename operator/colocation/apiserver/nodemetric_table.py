"""`kubectl get nodemetrics`: a Table with each node's usage and the age of its data, in human units.

CPU in cores with two decimals ("1.50"), memory in Mi below 1Gi, else Gi ("2.00Gi"; see
`apimachinery.human_units`); the objects themselves (`-o yaml`) keep the Quantities.

Rows come from stored entries (get and list, without parsing their bodies) or from the objects of
watch events, a BOOKMARK's included: it has only metadata, so its cells are empty but the name's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from colocation.apimachinery import human_units
from colocation.apimachinery.objects import Obj
from colocation.apimachinery.tables import TABLE_GROUP, human_duration, parse_timestamp
from colocation.nodemetrics.report_schema import UsageFigures, figures_of
from colocation.nodemetrics.storage_interface import Entry

COLUMNS = [
    {"name": "Name", "type": "string", "format": "name", "description": "The node's name.", "priority": 0},
    {"name": "CPU", "type": "string", "format": "", "description": "Node CPU usage, in cores.", "priority": 0},
    {"name": "Memory", "type": "string", "format": "", "description": "Node memory usage (Mi, Gi).",
     "priority": 0},
    {"name": "Pods", "type": "integer", "format": "", "description": "Pods with usage in the report.",
     "priority": 0},
    {"name": "Data Age", "type": "string", "format": "",
     "description": "Time since the agent measured the data (status.updateTime).", "priority": 0},
    {"name": "Age", "type": "string", "format": "",
     "description": "Time since the node's first report to this leader (metadata.creationTimestamp).",
     "priority": 0},
]


def table(rows: Iterable[Obj], resource_version: int | str, version: str = "v1", *,
          include_headers: bool = True) -> dict[str, Any]:
    """A Table of rows from `entry_row` or `object_row`; watch events after the first go without
    column definitions, as upstream sends them."""
    return {"kind": "Table", "apiVersion": f"{TABLE_GROUP}/{version}",
            "metadata": {"resourceVersion": str(resource_version)},
            "columnDefinitions": COLUMNS if include_headers else None, "rows": list(rows)}


def entry_row(entry: Entry, now: float, include_object: str = "Metadata", *, version: str = "v1") -> Obj:
    metadata: Obj = {"name": entry.name, "resourceVersion": str(entry.resource_version),
                     "creationTimestamp": entry.creation_timestamp}
    if entry.labels:
        metadata["labels"] = dict(entry.labels)
    return _row(_cells(entry.name, entry.figures, entry.creation_timestamp, now=now), metadata,
                lambda: orjson.loads(entry.body), include_object=include_object, version=version)


def object_row(obj: Obj, now: float, include_object: str = "Metadata", *, version: str = "v1") -> Obj:
    metadata = obj.get("metadata") or {}
    figures = figures_of(obj) if "status" in obj else None
    return _row(_cells(metadata.get("name", ""), figures, metadata.get("creationTimestamp"), now=now), metadata,
                lambda: obj, include_object=include_object, version=version)


def _cells(name: str, figures: UsageFigures | None, created: object, *, now: float) -> list[Any]:
    created_at = parse_timestamp(created)
    age = human_duration(now - created_at.timestamp()) if created_at else None
    if figures is None:
        return [name, None, None, None, None, age]
    return [name, human_units.cores(figures.cpu_millis), human_units.memory(figures.memory_bytes),
            figures.pod_count, human_duration(now - figures.update_time), age]


def _row(cells: list[Any], metadata: Mapping[str, Any], whole: Callable[[], Obj], *, include_object: str,
         version: str) -> Obj:
    """A row with the object as includeObject asks: all of it, its metadata (the default) or none."""
    if include_object == "Object":
        shown = whole()
    elif include_object == "None":
        shown = None
    else:
        shown = {"kind": "PartialObjectMetadata", "apiVersion": f"{TABLE_GROUP}/{version}", "metadata": metadata}
    return {"cells": cells, "object": shown}
