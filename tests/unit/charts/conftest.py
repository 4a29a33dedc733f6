"""The helm binary for the chart's tests, or a skip saying how to build it."""

from __future__ import annotations

import pytest

from tests.unit.charts.helm_chart import SKIP_REASON, helm_binary


@pytest.fixture(scope="module")
def helm_path() -> str:
    binary = helm_binary()
    if binary is None:
        pytest.skip(SKIP_REASON)
    return binary
