"""Server-side printing: objects as `meta.k8s.io` Tables, column for column as kube-apiserver builds them.

kubectl asks for a Table (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io,...`) and prints the
cells it gets, so every column and every cell format here mirrors upstream. This module assembles the
Table and picks its printer: a built-in one (`printers`), the default convertor (Name, Created At) of
resources without a printer, or the CRD convertor (Name + additionalPrinterColumns evaluated by
`jsonpath`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from colocation.apimachinery.objects import Obj
from colocation.apimachinery.tables import TABLE_GROUP, human_duration, parse_timestamp
from colocation_sandbox.server.jsonpath import Step, evaluate_jsonpath, go_text, parse_jsonpath
from colocation_sandbox.server.printers import (
    BUILTIN_PRINTERS,
    CREATED_AT_COLUMN,
    CREATED_DOC,
    NAME_COLUMN,
    Cell,
    Column,
    Printer,
)
from colocation_sandbox.server.resource_types import PrinterColumn, ResourceType

# --- Tables ---------------------------------------------------------------------------------------

def partial_object_metadata(obj: Obj, table_version: str = "v1") -> Obj:
    return {"kind": "PartialObjectMetadata", "apiVersion": f"{TABLE_GROUP}/{table_version}",
            "metadata": obj.get("metadata") or {}}


def to_table(rt: ResourceType, objects: list[Obj], *, list_meta: Obj, include_object: str = "Metadata",
             table_version: str = "v1", now: datetime, include_headers: bool = True) -> Obj:
    """A `meta.k8s.io` Table of `objects`, which are of type `rt`.

    `include_object` is the request's, already checked (`tables.include_object`);
    `include_headers=False` is for watch events after the first, which upstream sends without
    column definitions.
    """
    columns, row_of = printer_for(rt)
    rows = []
    for obj in objects:
        cells, conditions = row_of(obj, now)
        row: Obj = {"cells": cells}
        if conditions:
            row["conditions"] = conditions
        if include_object == "Object":
            row["object"] = obj
        elif include_object == "None":
            row["object"] = None
        else:
            row["object"] = partial_object_metadata(obj, table_version)
        rows.append(row)
    metadata: Obj = {}
    for key in ("resourceVersion", "continue", "remainingItemCount"):
        if list_meta.get(key) not in (None, ""):
            metadata[key] = list_meta[key]
    return {
        "kind": "Table",
        "apiVersion": f"{TABLE_GROUP}/{table_version}",
        "metadata": metadata,
        "columnDefinitions": [c.definition() for c in columns] if include_headers else None,
        "rows": rows,
    }


def printer_for(rt: ResourceType) -> Printer:
    """The columns and row builder upstream uses for this resource type."""
    key = (rt.group, rt.resource)
    if key in BUILTIN_PRINTERS:
        return BUILTIN_PRINTERS[key]
    if key in DEFAULT_CONVERTOR_RESOURCES:
        return (NAME_COLUMN, CREATED_AT_COLUMN), _default_convertor_row
    return custom_resource_printer(rt.printer_columns)


def _default_convertor_row(obj: Obj, now: datetime) -> tuple[list[Cell], list[Obj]]:
    meta = obj.get("metadata") or {}
    created = parse_timestamp(meta.get("creationTimestamp")) or datetime(1, 1, 1, tzinfo=UTC)
    return [meta.get("name", ""), created.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")], []


# Registered with upstream's default convertor: Name and Created At (an RFC 3339 timestamp, not an age).
DEFAULT_CONVERTOR_RESOURCES = frozenset({
    ("apiextensions.k8s.io", "customresourcedefinitions"),
    ("", "limitranges"),
    ("rbac.authorization.k8s.io", "roles"),
    ("rbac.authorization.k8s.io", "clusterroles"),
})


# --- Custom resources: additionalPrinterColumns ---------------------------------------------------

DEFAULT_CRD_COLUMNS = (PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp",
                                     description=CREATED_DOC),)


def custom_resource_printer(printer_columns: Iterable[PrinterColumn]) -> Printer:
    """The CRD table convertor: Name, then each printer column (Age alone when the CRD has none)."""
    specs = tuple(printer_columns) or DEFAULT_CRD_COLUMNS
    columns = [NAME_COLUMN]
    paths: list[list[Step]] = []
    for spec in specs:
        try:
            steps = parse_jsonpath(spec.json_path)
        except ValueError:
            break  # upstream keeps the columns parsed so far and drops the rest
        description = spec.description or f"Custom resource definition column (in JSONPath format): " \
                                          f"{spec.json_path}"
        columns.append(Column(name=spec.name, type=spec.type, description=description, priority=spec.priority,
                              format=spec.format))
        paths.append(steps)
    typed = list(zip(columns[1:], paths, strict=True))

    def row(obj: Obj, now: datetime) -> tuple[list[Cell], list[Obj]]:
        cells: list[Cell] = [(obj.get("metadata") or {}).get("name", "")]
        for column, steps in typed:
            try:
                found = evaluate_jsonpath(steps, obj)
            except LookupError:
                found = []
            cells.append(typed_cell(column.type, found[0], now) if found else None)
        return cells, []

    return tuple(columns), row


def typed_cell(column_type: str, value: Any, now: datetime) -> Cell:
    """A JSONPath result as the CRD convertor types it for its column."""
    if column_type == "string":
        return go_text(value)
    if value is None:
        return None
    if column_type == "integer" and isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)  # Go converts float64 to int64 by truncation, as int() does
    if column_type == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if column_type == "boolean" and isinstance(value, bool):
        return value
    if column_type == "date" and isinstance(value, str):
        if value in ("", "null"):
            return "<unknown>"
        at = parse_timestamp(value)
        return "<invalid>" if at is None else human_duration((now - at).total_seconds())
    return None
