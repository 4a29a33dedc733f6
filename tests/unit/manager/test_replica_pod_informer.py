"""A replica's one Pod list/watch (`operator_process.replica_pod_informer`): the controllers, the metric
APIs' pod labels and the scheduler extender all read it, and the controllers open no pod watch of their own."""

from __future__ import annotations

import time
from typing import Any

import orjson
from prometheus_client import CollectorRegistry

from colocation.apiserver.resource_metrics_routes import PodDirectory
from colocation.controllers.leader_task import Controllers
from colocation.controllers.settings import ControllerSettings
from colocation.kube.nodes import NodeDirectory
from colocation.kube.shared_informer import BOUND_UNFINISHED_PODS, PODS_PATH
from colocation.loadaware.load_aware_config import LoadAwareConfig
from colocation.manager.extender_assembly import SchedulerExtender, assemble_extender
from colocation.manager.operator_process import replica_pod_informer
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from tests.unit.kube.test_informer import FakeResponse, FakeServer, run_informer_until


def pod(name: str, *, node: str = "node-1", app: str = "web", rv: str = "10") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": rv,
                         "labels": {"app": app}},
            "spec": {"nodeName": node,
                     "containers": [{"name": "main", "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]},
            "status": {"phase": "Running", "qosClass": "Burstable"}}


def pod_list(*pods: dict[str, Any], rv: str) -> FakeResponse:
    return FakeResponse(200, orjson.dumps({"metadata": {"resourceVersion": rv}, "items": list(pods)}))


def watch(*events: tuple[str, dict[str, Any]]) -> FakeResponse:
    return FakeResponse(200, lines=[orjson.dumps({"type": type_, "object": obj}) for type_, obj in events])


def warm_controllers(*, own_pod_informer: bool) -> Controllers:
    # No API call is made: only the informers are built, and the pods' callbacks run.
    return Controllers(object(),  # type: ignore[arg-type]
                       NodeMetricStore(clock_wall=time.time, clock_monotonic=time.monotonic), ControllerSettings(),
                       namespace="colocation-system", identity="operator-0", registry=CollectorRegistry(),
                       own_pod_informer=own_pod_informer)


def extender() -> SchedulerExtender:
    store = NodeMetricStore(clock_wall=time.time, clock_monotonic=time.monotonic)
    return assemble_extender(store, NodeDirectory(), config=LoadAwareConfig, ready=lambda: True,
                             registry=CollectorRegistry())


async def test_controllers_metric_apis_and_extender_share_one_pod_list_and_watch() -> None:
    server = FakeServer([pod_list(pod("a"), pod("b", app="db"), rv="10"),
                         watch(("ADDED", pod("c", node="node-2", rv="11")), ("DELETED", pod("a", rv="12")))])
    controllers, labels, scheduling = warm_controllers(own_pod_informer=False), PodDirectory(), extender()
    informer = replica_pod_informer(server, controllers=controllers, metric_pods=labels, extender=scheduling)
    assert informer is not None
    await run_informer_until(informer, server.exhausted)

    pod_requests = [(params.get("watch") == "true", params.get("fieldSelector"))
                    for path, params, _ in server.requests if path == PODS_PATH]
    # One list, then the watch (resumed once the server ended it): not three of each.
    assert pod_requests == [(False, BOUND_UNFINISHED_PODS), (True, BOUND_UNFINISHED_PODS),
                            (True, BOUND_UNFINISHED_PODS)]
    # The controllers' own informers have no pod watch beside it.
    assert PODS_PATH not in [informer.path for informer in controllers.informers(server)]

    assert controllers.state.pods_synced.is_set()  # what the first evaluation and readiness wait for
    assert [p["metadata"]["name"] for p in controllers.state.pods_on("node-1")] == ["b"]
    assert [p["metadata"]["name"] for p in controllers.state.pods_on("node-2")] == ["c"]
    assert labels.labels("default", "a") is None and labels.labels("default", "b") == {"app": "db"}
    assert labels.labels("default", "c") == {"app": "web"}
    assert scheduling.pods.synced
    assert [bound.name for bound in scheduling.pods.on("node-1")] == ["b"]
    assert [bound.name for bound in scheduling.pods.on("node-2")] == ["c"]


async def test_the_pod_informer_runs_with_whatever_consumers_exist_and_not_at_all_without_any() -> None:
    assert replica_pod_informer(FakeServer([]), controllers=None, metric_pods=None, extender=None) is None
    server = FakeServer([pod_list(pod("a"), rv="10")])
    labels = PodDirectory()
    informer = replica_pod_informer(server, controllers=None, metric_pods=labels, extender=None)
    assert informer is not None
    await run_informer_until(informer, server.exhausted)
    assert labels.labels("default", "a") == {"app": "web"}


def test_controllers_on_their_own_follow_the_bound_pods_themselves() -> None:
    informers = warm_controllers(own_pod_informer=True).informers(FakeServer([]))
    pods = [informer for informer in informers if informer.path == PODS_PATH]
    assert [informer.options.field_selector for informer in pods] == [BOUND_UNFINISHED_PODS]
