"""System settings from NodeSLO systemStrategy: input vectors and the values koordlet would write."""

from __future__ import annotations

from typing import Any

import pytest

from colocation.agent.strategies.system_settings.system_settings import (
    MIN_FREE_KBYTES,
    WATERMARK_SCALE_FACTOR,
    desired_settings,
)

GiB = 1 << 30

# (systemStrategy, node memory in bytes, the settings written, the keys skipped)
VECTORS: list[tuple[dict[str, Any] | None, int | None, dict[str, int], set[str]]] = [
    # The recommended values on a 64 GiB node: 1 % of 64 GiB in KiB, and 1.5 %.
    ({"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150}, 64 * GiB,
     {MIN_FREE_KBYTES: 671_088, WATERMARK_SCALE_FACTOR: 150}, set()),
    # KiB rounded down before the factor: 16 GiB + 1023 bytes is still 16777216 KiB.
    ({"minFreeKbytesFactor": 37}, 16 * GiB + 1023, {MIN_FREE_KBYTES: 16 * 1024 * 1024 * 37 // 10_000}, set()),
    # No NodeSLO, or a systemStrategy without the fields: nothing to write.
    (None, 64 * GiB, {}, set()),
    ({"totalNetworkBandwidth": "10G", "memcgReapBackGround": 1}, 64 * GiB, {}, set()),
    # min_free_kbytes exactly at koordlet's bounds (10 MiB and 10 GiB in KiB) is written ...
    ({"minFreeKbytesFactor": 10_000}, 10 * 1024 * 1024, {MIN_FREE_KBYTES: 10 * 1024}, set()),
    ({"minFreeKbytesFactor": 100}, 1000 * GiB, {MIN_FREE_KBYTES: 10 * 1024 * 1024}, set()),
    # ... below or above them it is skipped, not clamped, and the other key still applies.
    ({"minFreeKbytesFactor": 100, "watermarkScaleFactor": 10}, 512 * 1024 * 1024,
     {WATERMARK_SCALE_FACTOR: 10}, {MIN_FREE_KBYTES}),
    ({"minFreeKbytesFactor": 200}, 1024 * GiB, {}, {MIN_FREE_KBYTES}),
    # watermark_scale_factor only within 10..400 (the CRD allows 1..400).
    ({"watermarkScaleFactor": 400}, None, {WATERMARK_SCALE_FACTOR: 400}, set()),
    ({"watermarkScaleFactor": 9}, 64 * GiB, {}, {WATERMARK_SCALE_FACTOR}),
    ({"watermarkScaleFactor": 401}, 64 * GiB, {}, {WATERMARK_SCALE_FACTOR}),
    # Values that are not integers, or not positive, are skipped with a reason.
    ({"watermarkScaleFactor": "150", "minFreeKbytesFactor": True}, 64 * GiB, {},
     {WATERMARK_SCALE_FACTOR, MIN_FREE_KBYTES}),
    ({"minFreeKbytesFactor": 0}, 64 * GiB, {}, {MIN_FREE_KBYTES}),
    ({"minFreeKbytesFactor": 1.5}, 64 * GiB, {}, {MIN_FREE_KBYTES}),
    # The node's memory unknown: min_free_kbytes cannot be computed.
    ({"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150}, None, {WATERMARK_SCALE_FACTOR: 150},
     {MIN_FREE_KBYTES}),
]


@pytest.mark.parametrize(("strategy", "memory", "values", "skipped"), VECTORS)
def test_desired_settings(strategy: dict[str, Any] | None, memory: int | None, values: dict[str, int],
                          skipped: set[str]) -> None:
    desired = desired_settings(strategy, memory)
    assert dict(desired.values) == values
    assert set(desired.skipped) == skipped
    assert all(desired.skipped.values())  # every skipped key says why


def test_the_reason_names_the_value_and_the_bounds() -> None:
    why = desired_settings({"minFreeKbytesFactor": 100}, 512 * 1024 * 1024).skipped[MIN_FREE_KBYTES]
    assert "5242 KiB" in why and "10240..10485760" in why
