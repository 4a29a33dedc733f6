"""JSONPath as CRD printer columns use it: client-go's parsing and evaluation."""

from __future__ import annotations

import pytest

from colocation_sandbox.server.jsonpath import evaluate_jsonpath, parse_jsonpath

OBJ = {
    "metadata": {"name": "x", "labels": {"app.kubernetes.io/name": "agent", "a/b": "slash", "app": "plain"}},
    "spec": {"items": [{"x": 1}, {"x": 2}], "flag": False},
    "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Synced", "status": "False"}]},
}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".metadata.name", ["x"]),
        (".spec.items[0].x", [1]),
        (".spec.items[-1].x", [2]),
        (".spec.items[*].x", [1, 2]),
        (".spec.flag", [False]),
        (".metadata.labels.app", ["plain"]),
        (".metadata.labels.app\\.kubernetes\\.io/name", ["agent"]),
        (".metadata.labels['app\\.kubernetes\\.io/name']", ["agent"]),
        (".metadata.labels.a/b", ["slash"]),
        (".metadata.labels['a/b']", ["slash"]),
        # As in client-go, a bracketed key is re-read as a path: its dots split it unless escaped.
        (".metadata.labels['app.kubernetes.io/name']", []),
        (".metadata.missing.deeper", []),
        ('.status.conditions[?(@.type=="Ready")].status', ["True"]),
        (".status.conditions[?(@.type!='Ready')].type", ["Synced"]),
    ],
)
def test_jsonpath_subset(path: str, expected: list[object]) -> None:
    assert evaluate_jsonpath(parse_jsonpath(path), OBJ) == expected


@pytest.mark.parametrize("path", [".spec.items[5].x", ".metadata.name[0]"])
def test_jsonpath_bad_index_is_an_error(path: str) -> None:
    with pytest.raises(LookupError):
        evaluate_jsonpath(parse_jsonpath(path), OBJ)


@pytest.mark.parametrize("path", ['.metadata.labels["app"]', ".spec.items[0", ".spec[x]", ".spec[1:"])
def test_jsonpath_rejects_what_client_go_cannot_parse(path: str) -> None:
    with pytest.raises(ValueError):
        parse_jsonpath(path)
