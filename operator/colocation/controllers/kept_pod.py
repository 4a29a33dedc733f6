"""A kept pod's parts as read-only mappings over slots, at about a third of a dict's memory.

The leader keeps some 30 pods per node; as three small dicts a pod's metadata, spec and the pod
itself took 552 bytes (184 each, their key tables included), as these 208. Every reader of
pods (the formulas, the classes, eviction) reads a pod as a `Mapping` through `.get`, so a kept
pod reads as the dict `slim_pod` made before: a field it lacks is absent (None is never kept),
it compares equal to that dict, `dict(pod)` gives it back. A slot is set once, by `slim_pod`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from colocation.apimachinery.pods import KEPT_REQUESTS
from colocation.koordinator.classes import KEPT_CLASSES


class SlotMapping(Mapping[str, Any]):
    """A mapping whose keys are its class's slots; an unset (None) slot is an absent key."""

    __slots__ = ()
    KEYS: ClassVar[frozenset[str]] = frozenset()
    KEY_ORDER: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **fields: Any) -> None:
        for key in self.KEY_ORDER:
            object.__setattr__(self, key, fields.pop(key, None))
        if fields:
            raise TypeError(f"{type(self).__name__} has no {', '.join(sorted(fields))}")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.KEY_ORDER = tuple(cls.__slots__)
        cls.KEYS = frozenset(cls.KEY_ORDER)

    def get(self, key: str, default: Any = None) -> Any:  # the readers' one access: kept fast
        if key in self.KEYS:
            value = getattr(self, key)
            if value is not None:
                return value
        return default

    def __getitem__(self, key: str) -> Any:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self.KEYS and getattr(self, key) is not None

    def __iter__(self) -> Iterator[str]:
        return (key for key in self.KEY_ORDER if getattr(self, key) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:  # copy and pickle: __setattr__ refuses theirs
        return _rebuilt, (type(self), tuple(getattr(self, key) for key in self.KEY_ORDER))


def _rebuilt(cls: type[SlotMapping], values: tuple[Any, ...]) -> SlotMapping:
    return cls(**dict(zip(cls.KEY_ORDER, values, strict=True)))


class KeptPodMetadata(SlotMapping):
    __slots__ = ("annotations", "deletionTimestamp", "labels", "name", "namespace", "uid")


class KeptPodSpec(SlotMapping):
    __slots__ = ("nodeName", "priority")


class KeptPod(SlotMapping):
    """metadata (`KeptPodMetadata`), spec (`KeptPodSpec`), status (a shared dict), and the
    requests and classes derived once (`pods.KEPT_REQUESTS`, `classes.KEPT_CLASSES`)."""

    __slots__ = ("metadata", "spec", "status", KEPT_REQUESTS, KEPT_CLASSES)
