"""A stored NodeResource status, kept as its JSON, deflated: a fifth of the memory of its parsed form.

The leader keeps every node's NodeResource to render the next status against the stored one
(at 2,000 simulated nodes its NodeResources held 9.6 MiB of Python objects). A status (figures,
times, a message, four conditions) is about 3.5 KiB parsed, 1.3 KiB as JSON and 0.7 KiB packed
(`tests/unit/controllers/test_packed_status.py`, tracemalloc). What every evaluation reads,
the figures the status shows and the time of the last Node write, is kept beside it; the rest
is parsed when a status is rendered, which the reconciler does only when its inputs changed
(`node_memo`). It reads as the parsed status (a `Mapping`), a field it lacks is absent.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from colocation.apimachinery.objects import deflated, inflated

# Read at every evaluation of the node (`nodewrite.shown_batch`, the reconciler's last Node write).
EVERY_EVALUATION = ("batchCPU", "batchMemory", "midCPU", "midMemory", "lastNodeUpdateTime")


_EMPTY = deflated(b"{}")


class PackedStatus(Mapping[str, Any]):
    __slots__ = ("_deflated", "_read_often")
    _deflated: bytes
    _read_often: tuple[Any, ...]

    def __init__(self, status: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_deflated", deflated(orjson.dumps(status)))
        object.__setattr__(self, "_read_often", tuple(status.get(key) for key in EVERY_EVALUATION))

    def unpacked(self) -> dict[str, Any]:
        """The status, parsed anew: the caller's to read or change."""
        parsed: dict[str, Any] = orjson.loads(inflated(self._deflated))
        return parsed

    def get(self, key: str, default: Any = None) -> Any:
        if key in EVERY_EVALUATION:
            value = self._read_often[EVERY_EVALUATION.index(key)]
            return default if value is None else value
        return self.unpacked().get(key, default)

    def __getitem__(self, key: str) -> Any:
        return self.unpacked()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.unpacked())

    def __len__(self) -> int:
        return len(self.unpacked())

    def __bool__(self) -> bool:
        return self._deflated != _EMPTY

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("PackedStatus is read-only")

    def __reduce__(self) -> tuple[Any, ...]:  # copy and pickle: __setattr__ refuses theirs
        return PackedStatus, (self.unpacked(),)

    def __repr__(self) -> str:
        return f"PackedStatus({inflated(self._deflated).decode()})"


def unpacked_status(status: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A stored status as a plain mapping (packed or not); empty for None."""
    if isinstance(status, PackedStatus):
        return status.unpacked()
    return status or {}
