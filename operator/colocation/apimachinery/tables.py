"""Kubernetes Table conventions shared by every server: Accept negotiation, ages as kubectl shows them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.fielderrors import go_quote

TABLE_GROUP = "meta.k8s.io"
TABLE_VERSIONS = ("v1", "v1beta1")
INCLUDE_OBJECT_VALUES = ("Object", "Metadata", "None")


# --- Accept negotiation ---------------------------------------------------------------------------

def wants_table(accept_header: str) -> str | None:
    """The Table version the first acceptable Accept clause asks for, or None for the plain object.

    Like the apiserver: clauses by preference (q, then specificity), the first one the server can
    serve wins; `as=Table` needs `g=meta.k8s.io` and a version it knows, or the clause is skipped.
    Nothing acceptable at all is 406, as upstream.
    """
    return _wants_as(accept_header, "Table")


def wants_metadata_only(accept_header: str) -> str | None:
    """The PartialObjectMetadata version the first acceptable Accept clause asks for, or None for
    the whole object: kube-apiserver shapes a write's answer as it shapes a get's, so a writer that
    needs only the new resourceVersion is spared the object coming back. 406 as `wants_table`."""
    return _wants_as(accept_header, "PartialObjectMetadata")


def _wants_as(accept_header: str, kind: str) -> str | None:
    if not accept_header.strip():
        return None
    for media_type, params in _accept_clauses(accept_header):
        if media_type not in ("application/json", "application/yaml", "application/*", "*/*"):
            continue
        if "as" not in params and "g" not in params and "v" not in params:
            return None
        if params.get("as") == kind and params.get("g") == TABLE_GROUP and params.get("v") in TABLE_VERSIONS:
            return params["v"]
    raise ApiError(406, "NotAcceptable",
                   "only the following media types are accepted: application/json, application/yaml")


def metadata_only_accept(version: str = "v1") -> str:
    """The Accept header of a client that wants a write's answer as PartialObjectMetadata, and
    the whole object from a server that cannot shape it."""
    return f"application/json;as=PartialObjectMetadata;g={TABLE_GROUP};v={version},application/json"


def include_object(query: Mapping[str, str]) -> str:
    """A Table request's includeObject ("Metadata" when not given), checked as kube-apiserver checks
    TableOptions before it starts answering, a watch included."""
    value = query.get("includeObject", "")
    if value not in (*INCLUDE_OBJECT_VALUES, ""):
        raise ApiError.bad_request(f"Unable to convert to Table as requested: includeObject: Invalid value: "
                                   f"{go_quote(value)}: must be 'Metadata', 'Object', 'None', or empty")
    return value or "Metadata"


def _accept_clauses(header: str) -> list[tuple[str, dict[str, str]]]:
    clauses: list[tuple[float, int, str, dict[str, str]]] = []
    for raw in header.split(","):
        media_type, *raw_params = (part.strip() for part in raw.split(";"))
        params: dict[str, str] = {}
        quality = 1.0
        for param in raw_params:
            key, _, value = param.partition("=")
            if key.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
            elif key.strip():
                params[key.strip()] = value.strip()
        wildcards = media_type.count("*")
        clauses.append((quality, wildcards, media_type.lower(), params))
    # Stable: equally preferred clauses keep the client's order.
    clauses.sort(key=lambda c: (-c[0], c[1]))
    return [(media_type, params) for _, _, media_type, params in clauses]


# --- Durations and timestamps ---------------------------------------------------------------------

def human_duration(seconds: float) -> str:
    """Upstream's duration.HumanDuration: ~2-3 significant figures, e.g. 5s, 3m20s, 10m, 2d3h, 3y."""
    whole = int(seconds)  # truncates toward zero, as Go's int(d.Seconds())
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 60 * 2:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        rest = whole % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        rest = (hours // 24) % 365
        return f"{hours // 24 // 365}y{rest}d" if rest else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def parse_timestamp(value: Any) -> datetime | None:
    """An RFC 3339 timestamp as Go parses it; None for a missing, empty or malformed one."""
    if not isinstance(value, str) or not _RFC3339.match(value):
        return None
    text = value.replace("Z", "+00:00")
    head, dot, tail = text.partition(".")
    if dot:  # Python takes at most 6 fractional digits; Go takes nanoseconds.
        digits = re.match(r"\d+", tail)
        assert digits is not None
        text = f"{head}.{digits.group()[:6].ljust(6, '0')}{tail[digits.end():]}"
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def age(*, timestamp: Any, now: datetime) -> str:
    """Time since a timestamp, as printers show it; `<unknown>` when there is none."""
    at = parse_timestamp(timestamp)
    if at is None:
        return "<unknown>"
    return human_duration((now - at).total_seconds())
