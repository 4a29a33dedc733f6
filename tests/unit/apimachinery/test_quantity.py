"""Resource quantities, checked against values k8s.io/apimachinery's resource.Quantity gives."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from colocation.apimachinery.quantity import byte_value, cpu_millis, format_bytes, format_millis, parse_quantity

INT64_MAX = 2**63 - 1


@pytest.mark.parametrize(("text", "expected"), [
    ("0", Decimal(0)),
    ("2500m", Decimal("2.5")),
    ("2", Decimal(2)),
    ("100n", Decimal("0.0000001")),
    ("250u", Decimal("0.00025")),
    ("1k", Decimal(1000)),
    ("1M", Decimal(10**6)),
    ("1G", Decimal(10**9)),
    ("1T", Decimal(10**12)),
    ("1P", Decimal(10**15)),
    ("1E", Decimal(10**18)),  # "E" alone is exa, not an exponent
    ("1Ki", Decimal(1024)),
    ("1Mi", Decimal(2**20)),
    ("1.5Gi", Decimal(3 * 2**29)),
    ("1Ti", Decimal(2**40)),
    ("1Pi", Decimal(2**50)),
    ("1Ei", Decimal(2**60)),
    ("1e3", Decimal(1000)),
    ("1E3", Decimal(1000)),
    ("1.5e-3", Decimal("0.0015")),
    ("12e+2", Decimal(1200)),
    (".5", Decimal("0.5")),
    ("5.", Decimal(5)),
    ("+1", Decimal(1)),
    ("-1.5", Decimal("-1.5")),
    ("-0", Decimal(0)),
    ("0.000000000", Decimal(0)),
])
def test_the_value_of_each_form(text: str, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("1e-10", Decimal("1e-9")),  # anything non-zero is at least one nano unit
    ("0.1n", Decimal("1e-9")),
    ("1.0000000001", Decimal("1.000000001")),  # rounded up, not to nearest
    ("-0.1n", Decimal("-1e-9")),  # away from zero
])
def test_values_are_rounded_up_to_a_whole_nano_unit(text: str, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["9223372036854775808", "1e19", "8Ei", "1e999999999", "99999999999999999999999Ki"])
def test_magnitudes_are_capped_at_the_largest_int64(text: str) -> None:
    assert parse_quantity(text) == INT64_MAX
    assert parse_quantity("-" + text) == -INT64_MAX


def test_json_numbers_are_quantities() -> None:
    assert parse_quantity(2) == 2
    assert parse_quantity(0.25) == Decimal("0.25")
    assert parse_quantity(1e21) == INT64_MAX


@pytest.mark.parametrize("value", ["", " 1", "1 ", "1Gb", "1gi", "1K", "1.2.3", "1e", "1e1.5", "1Ki5", "--1", "abc",
                                   "NaN", "nan", "Infinity", "inf", "0x10", "1_000", "1e99999999999999999999",
                                   math.nan, math.inf, -math.inf, True, None, [1]])
def test_malformed_quantities_are_refused_with_the_value_named(value: object) -> None:
    with pytest.raises(ValueError, match="invalid quantity") as caught:
        parse_quantity(value)  # type: ignore[arg-type]
    assert repr(value) in str(caught.value)


@pytest.mark.parametrize(("text", "millis", "units"), [
    ("2500m", 2500, 3),
    ("0.1m", 1, 1),  # MilliValue and Value round up
    ("100n", 1, 1),
    ("1", 1000, 1),
    ("1Ki", 1024000, 1024),
    ("-1.5", -1500, -2),  # away from zero, as upstream
    ("0", 0, 0),
])
def test_integer_views_round_away_from_zero(text: str, millis: int, units: int) -> None:
    assert cpu_millis(text) == millis
    assert byte_value(text) == units
    assert cpu_millis(parse_quantity(text)) == millis


@pytest.mark.parametrize(("millis", "text"), [
    (0, "0"), (2500, "2500m"), (3000, "3"), (1, "1m"), (1000000, "1000"), (-500, "-500m")])
def test_cpu_is_written_in_millicores_unless_whole(millis: int, text: str) -> None:
    assert format_millis(millis) == text


@pytest.mark.parametrize(("value", "text"), [
    (0, "0"),
    (1, "1"),
    (1000, "1k"),  # below 1024 upstream falls back to DecimalSI
    (1023, "1023"),
    (1024, "1Ki"),
    (1536, "1536"),  # not a whole number of Ki
    (1500, "1500"),
    (2**20, "1Mi"),
    (1536 * 2**20, "1536Mi"),
    (2**30, "1Gi"),
    (3 * 2**40, "3Ti"),
    (2**62, "4Ei"),
    (2**70, "1024Ei"),  # Ei is the largest suffix
    (-1024, "-1Ki"),
    (INT64_MAX, "9223372036854775807"),
])
def test_bytes_are_written_in_canonical_binary_form(value: int, text: str) -> None:
    assert format_bytes(value) == text


@given(st.integers(min_value=-INT64_MAX, max_value=INT64_MAX))
def test_millis_round_trip(millis: int) -> None:
    assert cpu_millis(format_millis(millis)) == millis


@given(st.integers(min_value=-INT64_MAX, max_value=INT64_MAX))
def test_bytes_round_trip(value: int) -> None:
    assert byte_value(format_bytes(value)) == value


@given(st.integers(min_value=0, max_value=INT64_MAX).map(lambda n: n * 1024))
def test_whole_multiples_of_1024_take_a_binary_suffix(value: int) -> None:
    text = format_bytes(value)
    assert value == 0 or text.endswith(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))


_SCALES = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
           "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "Ki": Fraction(2**10),
           "Mi": Fraction(2**20), "Gi": Fraction(2**30)}


@given(st.integers(min_value=0, max_value=10**9), st.integers(min_value=0, max_value=999),
       st.sampled_from(sorted(_SCALES)))
def test_parsing_agrees_with_exact_arithmetic(whole: int, fraction: int, suffix: str) -> None:
    text = f"{whole}.{fraction:03d}{suffix}"
    exact = (whole + Fraction(fraction, 1000)) * _SCALES[suffix]
    assert cpu_millis(text) == math.ceil(exact * 1000)
    assert byte_value(text) == math.ceil(exact)


@given(st.from_regex(r"[0-9]{1,22}(m|Ki|Mi|Gi|Ti|Pi|Ei|k)?", fullmatch=True))
def test_integer_views_of_the_texts_agents_write_agree_with_the_exact_parser(text: str) -> None:
    # cpu_millis and byte_value read "2500m", "3" and "1536Mi" without Decimal: same answers, caps included.
    exact = parse_quantity(text)
    assert cpu_millis(text) == cpu_millis(exact)
    assert byte_value(text) == byte_value(exact)


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15))
def test_a_json_number_is_its_shortest_decimal_text(value: float) -> None:
    assert parse_quantity(value) == parse_quantity(repr(value))


@pytest.mark.parametrize("digits", [4_300, 4_301, 10_000])
def test_integer_views_of_texts_beyond_pythons_int_conversion_limit_are_capped(digits: int) -> None:
    # int() refuses texts of over 4,300 digits: the views must not, whoever stored the text.
    for text in ("1" * digits, "1" * digits + "m", "0" * digits + "1", "1" * digits + "Ki"):
        assert cpu_millis(text) == cpu_millis(parse_quantity(text))
        assert byte_value(text) == byte_value(parse_quantity(text))
    assert byte_value("1" * digits) == INT64_MAX
