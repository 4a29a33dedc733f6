"""pydantic field types for the names and quantities Kubernetes objects carry, validated as upstream does.

Patterns run in pydantic-core, so a valid body costs no Python per field; their error messages are
replaced by upstream's (`PATTERN_MESSAGES`, for `fielderrors.FieldErrorStyle`) only when a body
is rejected. Every body our servers validate (NodeMetric reports, custom metric sample batches)
uses these, so both word a bad pod name or quantity alike.
"""

from __future__ import annotations

import functools
import math
from decimal import Decimal
from typing import Annotated, Any

from pydantic import AfterValidator, GetCoreSchemaHandler, GetPydanticSchema, StringConstraints
from pydantic_core import core_schema

from colocation.apimachinery.clock import EARLIEST_TIME, LATEST_TIME, RFC3339_PATTERN, format_time, parse_whole_seconds
from colocation.apimachinery.goduration import format_go_duration, parse_go_duration
from colocation.apimachinery.quantity import MAX_MILLI_VALUE, parse_quantity

_DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_RESOURCE_NAME = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                  r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_GO_DURATION = r"^(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$"

PATTERN_MESSAGES = {
    _DNS1123_LABEL: "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
                    f"regex used for validation is '{_DNS1123_LABEL[1:-1]}')",
    _DNS1123_SUBDOMAIN: "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                        "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
                        f"regex used for validation is '{_DNS1123_SUBDOMAIN[1:-1]}')",
    _RESOURCE_NAME: "a resource name must be a qualified name: alphanumeric characters, '-', '_' or '.', "
                    "starting and ending with an alphanumeric character, with an optional DNS subdomain "
                    "prefix and '/' (e.g. 'cpu', 'kubernetes.io/batch-cpu')",
    _GO_DURATION: "must be a duration such as '5m0s' or '30s'",
    RFC3339_PATTERN: "must be an RFC 3339 time with seconds and a zone, e.g. '2006-01-02T15:04:05Z' "
                     "or '2006-01-02T15:04:05.999+07:00'",
}

DnsLabel = Annotated[str, StringConstraints(max_length=63, pattern=_DNS1123_LABEL)]
DnsSubdomain = Annotated[str, StringConstraints(max_length=253, pattern=_DNS1123_SUBDOMAIN)]
ResourceName = Annotated[str, StringConstraints(max_length=316, pattern=_RESOURCE_NAME)]
_MAX_GO_DURATION = 2**63 - 1  # nanoseconds: Go's time.Duration is an int64


@functools.lru_cache(maxsize=64)  # agents send the same few windows ("5m0s") in every report
def _duration_fits(text: str) -> str:
    # Clients read the duration back (the resource metrics API's window): Go refuses an overflow.
    nanos = parse_go_duration(text)
    if nanos is not None and nanos > _MAX_GO_DURATION:
        raise ValueError(f"must be at most {format_go_duration(_MAX_GO_DURATION)} (Go's time.Duration)")
    return text


GoDuration = Annotated[str, StringConstraints(max_length=64, pattern=_GO_DURATION), AfterValidator(_duration_fits)]


@functools.lru_cache(maxsize=256)  # reports arriving together carry the same few seconds
def _time_within_bounds(text: str) -> str:
    try:
        second = parse_whole_seconds(text)
    except ValueError as exc:
        raise ValueError(f"must be a valid RFC 3339 time: {exc}") from None
    if not EARLIEST_TIME <= second <= LATEST_TIME:
        raise ValueError(f"must be between {format_time(EARLIEST_TIME)} and {format_time(LATEST_TIME)}")
    return format_time(second)


# metav1.Time as an agent writes it: strict RFC 3339 (upstream's time.Parse(time.RFC3339)), from
# the epoch to the last second a four-digit year holds, and stored as format_time() writes it (UTC,
# whole seconds). Wide on purpose: a node whose clock is off is not refused, and nothing orders or
# expires by this value (the store and the history use the time a report was received).
Rfc3339Time = Annotated[str, StringConstraints(max_length=64, pattern=RFC3339_PATTERN),
                        AfterValidator(_time_within_bounds)]

# The common case, a plain non-negative quantity well within the bounds, is matched in
# pydantic-core; anything else (larger values, exponents, numbers, spaces, "-0", errors) goes
# through the exact parser in Python. Every branch stays below 9.3e15 units and 30 characters.
_FRACTION = r"(?:\.[0-9]{0,9})?"
_PLAIN_QUANTITY = (r"^\+?(?:(?:[0-9]{1,15}" + _FRACTION + r"|\.[0-9]{1,9})[num]?"
                   r"|[0-9]{1,12}" + _FRACTION + r"(?:k|Ki)|[0-9]{1,9}" + _FRACTION + r"(?:M|Mi)"
                   r"|[0-9]{1,6}" + _FRACTION + r"(?:G|Gi)|[0-9]{1,3}" + _FRACTION + r"(?:T|Ti))$")
QUANTITY_ERROR = "quantity"
# What a usage quantity may be: its MilliValue() fits an int64 (upstream's int64Amount holds it
# exactly; every consumer here adds them up as integers), and its text is short.
MAX_QUANTITY = Decimal(MAX_MILLI_VALUE).scaleb(-3)
MAX_QUANTITY_CHARS = 64


def quantity_problem(value: object) -> str | None:
    """Why `value` is not a usable usage quantity, or None when it is."""
    try:
        _normalize_quantity(value)
    except ValueError as exc:
        return str(exc)
    return None


def _normalize_quantity(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError("must be a quantity, e.g. \"2500m\" or \"1Gi\"")
    if isinstance(value, float) and not math.isfinite(value):  # a JSON number beyond a double
        raise ValueError("must be a finite number")
    if isinstance(value, int) and value > MAX_MILLI_VALUE:  # str() of it may be refused (4,300 digits)
        raise ValueError(_TOO_LARGE)
    # Upstream's UnmarshalJSON trims spaces and takes JSON numbers; store the canonical text.
    text = value.strip() if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)
    if len(text) > MAX_QUANTITY_CHARS:
        raise ValueError(f"must be no more than {MAX_QUANTITY_CHARS} characters")
    try:
        quantity = parse_quantity(text)
    except ValueError as exc:
        message = str(exc)
        # parse_quantity says "invalid quantity 'x': why"; the cause shows the value already.
        raise ValueError(message.split(": ", 1)[1] if message.startswith("invalid quantity ") else message) from None
    if quantity < 0:
        raise ValueError("must be greater than or equal to 0")
    if quantity > MAX_QUANTITY:
        raise ValueError(_TOO_LARGE)
    return "0" if not quantity else text


_TOO_LARGE = (f"must be less than or equal to {MAX_MILLI_VALUE}m "
              "(the largest quantity whose milli-value fits in a 64-bit integer)")


def _quantity_schema(source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
    # One error type for both branches; a FieldErrorStyle asks quantity_problem() for the reason.
    return core_schema.union_schema(
        [core_schema.str_schema(pattern=_PLAIN_QUANTITY),
         core_schema.no_info_plain_validator_function(_normalize_quantity)],
        mode="left_to_right", custom_error_type=QUANTITY_ERROR, custom_error_message="invalid quantity")


# A non-negative resource.Quantity, kept as the text sent (trimmed; any zero becomes "0").
Quantity = Annotated[str, GetPydanticSchema(_quantity_schema)]
