"""System settings, the pure part: NodeSLO `systemStrategy` and the node's memory → kernel settings.

As koordlet's SystemConfig feature, `desired_settings` gives `vm.min_free_kbytes` (from
`minFreeKbytesFactor` and MemTotal) and `vm.watermark_scale_factor`, each only within koordlet's
bounds. A field that is absent, not an integer, or out of bounds gives no setting for its key,
with a one-line reason for the caller to log; the other key is unaffected.

The formulas, the bounds and what is not applied: docs/agent.md#system-settings
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MIN_FREE_KBYTES", "SETTING_KEYS", "WATERMARK_SCALE_FACTOR", "DesiredSettings", "desired_settings"]

MIN_FREE_KBYTES = "vm.min_free_kbytes"
WATERMARK_SCALE_FACTOR = "vm.watermark_scale_factor"
SETTING_KEYS = (MIN_FREE_KBYTES, WATERMARK_SCALE_FACTOR)

# koordlet's bounds on what it writes (its system resource validators), inclusive.
MIN_FREE_KBYTES_BOUNDS = (10 * 1024, 10 * 1024 * 1024)
WATERMARK_SCALE_FACTOR_BOUNDS = (10, 400)
_FACTOR_DENOMINATOR = 10_000


@dataclass(frozen=True)
class DesiredSettings:
    values: Mapping[str, int]  # sysctl key → value to write
    skipped: Mapping[str, str]  # sysctl key → why it is not written (only keys the NodeSLO set)


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def desired_settings(strategy: Mapping[str, Any] | None, memory_total_bytes: int | None) -> DesiredSettings:
    """What the kernel should say for `strategy` (NodeSLO spec.systemStrategy; None: no NodeSLO)."""
    values: dict[str, int] = {}
    skipped: dict[str, str] = {}
    strategy = strategy or {}
    if "minFreeKbytesFactor" in strategy:
        factor = _integer(strategy["minFreeKbytesFactor"])
        if factor is None or factor <= 0:
            skipped[MIN_FREE_KBYTES] = (f"minFreeKbytesFactor {strategy['minFreeKbytesFactor']!r} "
                                        "is not a positive integer")
        elif memory_total_bytes is None or memory_total_bytes < 1024:
            skipped[MIN_FREE_KBYTES] = "the node's total memory is unknown"
        else:
            kbytes = memory_total_bytes // 1024 * factor // _FACTOR_DENOMINATOR
            low, high = MIN_FREE_KBYTES_BOUNDS
            if low <= kbytes <= high:
                values[MIN_FREE_KBYTES] = kbytes
            else:
                skipped[MIN_FREE_KBYTES] = (f"{kbytes} KiB (factor {factor} of {memory_total_bytes // 1024} KiB) "
                                            f"is outside {low}..{high}")
    if "watermarkScaleFactor" in strategy:
        factor = _integer(strategy["watermarkScaleFactor"])
        low, high = WATERMARK_SCALE_FACTOR_BOUNDS
        if factor is not None and low <= factor <= high:
            values[WATERMARK_SCALE_FACTOR] = factor
        else:
            skipped[WATERMARK_SCALE_FACTOR] = (f"watermarkScaleFactor {strategy['watermarkScaleFactor']!r} "
                                               f"is not an integer in {low}..{high}")
    return DesiredSettings(values, skipped)
