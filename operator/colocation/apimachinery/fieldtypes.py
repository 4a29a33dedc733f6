"""pydantic field types for the names and quantities Kubernetes objects carry, validated as upstream does.

Patterns run in pydantic-core, so a valid body costs no Python per field; their error messages are
replaced by upstream's (`PATTERN_MESSAGES`, for `fielderrors.FieldErrorStyle`) only when a body
is rejected. Every body our servers validate (NodeMetric reports, custom metric sample batches)
uses these, so both word a bad pod name or quantity alike.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import GetCoreSchemaHandler, GetPydanticSchema, StringConstraints
from pydantic_core import core_schema

from colocation.apimachinery.quantity import parse_quantity

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
}

DnsLabel = Annotated[str, StringConstraints(max_length=63, pattern=_DNS1123_LABEL)]
DnsSubdomain = Annotated[str, StringConstraints(max_length=253, pattern=_DNS1123_SUBDOMAIN)]
ResourceName = Annotated[str, StringConstraints(max_length=316, pattern=_RESOURCE_NAME)]
GoDuration = Annotated[str, StringConstraints(max_length=64, pattern=_GO_DURATION)]

# The common case, a plain non-negative quantity, is matched in pydantic-core; anything else
# (numbers, spaces, "-0", errors) goes through the exact parser in Python.
_PLAIN_QUANTITY = r"^\+?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]{1,9})?$"
QUANTITY_ERROR = "quantity"


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
    # Upstream's UnmarshalJSON trims spaces and takes JSON numbers; store the canonical text.
    text = value.strip() if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)
    try:
        quantity = parse_quantity(text)
    except ValueError as exc:
        message = str(exc)
        # parse_quantity says "invalid quantity 'x': why"; the cause shows the value already.
        raise ValueError(message.split(": ", 1)[1] if message.startswith("invalid quantity ") else message) from None
    if quantity < 0:
        raise ValueError("must be greater than or equal to 0")
    return "0" if not quantity else text


def _quantity_schema(source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
    # One error type for both branches; a FieldErrorStyle asks quantity_problem() for the reason.
    return core_schema.union_schema(
        [core_schema.str_schema(pattern=_PLAIN_QUANTITY),
         core_schema.no_info_plain_validator_function(_normalize_quantity)],
        mode="left_to_right", custom_error_type=QUANTITY_ERROR, custom_error_message="invalid quantity")


# A non-negative resource.Quantity, kept as the text sent (trimmed; any zero becomes "0").
Quantity = Annotated[str, GetPydanticSchema(_quantity_schema)]
