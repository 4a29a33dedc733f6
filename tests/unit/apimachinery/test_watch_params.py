"""ListOptions from a query: decoded as the parameter codec does, validated as ValidateListOptions."""

from __future__ import annotations

import pytest
from multidict import MultiDict

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.selectors import FieldSelector
from colocation.apimachinery.watch_params import (
    ListOptions,
    go_parse_int64,
    name_selector,
    parse_resource_version,
    query_flag,
)


def test_a_full_watch_query_is_read_into_its_fields() -> None:
    options = ListOptions.from_query(MultiDict({
        "watch": "true", "resourceVersion": "12", "resourceVersionMatch": "NotOlderThan",
        "sendInitialEvents": "false", "allowWatchBookmarks": "1", "timeoutSeconds": "+30",
        "labelSelector": "app=x", "fieldSelector": "metadata.name=a"}))
    assert options == ListOptions(
        watch=True, resource_version="12", resource_version_match="NotOlderThan", send_initial_events=False,
        allow_watch_bookmarks=True, timeout_seconds=30, label_selector="app=x", field_selector="metadata.name=a")


@pytest.mark.parametrize(("raw", "value"), [
    (None, False), ("", True), ("0", False), ("false", False), ("FALSE", False), ("False", False),
    ("true", True), ("True", True), ("1", True), ("no", True),
])
def test_a_flag_is_false_only_when_absent_zero_or_false(raw: str | None, value: bool) -> None:
    query = MultiDict() if raw is None else MultiDict({"watch": raw})
    assert query_flag(query, "watch") is value


def test_the_first_of_repeated_parameters_counts() -> None:
    query: MultiDict[str] = MultiDict([("watch", "false"), ("watch", "true"), ("limit", "5"), ("limit", "x")])
    options = ListOptions.from_query(query)
    assert (options.watch, options.limit) == (False, 5)


def test_send_initial_events_tells_unset_from_false() -> None:
    def initial(query: dict[str, str]) -> bool | None:
        return ListOptions.from_query(MultiDict({"watch": "1", "resourceVersionMatch": "NotOlderThan",
                                                 **query})).send_initial_events
    assert initial({"sendInitialEvents": "false"}) is False
    assert initial({"sendInitialEvents": ""}) is True
    assert ListOptions.from_query(MultiDict({"watch": "1"})).send_initial_events is None


def test_watch_paths_are_watches_whatever_the_query_says() -> None:
    assert ListOptions.from_query(MultiDict({"watch": "false"}), watch=True).watch


@pytest.mark.parametrize(("raw", "message"), [
    ("abc", 'strconv.ParseInt: parsing "abc": invalid syntax'),
    ("", 'strconv.ParseInt: parsing "": invalid syntax'),
    ("1.5", 'strconv.ParseInt: parsing "1.5": invalid syntax'),
    ("1_000", 'strconv.ParseInt: parsing "1_000": invalid syntax'),
    (" 1", 'strconv.ParseInt: parsing " 1": invalid syntax'),
    ("٣", 'strconv.ParseInt: parsing "٣": invalid syntax'),
    ("9223372036854775808", 'strconv.ParseInt: parsing "9223372036854775808": value out of range'),
])
def test_integers_that_go_does_not_parse_are_400(raw: str, message: str) -> None:
    with pytest.raises(ApiError) as caught:
        ListOptions.from_query(MultiDict({"watch": "true", "timeoutSeconds": raw}))
    assert (caught.value.code, caught.value.reason, caught.value.message) == (400, "BadRequest", message)


def test_integers_take_a_sign() -> None:
    assert [go_parse_int64(t) for t in ("-5", "+5", "-9223372036854775808")] == [-5, 5, -2**63]


