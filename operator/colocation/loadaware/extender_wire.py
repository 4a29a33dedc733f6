"""The kube-scheduler extender's wire format (k8s.io/kube-scheduler/extender/v1), read and written. No I/O.

The scheduler POSTs `ExtenderArgs` (capitalised keys: `Pod`, `Nodes`, `NodeNames`) to the filter
and prioritize verbs. With `nodeCacheCapable: true` it sends `NodeNames` only; without, a `Nodes`
NodeList, whose items are answered in kind. A filter answers `ExtenderFilterResult` (`Nodes` or
`NodeNames`, `FailedNodes`, `FailedAndUnresolvableNodes`, `Error`), naming only nodes it was given;
prioritize answers a `HostPriorityList`, `[{"Host": name, "Score": 0..10}]`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson


class ExtenderArgsError(ValueError):
    """A body that is no ExtenderArgs: the one-line reason."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtenderArgs:
    pod: Mapping[str, Any]
    names: tuple[str, ...]  # the candidates, in the order sent
    # The NodeList's items by name when the scheduler sent `Nodes` (not node-cache-capable): a
    # filter answers the passing ones in kind. None when it sent `NodeNames`.
    node_items: Mapping[str, Any] | None = None


def parse_extender_args(body: bytes) -> ExtenderArgs:
    try:
        args = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise ExtenderArgsError(f"the body is not JSON: {error}") from None
    if not isinstance(args, dict):
        raise ExtenderArgsError("the body is not an ExtenderArgs object")
    pod = args.get("Pod")
    if not isinstance(pod, dict):
        raise ExtenderArgsError("ExtenderArgs.Pod is missing")
    names = args.get("NodeNames")
    if isinstance(names, list):
        if not set(map(type, names)) <= {str}:  # one C-level pass: 5,000 names cost well under a millisecond
            raise ExtenderArgsError("ExtenderArgs.NodeNames holds a value that is not a string")
        return ExtenderArgs(pod=pod, names=tuple(names))
    nodes = args.get("Nodes")
    items = nodes.get("items") if isinstance(nodes, dict) else None
    if isinstance(items, list):
        by_name = {str((item.get("metadata") or {}).get("name") or ""): item
                   for item in items if isinstance(item, dict)}
        by_name.pop("", None)
        return ExtenderArgs(pod=pod, names=tuple(by_name), node_items=by_name)
    return ExtenderArgs(pod=pod, names=())  # the scheduler sends null for no candidates


def filter_result(args: ExtenderArgs, *, passed: Sequence[str], failed: Mapping[str, str] | None = None,
                  unresolvable: Mapping[str, str] | None = None, error: str = "") -> dict[str, Any]:
    """An ExtenderFilterResult, shaped as the request was (names, or the NodeList's items)."""
    given = set(args.names)
    # Never a node the scheduler did not send; the usual answer is a subset, checked at C speed.
    kept = list(passed) if given.issuperset(passed) else [name for name in passed if name in given]
    result: dict[str, Any] = {
        "NodeNames": kept if args.node_items is None else None,
        "Nodes": None if args.node_items is None else {"items": [args.node_items[name] for name in kept]},
        "FailedNodes": {name: reason for name, reason in (failed or {}).items() if name in given},
        "FailedAndUnresolvableNodes": {name: reason for name, reason in (unresolvable or {}).items()
                                       if name in given},
        "Error": error,
    }
    return result


def host_priority_list(scores: Mapping[str, int], names: Sequence[str]) -> list[dict[str, Any]]:
    """A HostPriorityList in the order of `names`."""
    return [{"Host": name, "Score": scores.get(name, 0)} for name in names]


def encoded(value: object) -> bytes:
    return orjson.dumps(value)
