"""The ConfigMap colocation-config as the controllers see it: parsed, last good kept, errors reported.

Every change of the ConfigMap's data bumps `generation`, which makes every node's NodeSLO and
NodeResource re-rendered. A key whose new value is invalid keeps its last good value
(`ParsedConfig.keeping_last_good`) and a Warning event on the ConfigMap names the key and the
error, once per distinct error (a relist or a resync of the same bad value posts nothing new). A
key that becomes valid again gets a Normal event. A deleted ConfigMap means the defaults.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping
from typing import Any, Final, Protocol

from colocation.controllers.config import CONFIG_MAP_NAME, ParsedConfig, parse_config
from colocation.controllers.events import NORMAL, WARNING, EventType, ObjectRef

log = logging.getLogger(__name__)

REASON_INVALID: Final = "InvalidConfiguration"
REASON_APPLIED: Final = "ConfigurationApplied"


class PostEvent(Protocol):
    """Posts an Event on an object (`KubeWriter.event`)."""

    def __call__(self, ref: ObjectRef, type_: EventType, reason: str, *, message: str) -> Awaitable[None]: ...


class ConfigSource:
    def __init__(self, namespace: str, post_event: PostEvent, name: str = CONFIG_MAP_NAME) -> None:
        self.namespace = namespace
        self.name = name
        self.parsed = parse_config(None)
        self.generation = 0
        self.loaded = False  # False until the ConfigMap was read (or found absent) once
        self._data: Mapping[str, str] | None = None
        self._errors: dict[str, str] = {}
        self._post_event = post_event

    def concerns(self, obj: Mapping[str, Any]) -> bool:
        metadata = obj.get("metadata") or {}
        return metadata.get("namespace") == self.namespace and metadata.get("name") == self.name

    async def update(self, config_map: Mapping[str, Any] | None) -> bool:
        """Apply the ConfigMap (None: it does not exist); True if its data changed."""
        self.loaded = True
        data = dict((config_map or {}).get("data") or {})
        if config_map is not None and data == self._data:
            return False
        self._data = data if config_map is not None else None
        parsed = parse_config(data).keeping_last_good(self.parsed)
        self.parsed = parsed
        self.generation += 1  # rendering is compared with what is stored: a no-op change writes nothing
        if config_map is not None:
            await self._report(config_map, parsed)
        else:
            self._errors = {}
        log.info("cluster configuration read", extra={"generation": self.generation,
                                                      "invalid_keys": sorted(parsed.errors)})
        return True

    async def _report(self, config_map: Mapping[str, Any], parsed: ParsedConfig) -> None:
        ref = ObjectRef.of({"apiVersion": "v1", "kind": "ConfigMap", **config_map})
        for key, error in sorted(parsed.errors.items()):
            if self._errors.get(key) != error:
                kept = "keeping its last good value" if key in parsed.keys else "using the defaults"
                log.warning("invalid configuration", extra={"key": key, "error": error})
                await self._post_event(ref, WARNING, REASON_INVALID, message=f"{error} ({kept})")
        for key in sorted(set(self._errors) - set(parsed.errors)):
            await self._post_event(ref, NORMAL, REASON_APPLIED, message=f"{key}: valid again, applied")
        self._errors = dict(parsed.errors)
