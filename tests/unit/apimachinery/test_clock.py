"""Time as Kubernetes writes it: every time we format is RFC 3339 with a four-digit year."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from colocation.apimachinery.clock import (
    EARLIEST_TIME,
    LATEST_TIME,
    RFC3339_PATTERN,
    format_micro_time,
    format_time,
    parse_micro_time,
    parse_time,
    parse_whole_seconds,
)

FIRST_SECOND = -62_135_596_800  # 0001-01-01T00:00:00Z


@pytest.mark.parametrize(("at", "text"), [
    (FIRST_SECOND, "0001-01-01T00:00:00Z"),  # glibc's strftime writes "1-01-01T00:00:00Z"
    (-59_011_459_200, "0100-01-01T00:00:00Z"),
    (EARLIEST_TIME, "1970-01-01T00:00:00Z"),
    (1_800_000_000.9, "2027-01-15T08:00:00Z"),
    (LATEST_TIME, "9999-12-31T23:59:59Z"),
])
def test_times_are_written_with_four_digit_years(at: float, text: str) -> None:
    assert format_time(at) == text
    assert parse_time(text) == int(at)


def test_micro_times_are_written_with_four_digit_years() -> None:
    assert format_micro_time(FIRST_SECOND + 0.5) == "0001-01-01T00:00:00.500000Z"
    assert parse_micro_time(format_micro_time(FIRST_SECOND + 0.5)) is not None


@given(st.integers(min_value=FIRST_SECOND, max_value=int(LATEST_TIME)))
def test_every_formatted_time_is_rfc3339_and_reads_back(second: int) -> None:
    text = format_time(second)
    assert re.fullmatch(RFC3339_PATTERN, text)
    assert parse_whole_seconds(text) == second


def test_whole_seconds_are_exact_at_the_end_of_year_9999() -> None:
    # As a float, 9999-12-31T23:59:59.999999Z rounds up into the year 10000.
    assert parse_whole_seconds("9999-12-31T23:59:59.999999999Z") == LATEST_TIME
    assert parse_whole_seconds("1969-12-31T23:59:59.5Z") == -1


def test_a_time_without_a_zone_is_not_parsed() -> None:
    with pytest.raises(ValueError, match="has no zone"):
        parse_time("2027-01-15T08:00:00")
