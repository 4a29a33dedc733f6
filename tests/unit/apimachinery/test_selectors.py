"""Label and field selectors as the Kubernetes API server parses and applies them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.selectors import FieldSelector, LabelSelector, Operator, Requirement

# --------------------------------------------------------------------------------------------
# Label selector syntax.


@pytest.mark.parametrize(("text", "canonical"), [
    ("", ""),
    ("app=web", "app=web"),
    ("app==web", "app==web"),
    ("app!=web", "app!=web"),
    ("  app  =  web  ", "app=web"),
    ("tier in (b,a)", "tier in (a,b)"),
    ("tier notin (a)", "tier notin (a)"),
    ("app", "app"),
    ("!app", "!app"),
    ("z=1,a=2", "a=2,z=1"),  # requirements come out sorted by key
    ("x in (foo,,baz),y,z notin ()", "x in (,baz,foo),y,z notin ()"),  # upstream's own example
    ("a in (b,)", "a in (,b)"),
    ("a=", "a="),
    ("in in (in,notin)", "in in (in,notin)"),  # keywords are plain words as keys and values
    ("example.com/app=web", "example.com/app=web"),
    ("replicas>2", "replicas>2"),
    ("replicas<2", "replicas<2"),
])
def test_label_selector_parses_to_its_canonical_string(text: str, canonical: str) -> None:
    assert str(LabelSelector.parse(text)) == canonical


@pytest.mark.parametrize(("text", "message"), [
    ("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
    ("a=b c", "found 'c', expected: ',' or 'end of string'"),
    ("a,", "found '', expected: identifier after ','"),
    (",a", "found ',', expected: !, identifier, or 'end of string'"),
    ("a in b", "unable to parse requirement: found 'b' expected: '('"),
    ("a in (b c)", "unable to parse requirement: found 'c', expected: ',' or ')'"),
    ("!a=b", "found '=', expected: ',' or 'end of string'"),
    ("a>x", "unable to parse requirement: values[0]: Invalid value: \"x\": "
            "for 'Gt', 'Lt' operators, the value must be an integer"),
])
def test_label_selector_syntax_errors_are_bad_requests_with_upstream_wording(text: str, message: str) -> None:
    with pytest.raises(ApiError) as caught:
        LabelSelector.parse(text)
    assert caught.value.code == 400
    assert caught.value.message == message


def test_an_invalid_label_key_is_reported_at_the_nil_path() -> None:
    with pytest.raises(ApiError) as caught:
        LabelSelector.parse("-app=web")
    assert caught.value.message.startswith(
        'unable to parse requirement: <nil>: Invalid value: "-app": name part must consist of alphanumeric '
        "characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',"
        "  or 'my.name',  or '123-abc', regex used for validation is ")


@pytest.mark.parametrize("key", ["a" * 64, "Example.com/app", "/app", "a/b/c", "app/"])
def test_label_keys_beyond_the_upstream_rules_are_refused(key: str) -> None:
    with pytest.raises(ApiError):
        LabelSelector.parse(f"{key}=x")


@pytest.mark.parametrize("key", ["a" * 63, f"{'a' * 200}.io/app", "app.kubernetes.io/name", "A_b.c-D"])
def test_label_keys_within_the_upstream_rules_are_accepted(key: str) -> None:
    assert LabelSelector.parse(f"{key}=x").matches({key: "x"})


def test_an_invalid_label_value_names_its_key() -> None:
    with pytest.raises(ApiError) as caught:
        LabelSelector.parse("app=-web")
    assert caught.value.message.startswith(
        'unable to parse requirement: values[0][app]: Invalid value: "-web": a valid label must be an empty '
        "string or consist of alphanumeric characters")
    with pytest.raises(ApiError):
        LabelSelector.parse("app=" + "v" * 64)


# --------------------------------------------------------------------------------------------
# Label selector matching.


@pytest.mark.parametrize(("text", "labels", "expected"), [
    ("app=web", {"app": "web"}, True),
    ("app=web", {"app": "db"}, False),
    ("app=web", {}, False),
    ("app!=web", {}, True),  # absent keys satisfy != and notin
    ("app notin (web)", {}, True),
    ("app notin (web)", {"app": "web"}, False),
    ("app in (web,db)", {"app": "db"}, True),
    ("app in (web,db)", {}, False),
    ("app", {"app": ""}, True),
    ("!app", {"app": ""}, False),
    ("app=", {"app": ""}, True),
    ("app in ()", {"app": ""}, True),
    ("replicas>2", {"replicas": "3"}, True),
    ("replicas>2", {"replicas": "2"}, False),
    ("replicas>2", {"replicas": "three"}, False),  # not an integer: never matches
    ("replicas<2", {}, False),
    ("app=web,tier=front", {"app": "web"}, False),
    ("", {"anything": "at all"}, True),
])
def test_label_selector_matching(text: str, labels: dict[str, str], expected: bool) -> None:
    assert LabelSelector.parse(text).matches(labels) is expected


def test_nil_and_empty_api_selectors_differ() -> None:
    # metav1.LabelSelectorAsSelector: a nil selector matches nothing, an empty one everything.
    assert not LabelSelector.from_api(None).matches({})
    assert not LabelSelector.from_api(None).empty
    assert LabelSelector.from_api({}).matches({"a": "b"})
    assert LabelSelector.from_api({}).empty


def test_api_selector_combines_match_labels_and_expressions() -> None:
    selector = LabelSelector.from_api({
        "matchLabels": {"app": "web"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "edge"]},
                             {"key": "legacy", "operator": "DoesNotExist"}],
    })
    assert str(selector) == "app=web,!legacy,tier in (edge,front)"
    assert selector.matches({"app": "web", "tier": "edge"})
    assert not selector.matches({"app": "web", "tier": "edge", "legacy": "yes"})
    assert not selector.matches({"app": "web", "tier": "back"})
    assert selector == LabelSelector.parse("app=web,tier in (front,edge),!legacy")


@pytest.mark.parametrize(("selector", "message"), [
    ({"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["x"]}]},
     '"Equals" is not a valid label selector operator'),
    ({"matchExpressions": [{"key": "a", "operator": "In"}]},
     "values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty"),
    ({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
     'values: Invalid value: ["x"]: values set must be empty for exists and does not exist'),
])
def test_invalid_api_selectors_are_refused(selector: dict[str, object], message: str) -> None:
    with pytest.raises(ApiError) as caught:
        LabelSelector.from_api(selector)
    assert caught.value.message == message


_KEY = st.from_regex(r"\A([a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?\.io/)?"
                     r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,10}[A-Za-z0-9])?\Z")
_VALUE = st.from_regex(r"\A(([A-Za-z0-9][-A-Za-z0-9_.]{0,10})?[A-Za-z0-9])?\Z")


@st.composite
def _requirements(draw: st.DrawFn) -> Requirement:
    operator = draw(st.sampled_from(list(Operator)))
    if operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST):
        values: list[str] = []
    elif operator in (Operator.IN, Operator.NOT_IN):
        values = draw(st.lists(_VALUE, min_size=1, max_size=4))
    elif operator in (Operator.GREATER_THAN, Operator.LESS_THAN):
        values = [str(draw(st.integers(0, 1000)))]  # "-1" is not a valid label value
    else:
        values = [draw(_VALUE)]
    return Requirement.build(draw(_KEY), operator, values)


@given(st.lists(_requirements(), max_size=5))
def test_a_selector_parses_back_from_its_string(requirements: list[Requirement]) -> None:
    selector = LabelSelector(tuple(sorted(requirements, key=lambda r: (r.key, r.operator.value, r.values))))
    assert LabelSelector.parse(str(selector)) == selector


# --------------------------------------------------------------------------------------------
# Field selectors.

POD = {"metadata": {"name": "web-1", "namespace": "prod"},
       "spec": {"nodeName": "node-a"}, "status": {"phase": "Running"}}
POD_FIELDS = ("spec.nodeName", "status.phase")


@pytest.mark.parametrize(("text", "expected"), [
    ("metadata.name=web-1", True),
    ("metadata.name==web-1", True),
    ("metadata.name!=web-1", False),
    ("metadata.namespace=prod,spec.nodeName=node-a", True),
    ("spec.nodeName=node-b", False),
    ("spec.nodeName!=", True),
    ("status.phase=Running,metadata.name!=web-2", True),
    ("", True),
])
def test_field_selector_matching(text: str, expected: bool) -> None:
    assert FieldSelector.parse(text, POD_FIELDS).matches(POD) is expected


def test_missing_fields_compare_as_empty_and_booleans_as_words() -> None:
    unscheduled = {"metadata": {"name": "p"}, "spec": {}}
    assert FieldSelector.parse("spec.nodeName=", POD_FIELDS).matches(unscheduled)
    cordoned = {"metadata": {"name": "n"}, "spec": {"unschedulable": True}}
    assert FieldSelector.parse("spec.unschedulable=true", ["spec.unschedulable"]).matches(cordoned)
    # An unset bool is false, as the Node's field set reports it.
    assert FieldSelector.parse("spec.unschedulable=false", ["spec.unschedulable"]).matches({"spec": {}})


def test_core_event_source_is_the_source_component() -> None:
    event = {"metadata": {"name": "e"}, "source": {"component": "kubelet"}}
    assert FieldSelector.parse("source=kubelet", ["source"]).matches(event)


def test_field_selector_values_unescape_and_render_escaped() -> None:
    selector = FieldSelector.parse(r"metadata.name=a\,b\=c\\d")
    assert selector.matches({"metadata": {"name": r"a,b=c\d"}})
    assert str(selector) == r"metadata.name=a\,b\=c\\d"


@pytest.mark.parametrize(("text", "message"), [
    ("spec.hostname=x", "field label not supported: spec.hostname"),
    ("metadata.name", "invalid selector: 'metadata.name'; can't understand 'metadata.name'"),
    ("metadata.name=a,b", "invalid selector: 'metadata.name=a,b'; can't understand 'b'"),
    (r"metadata.name=a\x", r"invalid field selector: invalid escape sequence: \x"),
    ("metadata.name=a=b", "invalid field selector: unescaped character in value: ="),
])
def test_field_selector_errors_are_bad_requests(text: str, message: str) -> None:
    with pytest.raises(ApiError) as caught:
        FieldSelector.parse(text, POD_FIELDS)
    assert caught.value.code == 400
    assert caught.value.message == message


def test_exact_name_only_when_the_name_is_pinned() -> None:
    assert FieldSelector.parse("spec.nodeName=a,metadata.name=web-1", POD_FIELDS).exact_name() == "web-1"
    assert FieldSelector.parse("metadata.name!=web-1").exact_name() is None
    assert FieldSelector.parse("metadata.namespace=prod").exact_name() is None
    assert FieldSelector.parse("").empty
