"""The scheduler extender's wire format: ExtenderArgs in, ExtenderFilterResult and HostPriorityList out."""

from __future__ import annotations

import orjson
import pytest

from colocation.loadaware.extender_wire import (
    ExtenderArgsError,
    filter_result,
    host_priority_list,
    parse_extender_args,
)

POD = {"metadata": {"name": "web-1", "namespace": "default", "uid": "u-1"}, "spec": {"containers": []}}


def test_node_cache_capable_args_carry_names_in_order() -> None:
    args = parse_extender_args(orjson.dumps({"Pod": POD, "Nodes": None, "NodeNames": ["b", "a", "c"]}))
    assert args.names == ("b", "a", "c")
    assert args.pod["metadata"]["name"] == "web-1"
    assert args.node_items is None


def test_a_node_list_is_answered_in_kind() -> None:
    nodes = {"items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]}
    args = parse_extender_args(orjson.dumps({"Pod": POD, "Nodes": nodes, "NodeNames": None}))
    result = filter_result(args, passed=["b"], unresolvable={"a": "hot"})
    assert result["NodeNames"] is None
    assert result["Nodes"] == {"items": [{"metadata": {"name": "b"}}]}
    assert result["FailedAndUnresolvableNodes"] == {"a": "hot"}


def test_no_candidates_is_an_empty_answer() -> None:
    args = parse_extender_args(orjson.dumps({"Pod": POD, "Nodes": None, "NodeNames": None}))
    assert args.names == ()
    assert filter_result(args, passed=[])["NodeNames"] == []


@pytest.mark.parametrize(("body", "message"), [
    (b"not json", "not JSON"),
    (b"[]", "not an ExtenderArgs"),
    (orjson.dumps({"NodeNames": ["a"]}), "Pod is missing"),
    (orjson.dumps({"Pod": POD, "NodeNames": ["a", 1]}), "not a string"),
])
def test_a_body_that_is_no_extender_args_is_refused_with_a_reason(body: bytes, message: str) -> None:
    with pytest.raises(ExtenderArgsError, match=message):
        parse_extender_args(body)


def test_a_filter_answer_names_only_nodes_it_was_given() -> None:
    args = parse_extender_args(orjson.dumps({"Pod": POD, "NodeNames": ["a", "b"]}))
    result = filter_result(args, passed=["a", "x"], failed={"y": "no"}, unresolvable={"b": "hot", "z": "hot"})
    assert result == {"NodeNames": ["a"], "Nodes": None, "FailedNodes": {},
                      "FailedAndUnresolvableNodes": {"b": "hot"}, "Error": ""}


def test_host_priority_list_keeps_the_candidates_order() -> None:
    assert host_priority_list({"a": 3, "b": 10}, ["b", "a"]) == [{"Host": "b", "Score": 10}, {"Host": "a", "Score": 3}]
