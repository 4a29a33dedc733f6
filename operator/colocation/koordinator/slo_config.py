"""One key of the configuration: a cluster strategy and per-node rules, and the strategy of each node.

A key's value is `{"clusterStrategy": {...}, "nodeStrategies": [{"name", "nodeSelector",
...fields}]}`, the shape of Koordinator's slo-controller-config. The effective strategy of a
node is the built-in defaults, then `clusterStrategy` merged over them, then the first node
strategy whose nodeSelector (a metav1.LabelSelector) matches the node's labels, merged over
that. Merging is JSON merge (RFC 7386): objects merge field by field, a null removes a field
(back to its default), anything else replaces.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import ValidationError

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.merge_patch import json_merge_patch
from colocation.apimachinery.selectors import LabelSelector
from colocation.koordinator.slo_strategies import Strategy

S = TypeVar("S", bound=Strategy)


@dataclass(frozen=True)
class NodeRule(Generic[S]):
    """One entry of nodeStrategies, with the effective strategy of the nodes it selects."""

    name: str
    selector: LabelSelector
    strategy: S  # defaults <- clusterStrategy <- this entry


@dataclass(frozen=True)
class KeyConfig(Generic[S]):
    """The parsed value of one ConfigMap key."""

    cluster: S  # defaults <- clusterStrategy
    rules: tuple[NodeRule[S], ...] = ()

    def for_labels(self, labels: Mapping[str, str] | None) -> S:
        """The strategy of a node with these labels: the first matching rule's, else the cluster's."""
        for rule in self.rules:
            if rule.selector.matches(labels or {}):
                return rule.strategy
        return self.cluster


class ConfigError(ValueError):
    """A key's value is invalid; the message names the field and the problem."""


def parse_key(model: type[S], text: str) -> KeyConfig[S]:
    """Parse one key's JSON; raises ConfigError."""
    # An unknown field is most likely Koordinator's flat colocation-config: say what shape is expected.
    document = _document(text, {"clusterStrategy", "nodeStrategies"},
                         '{"clusterStrategy": {...}, "nodeStrategies": [...]}')
    cluster_json = document.get("clusterStrategy")
    if cluster_json is None:
        cluster_json = {}
    if not isinstance(cluster_json, dict):
        raise ConfigError(f"clusterStrategy: must be an object, not {_json_type(cluster_json)}")
    cluster = _validate(model, cluster_json, "clusterStrategy")
    entries = document.get("nodeStrategies")
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise ConfigError(f"nodeStrategies: must be a list, not {_json_type(entries)}")
    rules = tuple(_node_rule(model, cluster_json, entry, path=f"nodeStrategies[{index}]")
                  for index, entry in enumerate(entries))
    return KeyConfig(cluster, rules)


def parse_applications_key(model: type[S], text: str) -> KeyConfig[S]:
    """Parse host-application-config, in Koordinator's shape: `{"applications": [...],
    "nodeConfigs": [{"name", "nodeSelector", "applications": [...]}]}`. A node gets the
    applications of the first nodeConfig that selects it (none if it lists none), else the
    cluster's: lists replace, they do not merge. Raises ConfigError."""
    document = _document(text, {"applications", "nodeConfigs"},
                         '{"applications": [...], "nodeConfigs": [...]}')
    cluster = _validate(model, {"applications": document.get("applications") or []}, "")
    entries = document.get("nodeConfigs")
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise ConfigError(f"nodeConfigs: must be a list, not {_json_type(entries)}")
    rules = []
    for index, entry in enumerate(entries):
        if isinstance(entry, dict):
            entry = {**entry, "applications": entry.get("applications") or []}
        rules.append(_node_rule(model, {}, entry, path=f"nodeConfigs[{index}]"))
    return KeyConfig(cluster, tuple(rules))


def parse_object_key(model: type[S], text: str) -> S:
    """Parse a key whose value is one object of `model`'s fields, without per-node rules (the
    scheduler's `load-aware-config`). Raises ConfigError, worded as for the other keys."""
    return _validate(model, _json_object(text), "")


def _json_object(text: str) -> dict[str, Any]:
    try:
        document = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise ConfigError(f"invalid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise ConfigError(f"must be a JSON object, not {_json_type(document)}")
    return document


def _document(text: str, fields: set[str], shape: str) -> dict[str, Any]:
    document = _json_object(text)
    unknown = sorted(set(document) - fields)
    if unknown:
        raise ConfigError(f'unknown field "{unknown[0]}": expected {shape}')
    return document


def _node_rule(model: type[S], cluster_json: dict[str, Any], entry: Any, *, path: str) -> NodeRule[S]:
    if not isinstance(entry, dict):
        raise ConfigError(f"{path}: must be an object, not {_json_type(entry)}")
    fields = dict(entry)
    name = fields.pop("name", "")
    if not isinstance(name, str):
        raise ConfigError(f"{path}.name: must be a string")
    if name:
        path = f'{path} ("{name}")'
    if "nodeSelector" not in fields or fields["nodeSelector"] is None:
        # A nil selector matches no node: an entry without one can only be a mistake.
        raise ConfigError(f"{path}.nodeSelector: Required value (use {{}} to select every node)")
    try:
        selector = LabelSelector.from_api(fields.pop("nodeSelector"))
    except ApiError as exc:
        raise ConfigError(f"{path}.nodeSelector: {exc.message}") from None
    strategy = _validate(model, json_merge_patch(cluster_json, fields), path)
    return NodeRule(name, selector, strategy)


def _validate(model: type[S], document: dict[str, Any], path: str) -> S:
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        raise ConfigError("; ".join(_describe(error, path) for error in exc.errors())) from None


def _describe(error: Any, path: str) -> str:
    location = ".".join([path, *(f"[{part}]" if isinstance(part, int) else str(part) for part in error["loc"])])
    location = location.replace(".[", "[").removeprefix(".")
    message = str(error["msg"]).removeprefix("Value error, ")
    shown = error.get("input")
    if error["type"] == "missing" or isinstance(shown, (dict, list)):
        return f"{location}: {message}"
    return f"{location}: {message} (got {json.dumps(shown)})"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"
