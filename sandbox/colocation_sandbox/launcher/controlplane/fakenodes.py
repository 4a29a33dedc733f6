"""The simulated nodes on the real control plane: kwok nodes, their synthetic pods, their agents.

Each is a Node that kwok manages (its annotation) and that only tolerating pods land on (its
taint, which the agent DaemonSet tolerates and the operator Deployment does not), with the pods
its synthetic collector describes bound to it. The DaemonSet gives each one an agent pod, which
kwok runs; the agent itself is one process for all simulated nodes (`colocation agent
--simulated-nodes`), each node with a token bound to its own agent pod (TokenRequest), so the
leader's node rule and the manifests' agent RBAC apply as for real agents.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any

from colocation.agent.simulated import SimulatedNode
from colocation.agent.synthetic import PROFILES
from colocation.kube import permissions
from colocation_sandbox.launcher.child_processes import TOKEN_SECONDS
from colocation_sandbox.launcher.controlplane import metricsserver
from colocation_sandbox.launcher.controlplane.components import KWOK_NODE_ANNOTATION
from colocation_sandbox.launcher.controlplane.restclient import RestClient

log = logging.getLogger(__name__)

KWOK_TAINT = {"key": KWOK_NODE_ANNOTATION, "value": "fake", "effect": "NoSchedule"}
AGENT_SELECTOR = "app.kubernetes.io/name=colocation,app.kubernetes.io/component=agent"
PARALLEL_CALLS = 16
PROGRESS_EVERY_SECONDS = 10.0


def simulated_specs(count: int, pods_per_node: int, *, scraped_share: float = 1.0,
                    usage_annotations: bool = False) -> list[SimulatedNode]:
    """Nodes 1..count-1, as the builtin sandbox numbers them (node 0 is this machine), `scraped_share`
    of each one's pods with the scrape annotations. With `usage_annotations`, their usage is what
    their pods' and their own annotations say."""
    return [SimulatedNode(node=f"sim-node-{index}", token="", seed=index, profile=PROFILES[(index - 1) % len(PROFILES)],
                          pods=pods_per_node, scraped_share=scraped_share, usage_annotations=usage_annotations)
            for index in range(1, count)]


def _kwok_node(spec: SimulatedNode) -> dict[str, Any]:
    collector = spec.collector()
    node = collector.node()
    annotations = {**(node["metadata"].get("annotations") or {}), KWOK_NODE_ANNOTATION: "fake"}
    if spec.usage_annotations:
        annotations |= {**collector.system_annotations(), **metricsserver.node_annotations(spec.node)}
        # Not Ready yet: kwok's ready stage (kwokstages) then gives it its address and kubelet port,
        # where metrics-server scrapes it.
        node = {**node, "status": {k: v for k, v in node["status"].items() if k != "conditions"}}
    metadata = {**node["metadata"], "annotations": annotations}
    return {**node, "metadata": metadata, "spec": {**(node.get("spec") or {}), "taints": [KWOK_TAINT]}}


def _bound_pod(pod: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    metadata = {k: v for k, v in pod["metadata"].items() if k not in ("uid", "resourceVersion", "creationTimestamp")}
    if annotations:
        metadata["annotations"] = {**(metadata.get("annotations") or {}), **annotations}
    spec = {**pod["spec"], "tolerations": [{"operator": "Exists"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


async def _bounded(calls: list[Any], what: str) -> None:
    """Run the coroutines PARALLEL_CALLS at a time, with a progress line every few seconds."""
    slots = asyncio.Semaphore(PARALLEL_CALLS)
    done = 0
    last = time.monotonic()

    async def one(call: Any) -> None:
        nonlocal done, last
        async with slots:
            await call
        done += 1
        if time.monotonic() - last > PROGRESS_EVERY_SECONDS:
            last = time.monotonic()
            log.info("creating simulated nodes", extra={"step": what, "done": done, "of": len(calls)})

    await asyncio.gather(*(one(call) for call in calls))


async def create_nodes(client: RestClient, specs: list[SimulatedNode]) -> None:
    namespaces: set[str] = set()
    pods: list[dict[str, Any]] = []
    for spec in specs:
        collector = spec.collector()
        usage = collector.usage_annotations() if spec.usage_annotations else {}
        for pod in collector.pods():
            pods.append(_bound_pod(pod, usage.get((pod["metadata"]["namespace"], pod["metadata"]["name"]))))
            namespaces.add(pod["metadata"].get("namespace") or "default")
    for namespace in sorted(namespaces):
        await client.must("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}}, ok=(201, 409))
    # A colocated cluster has Koordinator's PriorityClasses; the real API server refuses pods that
    # name a class it does not have (the builtin sandbox does not check).
    classes = {p["spec"]["priorityClassName"]: p["spec"]["priority"]
               for p in pods if p["spec"].get("priorityClassName")}
    for name, value in sorted(classes.items()):
        await client.must("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", {
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value, "description": "Koordinator's priority class, for the simulated pods"}, ok=(201, 409))
    await _bounded([client.must("POST", "/api/v1/nodes", _kwok_node(spec), ok=(201, 409)) for spec in specs],
                   "nodes")
    # Synthetic names are unique per node only (two nodes may both have a redis-0): a taken name
    # means one pod less on that node, as in the builtin sandbox.
    await _bounded([client.must("POST", f"/api/v1/namespaces/{p['metadata'].get('namespace') or 'default'}/pods",
                                p, ok=(201, 409)) for p in pods], "pods")


async def agent_tokens(client: RestClient, specs: list[SimulatedNode], timeout: float) -> list[SimulatedNode]:
    """Wait for the DaemonSet's agent pod on every simulated node; a token bound to each."""
    namespace = permissions.OPERATOR_NAMESPACE
    wanted = {spec.node for spec in specs}
    deadline = time.monotonic() + timeout
    delay = 0.5
    while True:
        listed = await client.must("GET", f"/api/v1/namespaces/{namespace}/pods",
                                   params={"labelSelector": AGENT_SELECTOR})
        by_node = {p["spec"].get("nodeName"): p for p in listed["items"]
                   if p["spec"].get("nodeName") in wanted and not p["metadata"].get("deletionTimestamp")}
        if len(by_node) == len(wanted):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"the agent DaemonSet has pods on {len(by_node)} of {len(wanted)} simulated nodes "
                               f"after {timeout:.0f} s")
        await asyncio.sleep(delay)  # the DaemonSet controller and the scheduler are still at work
        delay = min(delay * 1.5, 5.0)
    tokens: dict[str, str] = {}

    async def request(node: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        answer = await client.must(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{permissions.AGENT_SERVICE_ACCOUNT}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": TOKEN_SECONDS,
                      "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}}})
        tokens[node] = answer["status"]["token"]

    await _bounded([request(node, pod) for node, pod in by_node.items()], "tokens")
    return [dataclasses.replace(s, token=tokens[s.node]) for s in specs]

