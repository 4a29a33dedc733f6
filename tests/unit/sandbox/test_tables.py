"""Server-side printing: Tables as kube-apiserver builds them for `kubectl get`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.tables import human_duration, metadata_only_accept, wants_metadata_only, wants_table
from colocation_sandbox.server.resource_types import BUILTIN_TYPES, PrinterColumn, ResourceType
from colocation_sandbox.server.server_side_tables import partial_object_metadata, to_table

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
KUBECTL_ACCEPT = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)


def ago(**delta: float) -> str:
    return (NOW - timedelta(**delta)).strftime("%Y-%m-%dT%H:%M:%SZ")


def builtin(group: str, resource: str) -> ResourceType:
    return next(rt for rt in BUILTIN_TYPES if rt.group == group and rt.resource == resource)


def table(rt: ResourceType, *objects: dict[str, Any], **kw: object) -> dict[str, Any]:
    return to_table(rt, list(objects), list_meta={"resourceVersion": "42"}, now=NOW, **kw)  # type: ignore[arg-type]


def column_names(result: dict[str, Any]) -> list[str]:
    return [c["name"] for c in result["columnDefinitions"]]


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (-3, "<invalid>"),
        (-1.5, "0s"),
        (0, "0s"),
        (5, "5s"),
        (119, "119s"),
        (120, "2m"),
        (200, "3m20s"),
        (599, "9m59s"),
        (600, "10m"),
        (179 * 60, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 5 * 60, "3h5m"),
        (8 * 3600, "8h"),
        (47 * 3600 + 59 * 60, "47h"),
        (48 * 3600, "2d"),
        (51 * 3600, "2d3h"),
        (8 * 86400, "8d"),
        (729 * 86400, "729d"),
        (730 * 86400, "2y"),
        (731 * 86400, "2y1d"),
        (3 * 365 * 86400, "3y"),
        (9 * 365 * 86400 + 86400, "9y"),
    ],
)
def test_human_duration_matches_upstream(seconds: float, expected: str) -> None:
    assert human_duration(seconds) == expected


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (KUBECTL_ACCEPT, "v1"),
        ("application/json;as=Table;v=v1beta1;g=meta.k8s.io, application/json", "v1beta1"),
        ("application/json", None),
        ("application/json, */*", None),
        ("", None),
        # Clauses the server cannot serve are skipped, not fatal.
        (
            "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1;"
            "g=meta.k8s.io",
            "v1",
        ),
        ("application/json;as=Table;v=v2;g=meta.k8s.io,application/json", None),
        # Preference follows q, then the order given.
        ("application/json;q=0.5,application/json;as=Table;v=v1;g=meta.k8s.io", "v1"),
    ],
)
def test_wants_table_negotiates_like_the_apiserver(accept: str, expected: str | None) -> None:
    assert wants_table(accept) == expected


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (metadata_only_accept(), "v1"),
        (metadata_only_accept("v1beta1"), "v1beta1"),
        ("application/json", None),
        (KUBECTL_ACCEPT, None),  # a Table clause is skipped, then the plain object
        ("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v9,application/json", None),
    ],
)
def test_a_writer_may_ask_for_the_metadata_only(accept: str, expected: str | None) -> None:
    assert wants_metadata_only(accept) == expected


@pytest.mark.parametrize("accept", ["text/html", "application/json;as=Table;v=v1"])  # the latter lacks g=
def test_wants_table_refuses_when_nothing_is_acceptable(accept: str) -> None:
    with pytest.raises(ApiError) as info:
        wants_table(accept)
    assert (info.value.code, info.value.reason) == (406, "NotAcceptable")


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "web-1",
        "namespace": "default",
        "creationTimestamp": ago(minutes=5),
        "labels": {"app": "web"},
        "resourceVersion": "41",
    },
    "spec": {
        "nodeName": "node-a",
        "containers": [{"name": "app"}, {"name": "proxy"}],
        "readinessGates": [{"conditionType": "example.com/lb"}],
    },
    "status": {
        "phase": "Running",
        "podIP": "10.0.0.7",
        "podIPs": [{"ip": "10.0.0.7"}],
        "conditions": [{"type": "Ready", "status": "False"}, {"type": "example.com/lb", "status": "True"}],
        "containerStatuses": [
            {
                "name": "app",
                "ready": True,
                "restartCount": 2,
                "state": {"running": {}},
                "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(minutes=3, seconds=20)}},
            },
            {
                "name": "proxy",
                "ready": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            },
        ],
    },
}


def test_pod_table_as_kubectl_receives_it() -> None:
    result = table(builtin("", "pods"), POD)
    assert result["kind"] == "Table" and result["apiVersion"] == "meta.k8s.io/v1"
    assert result["metadata"] == {"resourceVersion": "42"}
    assert column_names(result) == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
        "IP",
        "Node",
        "Nominated Node",
        "Readiness Gates",
    ]
    assert [c["priority"] for c in result["columnDefinitions"]] == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert result["columnDefinitions"][0]["format"] == "name"
    # The last container status read decides the status (upstream walks them from the end).
    assert result["rows"] == [
        {
            "cells": [
                "web-1",
                "1/2",
                "CrashLoopBackOff",
                "2 (3m20s ago)",
                "5m",
                "10.0.0.7",
                "node-a",
                "<none>",
                "1/1",
            ],
            "object": {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": POD["metadata"],
            },
        }
    ]


@pytest.mark.parametrize(
    ("change", "status", "ready"),
    [
        ({"status": {"phase": "Pending"}}, "Pending", "0/2"),
        (
            {
                "status": {
                    "phase": "Succeeded",
                    "containerStatuses": [
                        {"name": "app", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
                    ],
                }
            },
            "Completed",
            "0/2",
        ),
        (
            {
                "status": {
                    "phase": "Running",
                    "initContainerStatuses": [{"name": "init", "state": {"waiting": {"reason": "PodInitializing"}}}],
                }
            },
            "Init:0/1",
            "0/2",
        ),
        (
            {
                "status": {
                    "phase": "Failed",
                    "initContainerStatuses": [{"name": "init", "state": {"terminated": {"exitCode": 3}}}],
                }
            },
            "Init:ExitCode:3",
            "0/2",
        ),
        (
            {"metadata": {"deletionTimestamp": ago(seconds=1)}, "status": {"phase": "Running"}},
            "Terminating",
            "0/2",
        ),
    ],
)
def test_pod_status_column(change: dict[str, Any], status: str, ready: str) -> None:
    pod = {
        "metadata": {"name": "p", "creationTimestamp": ago(hours=50), **change.get("metadata", {})},
        "spec": {"containers": [{"name": "app"}, {"name": "b"}], "initContainers": [{"name": "init"}]},
        "status": change["status"],
    }
    row = table(builtin("", "pods"), pod)["rows"][0]
    assert row["cells"][1:5] == [ready, status, "0", "2d2h"]
    if change["status"]["phase"] == "Succeeded":
        assert row["conditions"] == [
            {
                "type": "Completed",
                "status": "True",
                "reason": "Succeeded",
                "message": "The pod has completed successfully.",
            }
        ]


def test_node_table() -> None:
    node = {
        "metadata": {
            "name": "node-a",
            "creationTimestamp": ago(days=3, hours=2),
            "labels": {"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/control-plane": ""},
        },
        "spec": {"unschedulable": True},
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True"},
            ],
            "addresses": [{"type": "InternalIP", "address": "192.168.1.10"}],
            "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Debian 12"},
        },
    }
    result = table(builtin("", "nodes"), node)
    assert column_names(result) == [
        "Name",
        "Status",
        "Roles",
        "Age",
        "Version",
        "Internal-IP",
        "External-IP",
        "OS-Image",
        "Kernel-Version",
        "Container-Runtime",
    ]
    assert result["rows"][0]["cells"] == [
        "node-a",
        "Ready,SchedulingDisabled",
        "control-plane,worker",
        "3d2h",
        "v1.32.0",
        "192.168.1.10",
        "<none>",
        "Debian 12",
        "<unknown>",
        "<unknown>",
    ]
    no_conditions = table(builtin("", "nodes"), {"metadata": {"name": "n"}})["rows"][0]["cells"]
    assert no_conditions[1:5] == ["Unknown", "<none>", "<unknown>", ""]


CUSTOM = ResourceType(
    group="slo.colocation.dev",
    version="v1alpha1",
    resource="noderesources",
    kind="NodeResource",
    namespaced=False,
    strategic=False,
    printer_columns=(
        PrinterColumn(name="CPU", type="integer", json_path=".status.cpu"),
        PrinterColumn(name="RATIO", type="number", json_path=".status.ratio", description="Share of the node.",
                      priority=1),
        PrinterColumn(name="HEALTHY", type="boolean", json_path=".status.healthy"),
        PrinterColumn(name="DETAIL", type="string", json_path=".status.detail"),
        PrinterColumn(name="FLOAT", type="string", json_path=".status.whole"),
        PrinterColumn(name="APP", type="string", json_path=".metadata.labels['app\\.kubernetes\\.io/name']"),
        PrinterColumn(name="SEEN", type="date", json_path=".status.seen"),
        PrinterColumn(name="MISSING", type="string", json_path=".status.nothing"),
        PrinterColumn(name="WRONG", type="integer", json_path=".status.healthy"),
    ),
)


def test_custom_resource_columns_of_each_type() -> None:
    obj = {
        "apiVersion": "slo.colocation.dev/v1alpha1",
        "kind": "NodeResource",
        "metadata": {
            "name": "node-a",
            "creationTimestamp": ago(hours=1),
            "labels": {"app.kubernetes.io/name": "x"},
        },
        "status": {
            "cpu": 2500.9,
            "ratio": 3,
            "healthy": True,
            "detail": {"b": "<1>", "a": [1.0, 2.5]},
            "whole": 7.0,
            "seen": ago(minutes=10),
        },
    }
    result = table(CUSTOM, obj)
    assert column_names(result) == [
        "Name",
        "CPU",
        "RATIO",
        "HEALTHY",
        "DETAIL",
        "FLOAT",
        "APP",
        "SEEN",
        "MISSING",
        "WRONG",
    ]
    ratio = result["columnDefinitions"][2]
    assert (ratio["type"], ratio["priority"], ratio["description"]) == ("number", 1, "Share of the node.")
    assert (
        result["columnDefinitions"][1]["description"]
        == "Custom resource definition column (in JSONPath format): .status.cpu"
    )
    cells = result["rows"][0]["cells"]
    # Go's JSON: sorted keys, HTML characters escaped, 1.0 written as 1.
    assert cells == [
        "node-a",
        2500,
        3.0,
        True,
        '{"a":[1,2.5],"b":"\\u003c1\\u003e"}',
        "7",
        "x",
        "10m",
        None,
        None,
    ]
    assert isinstance(cells[2], float)


@pytest.mark.parametrize(("seen", "expected"), [("not a time", "<invalid>"), ("", "<unknown>"), (7, None)])
def test_custom_resource_date_column_of_bad_values(seen: object, expected: str | None) -> None:
    rt = ResourceType(
        group="g.example.com",
        version="v1",
        resource="things",
        kind="Thing",
        namespaced=True,
        printer_columns=(PrinterColumn(name="SEEN", type="date", json_path=".status.seen"),),
    )
    assert table(rt, {"metadata": {"name": "t"}, "status": {"seen": seen}})["rows"][0]["cells"] == [
        "t",
        expected,
    ]


def test_custom_resource_without_columns_shows_name_and_age() -> None:
    rt = ResourceType(group="g.example.com", version="v1", resource="things", kind="Thing", namespaced=True)
    result = table(rt, {"metadata": {"name": "t", "creationTimestamp": ago(seconds=30)}})
    assert [(c["name"], c["type"]) for c in result["columnDefinitions"]] == [
        ("Name", "string"),
        ("Age", "date"),
    ]
    assert result["rows"][0]["cells"] == ["t", "30s"]


def test_unparsable_printer_column_drops_it_and_the_following_ones() -> None:
    rt = ResourceType(
        group="g.example.com",
        version="v1",
        resource="things",
        kind="Thing",
        namespaced=True,
        printer_columns=(
            PrinterColumn(name="A", type="string", json_path=".a"),
            PrinterColumn(name="B", type="string", json_path='.b["x"]'),
            PrinterColumn(name="C", type="string", json_path=".c"),
        ),
    )
    assert column_names(table(rt)) == ["Name", "A"]


def test_include_object_variants() -> None:
    pods = builtin("", "pods")
    assert table(pods, POD, include_object="Object")["rows"][0]["object"] is POD
    assert table(pods, POD, include_object="None")["rows"][0]["object"] is None
    beta = table(pods, POD, table_version="v1beta1")
    assert beta["apiVersion"] == "meta.k8s.io/v1beta1"
    assert beta["rows"][0]["object"] == partial_object_metadata(POD, "v1beta1")
    assert beta["rows"][0]["object"]["apiVersion"] == "meta.k8s.io/v1beta1"
    # An unknown includeObject is refused with the request, before any Table is built
    # (tests/unit/sandbox/test_watch.py, test_an_unknown_include_object_is_400_before_anything_is_listed).


def test_watch_events_after_the_first_carry_no_headers() -> None:
    result = table(builtin("", "pods"), POD, include_headers=False)
    assert result["columnDefinitions"] is None and len(result["rows"]) == 1


def test_list_metadata_carries_continue_and_skips_empty_values() -> None:
    result = to_table(
        builtin("", "configmaps"),
        [],
        list_meta={"resourceVersion": "9", "continue": "abc", "remainingItemCount": 0},
        now=NOW,
    )
    assert result["metadata"] == {"resourceVersion": "9", "continue": "abc", "remainingItemCount": 0}
    assert result["rows"] == []


def test_default_convertor_resources_show_created_at() -> None:
    crd = {"metadata": {"name": "nodeslos.slo.colocation.dev", "creationTimestamp": "2026-11-20T08:30:00Z"}}
    result = table(builtin("apiextensions.k8s.io", "customresourcedefinitions"), crd)
    assert [(c["name"], c["type"]) for c in result["columnDefinitions"]] == [
        ("Name", "string"),
        ("Created At", "date"),
    ]
    assert result["rows"][0]["cells"] == ["nodeslos.slo.colocation.dev", "2026-11-20T08:30:00Z"]


def test_service_table() -> None:
    service = {
        "metadata": {"name": "lb", "creationTimestamp": ago(minutes=90)},
        "spec": {
            "type": "LoadBalancer",
            "clusterIP": "10.96.0.10",
            "selector": {"b": "2", "a": "1"},
            "ports": [{"port": 443, "nodePort": 30443, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}],
        },
        "status": {"loadBalancer": {}},
    }
    result = table(builtin("", "services"), service)
    assert column_names(result) == ["Name", "Type", "Cluster-IP", "External-IP", "Port(s)", "Age", "Selector"]
    assert result["rows"][0]["cells"] == [
        "lb",
        "LoadBalancer",
        "10.96.0.10",
        "<pending>",
        "443:30443/TCP,53/UDP",
        "90m",
        "a=1,b=2",
    ]


def test_events_of_both_apis_print_alike() -> None:
    core = {
        "metadata": {"name": "e1"},
        "type": "Warning",
        "reason": "Evicted",
        "message": " node unhealthy \n",
        "involvedObject": {"kind": "Pod", "name": "web-1", "fieldPath": "spec.containers{app}"},
        "source": {"component": "colocation"},
        "firstTimestamp": ago(minutes=30),
        "lastTimestamp": ago(minutes=2),
        "count": 4,
    }
    new = {
        "metadata": {"name": "e1"},
        "type": "Warning",
        "reason": "Evicted",
        "note": " node unhealthy \n",
        "regarding": {"kind": "Pod", "name": "web-1", "fieldPath": "spec.containers{app}"},
        "reportingController": "colocation",
        "eventTime": "2026-11-22T11:30:00.000000Z",
        "series": {"count": 4, "lastObservedTime": "2026-11-22T11:58:00.000000Z"},
    }
    expected = [
        "2m",
        "Warning",
        "Evicted",
        "pod/web-1",
        "spec.containers{app}",
        "colocation",
        "node unhealthy",
        "30m",
        4,
        "e1",
    ]
    assert table(builtin("", "events"), core)["rows"][0]["cells"] == expected
    result = table(builtin("events.k8s.io", "events"), new)
    assert column_names(result)[:4] == ["Last Seen", "Type", "Reason", "Object"]
    assert result["rows"][0]["cells"] == expected


def test_deployment_and_daemonset_tables() -> None:
    deployment = {
        "metadata": {"name": "op", "creationTimestamp": ago(days=1)},
        "spec": {
            "replicas": 2,
            "selector": {
                "matchLabels": {"app": "op"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]}],
            },
            "template": {"spec": {"containers": [{"name": "op", "image": "img:1"}]}},
        },
        "status": {"readyReplicas": 1, "updatedReplicas": 2, "availableReplicas": 1},
    }
    assert table(builtin("apps", "deployments"), deployment)["rows"][0]["cells"] == [
        "op",
        "1/2",
        2,
        1,
        "24h",
        "op",
        "img:1",
        "app=op,tier in (a,b)",
    ]
    daemonset = {
        "metadata": {"name": "agent", "creationTimestamp": ago(days=1)},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {"spec": {"containers": [{"name": "a", "image": "i"}, {"name": "b", "image": "j"}]}},
        },
        "status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 2},
    }
    assert table(builtin("apps", "daemonsets"), daemonset)["rows"][0]["cells"] == [
        "agent",
        3,
        3,
        2,
        0,
        0,
        "<none>",
        "24h",
        "a,b",
        "i,j",
        "app=agent",
    ]


def test_apiservice_and_binding_tables() -> None:
    apiservice = {
        "metadata": {"name": "v1alpha1.metrics.colocation.dev"},
        "spec": {"service": {"namespace": "colocation-system", "name": "colocation-operator"}},
        "status": {"conditions": [{"type": "Available", "status": "False", "reason": "FailedDiscoveryCheck"}]},
    }
    assert table(builtin("apiregistration.k8s.io", "apiservices"), apiservice)["rows"][0]["cells"] == [
        "v1alpha1.metrics.colocation.dev",
        "colocation-system/colocation-operator",
        "False (FailedDiscoveryCheck)",
        "<unknown>",
    ]
    binding = {
        "metadata": {"name": "b"},
        "roleRef": {"kind": "ClusterRole", "name": "view"},
        "subjects": [
            {"kind": "ServiceAccount", "namespace": "ns", "name": "sa"},
            {"kind": "User", "name": "alice"},
            {"kind": "User", "name": "bob"},
        ],
    }
    assert table(builtin("rbac.authorization.k8s.io", "clusterrolebindings"), binding)["rows"][0]["cells"] == [
        "b",
        "ClusterRole/view",
        "<unknown>",
        "alice, bob",
        "",
        "ns/sa",
    ]


@pytest.mark.parametrize("rt", [rt for rt in BUILTIN_TYPES if not rt.virtual], ids=lambda rt: rt.group_resource)
def test_every_builtin_row_has_a_cell_per_column(rt: ResourceType) -> None:
    # kubectl pairs cells with columns by position; a missing cell shifts every column after it.
    result = table(rt, {"metadata": {"name": "bare"}})
    assert len(result["rows"][0]["cells"]) == len(result["columnDefinitions"])
    assert "bare" in result["rows"][0]["cells"]


def test_resource_quota_splits_requests_from_limits() -> None:
    quota = {
        "metadata": {"name": "q"},
        "status": {
            "hard": {"limits.cpu": "4", "requests.memory": "1Gi", "pods": "10", "cpu": "2"},
            "used": {"limits.cpu": "1500m", "pods": "3"},
        },
    }
    assert table(builtin("", "resourcequotas"), quota)["rows"][0]["cells"] == [
        "q",
        "cpu: 0/2, pods: 3/10, requests.memory: 0/1Gi",
        "limits.cpu: 1500m/4",
        "<unknown>",
    ]