@pytest.mark.parametrize(("query", "watch", "messages"), [
    ({"resourceVersionMatch": "Exact"}, False,
     ["Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"]),
    ({"resourceVersionMatch": "Exact", "resourceVersion": "0"}, False,
     ['Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"']),
    ({"resourceVersionMatch": "Newest", "resourceVersion": "3", "continue": "t"}, False,
     ["Forbidden: resourceVersionMatch is forbidden when continue is provided",
      'Unsupported value: "Newest": supported values: "Exact", "NotOlderThan", ""']),
    ({"sendInitialEvents": "true"}, False, ["Forbidden: sendInitialEvents is forbidden for list"]),
    ({"sendInitialEvents": "false"}, False, ["Forbidden: sendInitialEvents is forbidden for list"]),
    ({"sendInitialEvents": "true"}, True,
     ["Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"]),
    ({"resourceVersionMatch": "NotOlderThan"}, True,
     ["Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"]),
    ({"resourceVersionMatch": "Exact", "sendInitialEvents": "true", "continue": "t"}, True,
     ["Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
      'Unsupported value: "Exact": supported values: "NotOlderThan"',
      "Forbidden: resourceVersionMatch is forbidden when continue is provided"]),
    # Bookmarks are not required with sendInitialEvents: the end of the initial events goes unmarked.
    ({"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}, True, []),
    ({"resourceVersionMatch": "NotOlderThan", "resourceVersion": "5"}, False, []),
])
def test_list_and_watch_options_are_validated_as_upstream(query: dict[str, str], watch: bool,
                                                          messages: list[str]) -> None:
    if not messages:
        ListOptions.from_query(MultiDict(query), watch=watch)
        return
    with pytest.raises(ApiError) as caught:
        ListOptions.from_query(MultiDict(query), watch=watch)
    assert (caught.value.code, caught.value.reason) == (422, "Invalid")
    assert caught.value.details["kind"] == "ListOptions" and caught.value.details["group"] == "meta.k8s.io"
    assert [c["message"] for c in caught.value.details["causes"]] == messages
    assert caught.value.message.startswith('ListOptions.meta.k8s.io "" is invalid: ')


def test_a_watch_lasts_timeout_seconds_without_a_cap_or_a_random_while_by_default() -> None:
    def seconds(query: dict[str, str]) -> float:
        return ListOptions.from_query(MultiDict({"watch": "1", **query})).watch_seconds(100.0, lambda: 0.25)
    assert seconds({"timeoutSeconds": "7200"}) == 7200.0
    assert seconds({"timeoutSeconds": "-3"}) == -3.0  # ends at once
    assert seconds({}) == seconds({"timeoutSeconds": "0"}) == 125.0


@pytest.mark.parametrize(("raw", "value"), [("", 0), ("0", 0), ("42", 42), (str(2**64 - 1), 2**64 - 1)])
def test_resource_versions_parse_as_unsigned_integers(raw: str, value: int) -> None:
    assert parse_resource_version(raw) == value


@pytest.mark.parametrize(("raw", "problem"), [("cool", "invalid syntax"), ("-1", "invalid syntax"),
                                              (str(2**64), "value out of range")])
def test_a_malformed_resource_version_is_400_in_upstream_words(raw: str, problem: str) -> None:
    with pytest.raises(ApiError) as caught:
        parse_resource_version(raw)
    assert (caught.value.code, caught.value.message) == (
        400, f'resourceVersion: Invalid value: "{raw}": strconv.ParseUint: parsing "{raw}": {problem}')


def test_a_request_for_one_object_selects_it_by_name() -> None:
    assert str(name_selector(None, "a")) == "metadata.name=a"
    assert str(name_selector(FieldSelector(), "a")) == "metadata.name=a"
    both = FieldSelector.parse("metadata.name=a,metadata.namespace=ns")
    assert name_selector(both, "a") is both  # the other terms still apply
    for other in ("metadata.name=b", "metadata.namespace=ns", "metadata.name!=a"):
        with pytest.raises(ApiError) as caught:
            name_selector(FieldSelector.parse(other), "a")
        assert (caught.value.code, caught.value.message) == (
            400, "fieldSelector metadata.name doesn't match requested name")
