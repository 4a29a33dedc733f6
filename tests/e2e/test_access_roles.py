"""Who may read the project's APIs, and how much of kube-apiserver the agents may take.

One sandbox with the project installed from manifests/ (one node, so one agent): a user bound
cluster-wide to the built-in `view` or `edit` role reads NodeSLOs, NodeResources and NodeMetrics
(manifests/access-roles.yaml, through ClusterRole aggregation) and writes none of them; on the
real control plane, a request with the agents' ServiceAccount token is classified into the
project's FlowSchema and priority level (manifests/flowcontrol.yaml), which kube-apiserver
reports in the X-Kubernetes-PF-* response headers.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import Kubectl, sandbox_kind_args
from tests.e2e.kube import start_sandbox_process, token_client
from tests.timing import eventually

pytestmark = pytest.mark.kubectl

RESOURCES = ("nodeslos.slo.colocation.dev", "noderesources.slo.colocation.dev",
             "nodemetrics.metrics.colocation.dev")
FLOW_SCHEMA = "colocation-agents"
AGENT_SA = ("colocation-system", "colocation-agent")


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    state = tmp_path_factory.mktemp("access-roles")
    args = [*sandbox_kind_args(request.config), "--nodes", "1", "--no-serve-resource-metrics",
            "--no-serve-custom-metrics"]
    with start_sandbox_process(state, args) as kubeconfig:
        yield kubeconfig


@pytest.fixture
def admin(kubectl: Kubectl, cluster: Path) -> Kubectl:
    return Kubectl(kubectl.binary, cluster, kubectl.cache_dir)


def can_i(kubectl: Kubectl, user: str, verb: str, resource: str) -> bool:
    result = kubectl.run("auth", "can-i", verb, resource, f"--as={user}", check=False)
    assert result.returncode in (0, 1), result.stderr  # 0: yes, 1: no
    return result.returncode == 0


def until_allowed(kubectl: Kubectl, user: str, verb: str, resource: str) -> None:
    """kube-controller-manager folds our rules into view and edit shortly after they are created."""
    eventually(lambda: can_i(kubectl, user, verb, resource), 30, interval=0,  # each call runs kubectl
               message=f"{user} still may not {verb} {resource}")


@pytest.mark.parametrize("role", ["view", "edit"])
def test_view_and_edit_users_read_the_projects_resources_and_write_none(admin: Kubectl, role: str) -> None:
    user = f"e2e-{role}-{uuid.uuid4().hex[:6]}"
    for resource in RESOURCES:  # before the binding: nothing (so what follows comes from the role)
        assert not can_i(admin, user, "list", resource)
    admin.run("create", "clusterrolebinding", user, f"--clusterrole={role}", f"--user={user}")
    try:
        for resource in RESOURCES:
            until_allowed(admin, user, "list", resource)
        # A real list through each API, kube-apiserver's own and the operator's aggregated one.
        listed = admin.run("get", ",".join(RESOURCES), f"--as={user}", "-o", "name")
        assert listed.returncode == 0
        for resource in RESOURCES:
            for verb in ("create", "update", "patch", "delete"):
                assert not can_i(admin, user, verb, resource), (verb, resource)
        refused = admin.run("create", f"--as={user}", "-f", "-", check=False, input=yaml.safe_dump({
            "apiVersion": "slo.colocation.dev/v1alpha1", "kind": "NodeResource",
            "metadata": {"name": f"{user}-node"}, "spec": {}}))
        assert refused.returncode == 1
        assert f'User "{user}" cannot create resource "noderesources" in API group "slo.colocation.dev"' \
            in refused.stderr, refused.stderr
    finally:
        admin.run("delete", "clusterrolebinding", user)


async def classified(kubeconfig: Path, token: str, path: str) -> tuple[int, str, str]:
    """(status, FlowSchema UID, PriorityLevel UID) kube-apiserver answers a GET of `path` with."""
    async with token_client(kubeconfig, token) as client:
        assert client.session is not None
        async with client.session.get(client.server + path, ssl=client.ssl,
                                      headers={"Authorization": f"Bearer {token}"}) as response:
            return (response.status, response.headers.get("X-Kubernetes-PF-FlowSchema-UID", ""),
                    response.headers.get("X-Kubernetes-PF-PriorityLevel-UID", ""))


def test_the_agents_requests_have_a_priority_level_of_their_own(admin: Kubectl, cluster: Path,
                                                                 real_cluster: bool) -> None:
    if not real_cluster:
        pytest.skip("kube only: the builtin sandbox stores FlowSchemas but has no priority and fairness "
                    "to classify requests with")
    flow = yaml.safe_load(admin.run("get", "flowschema", FLOW_SCHEMA, "-o", "yaml").stdout)
    level = yaml.safe_load(admin.run("get", "prioritylevelconfiguration", FLOW_SCHEMA, "-o", "yaml").stdout)
    # Accepted: kube-apiserver found the priority level the FlowSchema names.
    conditions = {c["type"]: c["status"] for c in flow.get("status", {}).get("conditions", [])}
    assert conditions.get("Dangling") == "False", flow.get("status")
    assert level["spec"]["limited"]["borrowingLimitPercent"] == 0

    namespace, account = AGENT_SA
    agent_token = admin.run("create", "token", account, "-n", namespace, "--duration=10m").stdout.strip()
    operator_token = admin.run("create", "token", "colocation-operator", "-n", namespace,
                               "--duration=10m").stdout.strip()
    # What an agent does: list its node's pods. Its request lands in our FlowSchema and level...
    status, schema_uid, level_uid = asyncio.run(classified(
        cluster, agent_token, "/api/v1/pods?fieldSelector=spec.nodeName%3Dnowhere&limit=1"))
    assert status == 200
    assert (schema_uid, level_uid) == (flow["metadata"]["uid"], level["metadata"]["uid"])
    # ...and another ServiceAccount's (the operator's) does not.
    status, schema_uid, level_uid = asyncio.run(classified(cluster, operator_token, "/api/v1/nodes?limit=1"))
    assert status == 200 and schema_uid and level_uid
    assert schema_uid != flow["metadata"]["uid"] and level_uid != level["metadata"]["uid"]
