"""Kubernetes resource quantities ("2500m", "1Gi", "1.5e3"): parsing, integer views, canonical text.

The syntax and the arithmetic follow k8s.io/apimachinery's resource.Quantity: a sign, a number
(digits, with an optional fraction) and a suffix (n u m k M G T P E, Ki Mi Gi Ti Pi Ei, or a
decimal exponent e<n> / E<n>). A parsed value is rounded up (away from zero) to a whole nano unit
and capped at 2^63-1 units, in every format (upstream leaves `1e100` uncapped), so a hostile
`1e999999999` costs nothing. Validated bodies refuse what the cap would change
(`fieldtypes.Quantity`).
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_UP, Context, Decimal, Inexact

# Upstream's ErrFormatWrong names this (looser) expression; clients have seen it for years.
_UPSTREAM_FORMAT = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_QUANTITY = re.compile(
    r"([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:([KMGTPE]i|[numkMGTPE])|[eE]([+-]?[0-9]+))?")

_DECIMAL_EXPONENTS = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_EXPONENTS = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_BINARY_SUFFIXES = {exponent: suffix for suffix, exponent in _BINARY_EXPONENTS.items()}
_INT64_MAX = 2**63 - 1
_MAX = Decimal(_INT64_MAX)
# The largest quantity whose MilliValue() fits an int64: 9223372036854775807m.
MAX_MILLI_VALUE = _INT64_MAX
# Digits that int() always takes (Python refuses texts of over 4,300 digits) and that stay in int64.
_FAST_DIGITS = 18
_NANO = Decimal("1e-9")
# Capped values have at most 19 integer and 9 fractional digits: 40 digits hold them exactly.
_ROUNDING = Context(prec=40)


def parse_quantity(value: str | int | float) -> Decimal:
    """The exact value of a quantity, e.g. "2500m" → 2.5, "1Gi" → 1073741824.

    JSON numbers are accepted too (upstream's UnmarshalJSON takes them); booleans, NaN and
    infinities are not. Raises ValueError naming the input and what is wrong with it.
    """
    text = _as_text(value)
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise ValueError(f"invalid quantity {text!r}: quantities must match the regular expression "
                         f"'{_UPSTREAM_FORMAT}'")
    sign, number, suffix, exponent_text = match.groups()
    amount = Decimal(number)  # exact, whatever the number of digits
    if not amount:
        return Decimal(0)
    if exponent_text is not None:
        exponent = int(exponent_text)
        if not -(2**63) <= exponent <= _INT64_MAX:  # upstream parses the exponent as an int64
            raise ValueError(f"invalid quantity {text!r}: unable to parse quantity's suffix")
        magnitude = _shift(amount, exponent)
    elif suffix in _BINARY_EXPONENTS:
        # Exact whatever the digits: 2^60 adds at most 19 of them.
        exact = Context(prec=len(amount.as_tuple().digits) + 20, traps=[Inexact])
        magnitude = exact.multiply(amount, Decimal(2 ** _BINARY_EXPONENTS[suffix]))
    else:
        magnitude = _shift(amount, _DECIMAL_EXPONENTS[suffix or ""])
    magnitude = min(magnitude, _MAX)
    if int(magnitude.as_tuple().exponent) < -9:
        # Upstream rounds up so that asking for a tiny amount still gets some of it.
        magnitude = magnitude.quantize(_NANO, rounding=ROUND_UP, context=_ROUNDING)
    return -magnitude if sign == "-" else magnitude


def _as_text(value: str | int | float) -> str:
    if isinstance(value, bool):  # bool is an int subclass; true is not a quantity
        raise ValueError(f"invalid quantity {value!r}: must be a string or a number")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"invalid quantity {value!r}: must be a finite number")
        return repr(value)  # shortest text that reads back as the same float
    if isinstance(value, str):
        return value
    raise ValueError(f"invalid quantity {value!r}: must be a string or a number")


def _shift(amount: Decimal, exponent: int) -> Decimal:
    """amount * 10^exponent, exactly, short-circuiting magnitudes beyond the cap or below 1n."""
    position = amount.adjusted() + exponent  # the power of ten of the leading digit
    if position > 19:
        return _MAX
    if position < -10:
        return _NANO  # below 0.1n: rounds up to 1n
    return _scale10(amount, exponent)


def _scale10(amount: Decimal, exponent: int) -> Decimal:
    """amount * 10^exponent without rounding (a context would round long coefficients)."""
    if not amount.is_finite():
        raise ValueError(f"invalid quantity {amount!r}: must be finite")
    sign, digits, current = amount.as_tuple()
    return Decimal((sign, digits, int(current) + exponent))


def _coerce(quantity: Decimal | str | int | float) -> Decimal:
    return quantity if isinstance(quantity, Decimal) else parse_quantity(quantity)


def cpu_millis(quantity: Decimal | str | int | float) -> int:
    """Milli-units, rounded away from zero as MilliValue() does ("0.1m" → 1, "2.5" → 2500)."""
    if isinstance(quantity, str):
        # What agents write ("2500m", "3"), without Decimal: every report has a few dozen of them.
        digits = quantity[:-1] if quantity.endswith("m") else quantity
        if len(digits) <= _FAST_DIGITS and digits.isascii() and digits.isdigit():
            value = int(digits)
            return value if len(digits) < len(quantity) else value * 1000
    scaled = _scale10(_coerce(quantity), 3)
    return int(scaled.to_integral_value(rounding=ROUND_UP, context=_ROUNDING))


def byte_value(quantity: Decimal | str | int | float) -> int:
    """Whole units, rounded away from zero as Value() does ("1Ki" → 1024, "0.5" → 1)."""
    if isinstance(quantity, str):
        # What agents write ("1536Mi", "123456789"), without Decimal.
        shift = _BINARY_EXPONENTS.get(quantity[-2:], 0)
        digits = quantity[:-2] if shift else quantity
        if len(digits) <= _FAST_DIGITS and digits.isascii() and digits.isdigit() \
                and (value := int(digits) << shift) <= _INT64_MAX:
            return value
    return int(_scale10(_coerce(quantity), 0).to_integral_value(rounding=ROUND_UP, context=_ROUNDING))


def format_millis(millis: int) -> str:
    """CPU text: "2500m", or plain cores when whole ("3"): what kubectl shows and parses back."""
    if millis % 1000 == 0:
        return str(millis // 1000)
    return f"{millis}m"


def format_bytes(value: int) -> str:
    """Memory text in upstream's canonical BinarySI form.

    A non-zero value strictly between -1024 and 1024 is printed as DecimalSI (so 1000 is "1k"),
    a multiple of 1024 with the largest binary suffix that keeps it whole ("1536Mi", "1Gi"), and
    anything else as a plain integer ("1500").
    """
    if value == 0:
        return "0"
    if -1024 < value < 1024:
        return "1k" if value == 1000 else "-1k" if value == -1000 else str(value)
    mantissa, exponent = value, 0
    while mantissa % 1024 == 0 and exponent < 60:
        mantissa //= 1024
        exponent += 10
    return f"{mantissa}{_BINARY_SUFFIXES.get(exponent, '')}"
