"""How a refused value is shown in a cause: never an error of its own, whatever it is."""

from __future__ import annotations

from typing import Any

import pytest

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.fielderrors import decoded_object, show


@pytest.mark.parametrize(("value", "shown"), [
    (2**64, str(2**64)),  # orjson stops at 64 bits
    (10**5000, "<int too large to show>"),  # str() stops at 4,300 digits
    ([10**5000], "<list too large to show>"),
    (float("inf"), "inf"),
    ("x" * 200, '"' + "x" * 96 + "..."),
], ids=["65-bits", "5001-digits", "list-of-5001-digits", "infinity", "long-text"])
def test_any_value_is_shown_in_at_most_100_characters(value: Any, shown: str) -> None:
    assert show(value) == shown


def test_a_body_with_an_integer_beyond_64_bits_is_decoded_as_the_validator_read_it() -> None:
    assert decoded_object(b'{"a":' + b"9" * 400 + b"}", "NodeMetric") == {"a": int("9" * 400)}


@pytest.mark.parametrize("raw", [b'{"a":NaN}', b'{"a":' + b"9" * 4_400 + b"}", b"[" * 2_000 + b"]" * 2_000])
def test_a_body_no_json_parser_reads_is_a_400(raw: bytes) -> None:
    with pytest.raises(ApiError) as refused:
        decoded_object(raw, "NodeMetric")
    assert (refused.value.code, refused.value.reason) == (400, "BadRequest")
