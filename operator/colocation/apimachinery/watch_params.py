"""The query of a list or watch (metav1.ListOptions), read and checked as kube-apiserver does.

Reading follows apimachinery's parameter codec: the first value of a parameter counts; a boolean is
false only when absent, "0" or "false" (any case), so `?watch=` is true; an integer is Go's
strconv.ParseInt in base 10, and one that does not parse is 400 BadRequest with Go's message.
Checking follows ValidateListOptions: 422 Invalid on ListOptions.meta.k8s.io, one cause per
problem, with the watch rules for a watch. Both servers read lists and watches through here, so
a client sees the same answers from the sandbox, the operator's API and a real cluster.

Selectors stay text here: which fields a field selector may name depends on the resource.
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from colocation.apimachinery.errors import ApiError, Cause
from colocation.apimachinery.fielderrors import go_quote
from colocation.apimachinery.selectors import FieldSelector, FieldTerm

META_GROUP = "meta.k8s.io"
# kube-apiserver's --min-request-timeout: a watch without timeoutSeconds lasts between it and twice it.
MIN_REQUEST_TIMEOUT = 1800.0
NOT_OLDER_THAN = "NotOlderThan"
EXACT = "Exact"
_MAX_INT64 = 2**63 - 1
_MAX_UINT64 = 2**64 - 1


def query_flag(query: Mapping[str, str], name: str) -> bool:
    """A boolean query parameter as the parameter codec reads one (kubernetes-asyncio sends "True")."""
    raw = query.get(name)
    return raw is not None and raw != "0" and raw.lower() != "false"


def _optional_flag(query: Mapping[str, str], name: str) -> bool | None:
    return query_flag(query, name) if name in query else None


def go_parse_int64(text: str) -> int:
    """strconv.ParseInt(text, 10, 64); ValueError with Go's message when it does not parse."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not digits.isascii() or not digits.isdigit():
        raise ValueError(f"strconv.ParseInt: parsing {go_quote(text)}: invalid syntax")
    value = int(text)
    if not -_MAX_INT64 - 1 <= value <= _MAX_INT64:
        raise ValueError(f"strconv.ParseInt: parsing {go_quote(text)}: value out of range")
    return value


def _query_int(query: Mapping[str, str], name: str) -> int | None:
    raw = query.get(name)
    if raw is None:
        return None
    try:
        return go_parse_int64(raw)
    except ValueError as error:
        raise ApiError.bad_request(str(error)) from None


def parse_resource_version(text: str) -> int:
    """A resourceVersion from a query as the storage versioner reads it: "" and "0" are 0.

    kube-apiserver answers a malformed one with this message as a 500 (kubernetes#139485); the
    fix proposed upstream makes it 400 BadRequest, as our servers have always answered.
    """
    if text in ("", "0"):
        return 0
    problem = ""
    if not text.isascii() or not text.isdigit():
        problem = "invalid syntax"
    elif int(text) > _MAX_UINT64:
        problem = "value out of range"
    if problem:
        raise ApiError.bad_request(f"resourceVersion: Invalid value: {go_quote(text)}: "
                                   f"strconv.ParseUint: parsing {go_quote(text)}: {problem}")
    return int(text)


