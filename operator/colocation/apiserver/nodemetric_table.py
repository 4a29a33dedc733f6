"""`kubectl get nodemetrics`: a Table with each node's usage and the age of its data."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from colocation.apimachinery.quantity import format_bytes, format_millis
from colocation.apimachinery.tables import TABLE_GROUP, human_duration
from colocation.nodemetrics.storage_interface import Entry

COLUMNS = [
    {"name": "Name", "type": "string", "format": "name", "description": "The node's name.", "priority": 0},
    {"name": "CPU", "type": "string", "format": "", "description": "Node CPU usage.", "priority": 0},
    {"name": "Memory", "type": "string", "format": "", "description": "Node memory usage.", "priority": 0},
    {"name": "Pods", "type": "integer", "format": "", "description": "Pods with usage in the report.",
     "priority": 0},
    {"name": "Data Age", "type": "string", "format": "",
     "description": "Time since the agent measured the data (status.updateTime).", "priority": 0},
]


def table(entries: Iterable[Entry], resource_version: int, now: float) -> dict[str, Any]:
    rows = []
    for entry in entries:
        figures = entry.figures
        rows.append({
            "cells": [entry.name, format_millis(figures.cpu_millis), format_bytes(figures.memory_bytes),
                      figures.pod_count, human_duration(now - figures.update_time)],
            "object": {"kind": "PartialObjectMetadata", "apiVersion": f"{TABLE_GROUP}/v1",
                       "metadata": {"name": entry.name, "resourceVersion": str(entry.resource_version),
                                    "labels": dict(entry.labels)}},
        })
    return {"kind": "Table", "apiVersion": f"{TABLE_GROUP}/v1",
            "metadata": {"resourceVersion": str(resource_version)}, "columnDefinitions": COLUMNS, "rows": rows}