def name_selector(fields: FieldSelector | None, name: str) -> FieldSelector:
    """The field selector of a request for one object by name (a get's watch, /watch/.../NAME).

    As ListResource: the name joins an empty selector; a selector that names another object, or
    none, is 400.
    """
    if fields is None or fields.empty:
        return FieldSelector((FieldTerm("metadata.name", name),))
    if fields.exact_name() != name:
        raise ApiError.bad_request("fieldSelector metadata.name doesn't match requested name")
    return fields


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOptions:
    """What a list or watch asked for. `send_initial_events` is None when the client did not say."""

    watch: bool = False
    resource_version: str = ""
    resource_version_match: str = ""
    send_initial_events: bool | None = None
    allow_watch_bookmarks: bool = False
    timeout_seconds: int | None = None
    limit: int = 0
    continue_token: str = ""
    label_selector: str = ""
    field_selector: str = ""

    @classmethod
    def from_query(cls, query: Mapping[str, str], *, watch: bool = False) -> ListOptions:
        """Read and check a request's query; `watch=True` for the /watch/ paths, which are watches
        whatever `?watch=` says. Raises 400 for what does not parse, then 422 for what is invalid."""
        options = cls(
            watch=watch or query_flag(query, "watch"),
            resource_version=query.get("resourceVersion", ""),
            resource_version_match=query.get("resourceVersionMatch", ""),
            send_initial_events=_optional_flag(query, "sendInitialEvents"),
            allow_watch_bookmarks=query_flag(query, "allowWatchBookmarks"),
            timeout_seconds=_query_int(query, "timeoutSeconds"),
            limit=_query_int(query, "limit") or 0,
            continue_token=query.get("continue", ""),
            label_selector=query.get("labelSelector", ""),
            field_selector=query.get("fieldSelector", ""),
        )
        causes = options._watch_causes() if options.watch else options._list_causes()
        if causes:
            raise ApiError.invalid(META_GROUP, "ListOptions", "", causes=causes)
        return options

    def _list_causes(self) -> list[Cause]:
        causes: list[Cause] = []
        match = self.resource_version_match
        if match:
            if not self.resource_version:
                causes.append(_forbidden("resourceVersionMatch",
                                         "resourceVersionMatch is forbidden unless resourceVersion is provided"))
            if self.continue_token:
                causes.append(_forbidden("resourceVersionMatch",
                                         "resourceVersionMatch is forbidden when continue is provided"))
            if match not in (EXACT, NOT_OLDER_THAN):
                causes.append(_not_supported("resourceVersionMatch", match, (EXACT, NOT_OLDER_THAN, "")))
            if match == EXACT and self.resource_version == "0":
                causes.append(_forbidden("resourceVersionMatch",
                                         'resourceVersionMatch "exact" is forbidden for resourceVersion "0"'))
        if self.send_initial_events is not None:
            causes.append(_forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list"))
        return causes

    def _watch_causes(self) -> list[Cause]:
        # The WatchList feature gate is on by default since 1.32: its own refusal never applies.
        causes: list[Cause] = []
        match = self.resource_version_match
        if self.send_initial_events is not None and match != NOT_OLDER_THAN:
            causes.append(_forbidden("resourceVersionMatch",
                                     f"sendInitialEvents requires setting resourceVersionMatch to {NOT_OLDER_THAN}"))
        if match:
            if self.send_initial_events is None:
                causes.append(_forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden for watch "
                                                                 "unless sendInitialEvents is provided"))
            if match != NOT_OLDER_THAN:
                causes.append(_not_supported("resourceVersionMatch", match, (NOT_OLDER_THAN,)))
            if self.continue_token:
                causes.append(_forbidden("resourceVersionMatch",
                                         "resourceVersionMatch is forbidden when continue is provided"))
        return causes

    def since(self) -> int:
        """The resourceVersion as a number (0 for "" and "0"); 400 BadRequest when malformed."""
        return parse_resource_version(self.resource_version)

    def check_unpaged(self) -> None:
        """400 BadRequest for what a server that always lists everything at once cannot honour:
        a negative limit (a positive one is ignored, as the API allows: the list then has no
        continue token) and any continue token, since it never issued one. kube-apiserver
        answers an undecodable token with the same prefix ("invalid continue token")."""
        if self.limit < 0:
            raise ApiError.bad_request(f"limit: Invalid value: {self.limit}: must be greater than or equal to 0")
        if self.continue_token:
            raise ApiError.bad_request(f"invalid continue token: {go_quote(self.continue_token[:64])}: this server "
                                       "returns every list whole and never issues a continue token")

    def watch_seconds(self, min_request_timeout: float = MIN_REQUEST_TIMEOUT,
                      random: Callable[[], float] = _random.random) -> float:
        """How long the watch lasts: timeoutSeconds as asked (no cap; 0 or less ends it at once),
        or, without one, a random time between the server's minimum request timeout and twice it,
        so that the watches of clients started together do not all end together."""
        if self.timeout_seconds:
            return float(self.timeout_seconds)
        return min_request_timeout * (1.0 + random())


def _forbidden(field: str, detail: str) -> Cause:
    return Cause(field, f"Forbidden: {detail}", "FieldValueForbidden")


def _not_supported(field: str, value: str, supported: tuple[str, ...]) -> Cause:
    listed = ", ".join(go_quote(v) for v in supported)
    return Cause(field, f"Unsupported value: {go_quote(value)}: supported values: {listed}", "FieldValueNotSupported")
