"""The install (crds/, manifests/) is valid Kubernetes, secure, and grants exactly what the code uses.

Everything here runs offline: manifests/ is rendered by `kubectl kustomize`, objects are validated
with the Kubernetes OpenAPI schemas shipped in kubernetes-validate, and RBAC is evaluated by the
sandbox's implementation of the upstream RBAC authorizer.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from colocation.apimachinery.userinfo import NODE_NAME_EXTRA, UserInfo
from colocation.koordinator.slo_strategies import CPUBurstStrategy, ResourceThresholdStrategy, Strategy, SystemStrategy
from colocation.kube import permissions
from colocation.kube.permissions import AGENT_API_CALLS, OPERATOR_API_CALLS, OPERATOR_NON_RESOURCE_CALLS, ApiCall
from colocation_sandbox.launcher.controlplane.binaries import kubectl_binary
from colocation_sandbox.server.rbac_authorizer import RbacAuthorizer, RequestAttributes
from colocation_sandbox.server.rbac_bootstrap import bootstrap_policy

REPO = Path(__file__).resolve().parents[3]
KUBECTL = kubectl_binary()  # the one hack/kube/build.sh built, else the PATH's

# The oldest Kubernetes we support (ServiceAccount tokens carry the node name from 1.30 on, which
# the NodeMetric API relies on), and the newest whose schemas kubernetes-validate ships.
KUBERNETES_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())

OPERATOR_SA = (permissions.OPERATOR_NAMESPACE, permissions.OPERATOR_SERVICE_ACCOUNT)
AGENT_SA = (permissions.OPERATOR_NAMESPACE, permissions.AGENT_SERVICE_ACCOUNT)
DECLARED_CALLS = {OPERATOR_SA: OPERATOR_API_CALLS, AGENT_SA: AGENT_API_CALLS}
RBAC_PLURALS = {"Role": "roles", "RoleBinding": "rolebindings",
                "ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings"}


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    if KUBECTL is None:
        pytest.skip("no kubectl (neither built by hack/kube/build.sh nor on the PATH): manifests/ cannot be rendered")
    result = subprocess.run([KUBECTL, "kustomize", str(REPO / "manifests")],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, f"kubectl kustomize manifests/ failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module")
def crds() -> dict[str, dict[str, Any]]:
    found = [doc for path in sorted((REPO / "crds").glob("*.yaml"))
             for doc in yaml.safe_load_all(path.read_text()) if doc]
    return {crd["metadata"]["name"]: crd for crd in found}


def find(objects: list[dict[str, Any]], kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name
               and o["metadata"].get("namespace") == namespace]
    assert len(matches) == 1, f"expected one {kind} {namespace}/{name}, found {len(matches)}"
    return matches[0]


def schema_of(crd: Mapping[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


# --- Offline validation ------------------------------------------------------------------------------

@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_rendered_object_is_valid_kubernetes(rendered: list[dict[str, Any]], version: str) -> None:
    errors = []
    for obj in rendered:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            path = ".".join(str(p) for p in error.path)
            errors.append(f"{obj['kind']} {obj['metadata']['name']}: {path}: {error.message}")
    assert errors == []


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_crd_is_valid_kubernetes(crds: dict[str, dict[str, Any]], version: str) -> None:
    assert set(crds) == {"nodeslos.slo.colocation.dev", "noderesources.slo.colocation.dev",
                         "clustercolocationprofiles.slo.colocation.dev"}
    for crd in crds.values():
        kubernetes_validate.validate(crd, version, strict=True)


def test_the_install_has_every_part(rendered: list[dict[str, Any]]) -> None:
    present = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in rendered}
    ns = permissions.OPERATOR_NAMESPACE
    assert {
        ("Namespace", None, ns), ("Namespace", None, permissions.NODE_LEASE_NAMESPACE),
        ("ServiceAccount", ns, "colocation-operator"), ("ServiceAccount", ns, "colocation-agent"),
        ("Deployment", ns, "colocation-operator"), ("PodDisruptionBudget", ns, "colocation-operator"),
        ("Service", ns, "colocation-operator"), ("DaemonSet", ns, "colocation-agent"),
        ("ConfigMap", ns, permissions.CONFIG_MAP_NAME),
        ("APIService", None, "v1alpha1.metrics.colocation.dev"),
    } <= present
    for obj in rendered:
        labels = obj["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/part-of") == "colocation", obj["metadata"]["name"]


# --- CRD schemas ---------------------------------------------------------------------------------------

_VALUE_VALIDATIONS = ("anyOf", "allOf", "oneOf", "not")


def structural_problems(node: Mapping[str, Any], path: str) -> Iterator[str]:
    """What keeps `node` from being a structural schema that documents every field."""
    if path == ".metadata":
        # kube-apiserver forbids anything on the root metadata but its type and restrictions
        # of name/generateName; even a description is rejected.
        if dict(node) != {"type": "object"}:
            yield f"{path}: must be exactly {{type: object}}, not {dict(node)}"
        return
    if not ("type" in node or node.get("x-kubernetes-preserve-unknown-fields")
            or node.get("x-kubernetes-int-or-string")):
        yield f"{path}: no type"
    if not node.get("description"):
        yield f"{path}: no description"
    for keyword in _VALUE_VALIDATIONS:
        for sub in node.get(keyword, ()) if keyword != "not" else [node.get("not", {})]:
            for forbidden in ("description", "default", "additionalProperties", "nullable"):
                if forbidden in sub:
                    yield f"{path}.{keyword}: {forbidden} is not allowed in a value validation"
    if node.get("x-kubernetes-list-type") == "map":
        required = set(node["items"].get("required", ()))
        for key in node.get("x-kubernetes-list-map-keys", ()):
            if key not in required:
                yield f"{path}: list map key {key!r} must be required"
    for name, sub in node.get("properties", {}).items():
        yield from structural_problems(sub, f"{path}.{name}")
    if isinstance(node.get("items"), Mapping):
        yield from structural_problems(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), Mapping):
        yield from structural_problems(node["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("name", ["nodeslos.slo.colocation.dev", "noderesources.slo.colocation.dev"])
def test_crd_is_structural_documented_and_cluster_scoped(crds: dict[str, dict[str, Any]], name: str) -> None:
    crd = crds[name]
    (version,) = crd["spec"]["versions"]
    assert (crd["spec"]["scope"], version["name"], version["served"], version["storage"]) == (
        "Cluster", "v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    assert list(structural_problems(schema_of(crd), "")) == []


def resolves(schema: Mapping[str, Any], json_path: str) -> bool:
    node: Mapping[str, Any] = schema
    for part in json_path.lstrip(".").split("."):
        if part not in node.get("properties", {}):
            return False
        node = node["properties"][part]
    return True


def test_noderesource_prints_batch_and_mid_resources_and_health(crds: dict[str, dict[str, Any]]) -> None:
    (version,) = crds["noderesources.slo.colocation.dev"]["spec"]["versions"]
    columns = [c for c in version["additionalPrinterColumns"] if c.get("priority", 0) == 0]
    assert [c["name"] for c in columns] == ["BATCH-CPU", "BATCH-MEMORY", "MID-CPU", "MID-MEMORY", "HEALTHY", "AGE"]


@pytest.mark.parametrize("name", ["nodeslos.slo.colocation.dev", "noderesources.slo.colocation.dev"])
def test_printer_columns_point_at_schema_fields(crds: dict[str, dict[str, Any]], name: str) -> None:
    (version,) = crds[name]["spec"]["versions"]
    schema = schema_of(crds[name])
    for column in version["additionalPrinterColumns"]:
        if not column["jsonPath"].startswith(".metadata."):
            assert resolves(schema, column["jsonPath"]), column


def accepts(crd: Mapping[str, Any], obj: Mapping[str, Any]) -> bool:
    return bool(jsonschema.Draft202012Validator(schema_of(crd)).is_valid(obj))


def test_noderesource_schema_bounds(crds: dict[str, dict[str, Any]]) -> None:
    crd = crds["noderesources.slo.colocation.dev"]
    good = {
        "spec": {"disableColocation": False, "cpuReclaimThresholdPercent": 60},
        "status": {"batchCPU": 2500, "batchMemory": 3 * 2**30, "healthy": True, "message": "fresh",
                   "metricUpdateTime": "2026-11-22T00:00:00Z",
                   "conditions": [{"type": "AgentReady", "status": "True", "reason": "LeaseFresh",
                                   "lastTransitionTime": "2026-11-22T00:00:00Z"}]},
    }
    assert accepts(crd, good)
    # Reclaim percentages are bounded only below, as in Koordinator: above 100 is overcommitment.
    assert accepts(crd, {"spec": {"cpuReclaimThresholdPercent": 150, "memoryReclaimThresholdPercent": 120}})
    assert not accepts(crd, {"spec": {"cpuReclaimThresholdPercent": -1}})
    assert not accepts(crd, {"spec": {"memoryReclaimThresholdPercent": -1}})
    assert not accepts(crd, {"status": {"batchCPU": -1}})
    assert not accepts(crd, {"status": {"batchCPU": "2500m"}})
    assert not accepts(crd, {"status": {"conditions": [{"type": "AgentReady", "status": "Maybe"}]}})
    assert not accepts(crd, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    assert not accepts(crd, {"status": {"conditions": [{"status": "True"}]}})


# --- The default configuration ---------------------------------------------------------------------

# Which NodeSLO spec field each ConfigMap key renders into (colocation-config: metricCollectPolicy).
CONFIG_KEY_TO_NODESLO_FIELD = {
    "resource-threshold-config": "resourceUsedThresholdWithBE",
    "cpu-burst-config": "cpuBurstStrategy",
    "system-config": "systemStrategy",
}


@pytest.fixture(scope="module")
def config(rendered: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    configmap = find(rendered, "ConfigMap", permissions.CONFIG_MAP_NAME, permissions.OPERATOR_NAMESPACE)
    return {key: json.loads(value) for key, value in configmap["data"].items()}


def test_every_config_key_is_json_with_a_cluster_strategy(config: dict[str, dict[str, Any]]) -> None:
    assert set(config) >= {"colocation-config", *CONFIG_KEY_TO_NODESLO_FIELD}
    for key, value in config.items():
        assert isinstance(value.get("clusterStrategy"), dict), key
        assert isinstance(value.get("nodeStrategies", []), list), key


def test_colocation_defaults_are_the_designed_ones(config: dict[str, dict[str, Any]]) -> None:
    assert config["colocation-config"]["clusterStrategy"] == {
        "enable": True,
        "metricAggregateDurationSeconds": 300,
        "metricReportIntervalSeconds": 60,
        "metricAggregatePolicy": {"durations": ["5m", "10m", "30m"]},
        "metricMemoryCollectPolicy": "usageWithoutPageCache",
        "cpuReclaimThresholdPercent": 60,
        "cpuCalculatePolicy": "usage",
        "memoryReclaimThresholdPercent": 65,
        "memoryCalculatePolicy": "usage",
        "degradeTimeMinutes": 15,
        "updateTimeThresholdSeconds": 300,
        "resourceDiffThreshold": 0.1,
    }


def test_default_strategies_render_into_a_valid_nodeslo(
    config: dict[str, dict[str, Any]], crds: dict[str, dict[str, Any]]
) -> None:
    colocation = config["colocation-config"]["clusterStrategy"]
    spec = {field: config[key]["clusterStrategy"] for key, field in CONFIG_KEY_TO_NODESLO_FIELD.items()}
    spec["metricCollectPolicy"] = {
        "aggregateDurationSeconds": colocation["metricAggregateDurationSeconds"],
        "reportIntervalSeconds": colocation["metricReportIntervalSeconds"],
        "nodeAggregatePolicy": colocation["metricAggregatePolicy"],
        "nodeMemoryCollectPolicy": colocation["metricMemoryCollectPolicy"],
    }
    crd = crds["nodeslos.slo.colocation.dev"]
    jsonschema.Draft202012Validator(schema_of(crd)).validate({"spec": spec})
    # Every field the defaults set is declared, so none would be pruned by the API server.
    properties = schema_of(crd)["properties"]["spec"]["properties"]
    for field, strategy in spec.items():
        assert set(strategy) <= set(properties[field]["properties"]), field


# --- Pod security and wiring -----------------------------------------------------------------------

# Which strategy model validates each NodeSLO spec field the ConfigMap fills.
NODESLO_FIELD_MODELS: dict[str, type[Strategy]] = {
    "resourceUsedThresholdWithBE": ResourceThresholdStrategy,
    "cpuBurstStrategy": CPUBurstStrategy,
    "systemStrategy": SystemStrategy,
}


def integer_bounds(schema: Mapping[str, Any]) -> tuple[Any, Any]:
    """(minimum, maximum) of an integer schema; an optional field's is in its non-null anyOf branch."""
    for branch in schema.get("anyOf", [schema]):
        if branch.get("type") == "integer":
            return branch.get("minimum"), branch.get("maximum")
    return None, None


@pytest.mark.parametrize("field", sorted(NODESLO_FIELD_MODELS))
def test_nodeslo_schema_bounds_are_the_configmaps(crds: dict[str, dict[str, Any]], field: str) -> None:
    # A value the ConfigMap accepts must fit the NodeSLO, and the other way round.
    crd_properties = schema_of(crds["nodeslos.slo.colocation.dev"])["properties"]["spec"]["properties"][field]
    model_properties = NODESLO_FIELD_MODELS[field].model_json_schema(by_alias=True)["properties"]
    for name, schema in crd_properties["properties"].items():
        if schema.get("type") == "integer":
            crd_minimum, crd_maximum = schema.get("minimum"), schema.get("maximum")
            model_minimum, model_maximum = integer_bounds(model_properties[name])
            assert crd_minimum == model_minimum, name
            assert crd_maximum == (None if model_maximum == 2**63 - 1 else model_maximum), name


def env_of(container: Mapping[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", ())}


def assert_restricted(pod: Mapping[str, Any]) -> None:
    """The Pod Security 'restricted' container rules, for every container."""
    pod_context = pod.get("securityContext", {})
    for container in pod["containers"]:
        context = {**pod_context, **container.get("securityContext", {})}
        assert context.get("runAsNonRoot") is True
        assert context.get("runAsUser") == 65532
        assert context.get("readOnlyRootFilesystem") is True
        assert context.get("allowPrivilegeEscalation") is False
        assert context.get("capabilities", {}).get("drop") == ["ALL"]
        assert not context.get("capabilities", {}).get("add")
        assert context.get("privileged", False) is False
        assert context.get("seccompProfile") == {"type": "RuntimeDefault"}
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(container["resources"][kind]), kind
        assert env_of(container)["TZ"] == "UTC"


def test_operator_pods_are_locked_down_and_probed(rendered: list[dict[str, Any]]) -> None:
    ns = permissions.OPERATOR_NAMESPACE
    deployment = find(rendered, "Deployment", "colocation-operator", ns)
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    assert pod["serviceAccountName"] == permissions.OPERATOR_SERVICE_ACCOUNT
    assert_restricted(pod)
    (container,) = pod["containers"]
    assert container["command"] + container["args"][:3] == ["colocation", "operator", "--namespace", ns]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/livez")):
        get = container[probe]["httpGet"]
        assert (get["path"], get["scheme"], ports.get(get["port"], get["port"])) == (path, "HTTPS", 8443)
    env = env_of(container)
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    # Writable only where an emptyDir is mounted: /tmp.
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
    assert set(mounts) == {"/tmp"} and "emptyDir" in mounts["/tmp"]
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= \
        deployment["spec"]["template"]["metadata"]["labels"].items()


def selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and selector.items() <= labels.items()


def test_service_pdb_and_apiservice_reach_the_operator(rendered: list[dict[str, Any]]) -> None:
    ns = permissions.OPERATOR_NAMESPACE
    deployment = find(rendered, "Deployment", "colocation-operator", ns)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    service = find(rendered, "Service", "colocation-operator", ns)
    assert selects(service["spec"]["selector"], labels)
    (port,) = service["spec"]["ports"]
    assert port["port"] == 443 and port["targetPort"] in {p["name"] for p in container["ports"]}
    pdb = find(rendered, "PodDisruptionBudget", "colocation-operator", ns)
    assert pdb["spec"]["minAvailable"] == 1 and selects(pdb["spec"]["selector"]["matchLabels"], labels)
    api = find(rendered, "APIService", "v1alpha1.metrics.colocation.dev")["spec"]
    assert (api["group"], api["version"]) == (permissions.METRICS_GROUP, "v1alpha1")
    assert api["service"] == {"name": "colocation-operator", "namespace": ns, "port": 443}


def test_every_critical_pod_is_admitted_by_a_quota_in_its_namespace(rendered: list[dict[str, Any]]) -> None:
    """Where critical classes are limited to kube-system unless a quota covers them, our pods still run."""
    ns = permissions.OPERATOR_NAMESPACE
    classes = {kind: find(rendered, kind, name, ns)["spec"]["template"]["spec"].get("priorityClassName")
               for kind, name in (("Deployment", "colocation-operator"), ("DaemonSet", "colocation-agent"))}
    assert classes == {"Deployment": "system-cluster-critical", "DaemonSet": "system-node-critical"}
    covered = {value for quota in rendered if quota["kind"] == "ResourceQuota" and quota["metadata"]["namespace"] == ns
               for expression in quota["spec"]["scopeSelector"]["matchExpressions"]
               if expression["scopeName"] == "PriorityClass" and expression["operator"] == "In"
               for value in expression["values"]}
    assert set(classes.values()) <= covered


def test_agent_reads_the_host_read_only_on_every_node(rendered: list[dict[str, Any]]) -> None:
    daemonset = find(rendered, "DaemonSet", "colocation-agent", permissions.OPERATOR_NAMESPACE)
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == permissions.AGENT_SERVICE_ACCOUNT
    assert_restricted(pod)
    assert not pod.get("hostPID") and not pod.get("hostNetwork")
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert pod["priorityClassName"] == "system-node-critical"
    (container,) = pod["containers"]
    # $(NODE_NAME) in args is expanded by the kubelet only if NODE_NAME is in env.
    assert env_of(container)["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert container["command"] + container["args"][:7] == [
        "colocation", "agent", "--node-name", "$(NODE_NAME)",
        "--proc-root", "/host/proc", "--cgroup-root", "/host/sys/fs/cgroup"]
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounted = {host_paths[m["name"]]: (m["mountPath"], m.get("readOnly", False))
               for m in container["volumeMounts"] if m["name"] in host_paths}
    assert mounted == {"/proc": ("/host/proc", True), "/sys/fs/cgroup": ("/host/sys/fs/cgroup", True)}


# --- RBAC: every declared call allowed, nothing else granted ---------------------------------------

def service_account_user(namespace: str, name: str) -> UserInfo:
    return UserInfo(username=f"system:serviceaccount:{namespace}:{name}",
                    groups=("system:serviceaccounts", f"system:serviceaccounts:{namespace}",
                            "system:authenticated"))


@pytest.fixture(scope="module")
def authorizer(rendered: list[dict[str, Any]]) -> RbacAuthorizer:
    objects = [*rendered, *bootstrap_policy()]

    def of(plural: str) -> list[dict[str, Any]]:
        return [o for o in objects if RBAC_PLURALS.get(o["kind"]) == plural]

    return RbacAuthorizer(of)


def attributes(user: UserInfo, call: ApiCall) -> RequestAttributes:
    return RequestAttributes(user=user, verb=call.verb, api_group=call.group, resource=call.resource,
                             subresource=call.subresource, name=call.name, namespace=call.namespace or "")


@pytest.mark.parametrize("account", [OPERATOR_SA, AGENT_SA], ids=["operator", "agent"])
def test_rbac_allows_every_declared_call(authorizer: RbacAuthorizer, account: tuple[str, str]) -> None:
    user = service_account_user(*account)
    denied = [str(call) for call in DECLARED_CALLS[account]
              if not authorizer.authorize(attributes(user, call)).allowed]
    assert denied == []


def test_rbac_allows_the_operators_non_resource_calls_by_its_own_roles(rendered: list[dict[str, Any]]) -> None:
    """Without Kubernetes' system:service-account-issuer-discovery binding: the manifests suffice."""
    own = RbacAuthorizer(lambda plural: [o for o in rendered if RBAC_PLURALS.get(o["kind"]) == plural])
    user = service_account_user(*OPERATOR_SA)
    denied = [str(call) for call in OPERATOR_NON_RESOURCE_CALLS if not own.authorize(RequestAttributes(
        user=user, verb=call.verb, resource_request=False, path=call.path)).allowed]
    assert denied == []


Grant = tuple[tuple[str, str], str | None, dict[str, Any], str]


def grants(rendered: list[dict[str, Any]]) -> Iterator[Grant]:
    """(service account, namespace scope, rule, binding) for every rule our own roles grant."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
             for o in rendered if o["kind"] in ("Role", "ClusterRole")}
    delegated = {("ClusterRole", None, permissions.DELEGATION_CLUSTER_ROLE),
                 ("Role", "kube-system", permissions.DELEGATION_ROLE)}
    for binding in rendered:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        scope = binding["metadata"].get("namespace")
        ref = binding["roleRef"]
        key = (ref["kind"], scope if ref["kind"] == "Role" else None, ref["name"])
        subjects = [(s.get("namespace"), s["name"]) for s in binding["subjects"]]
        assert all(s["kind"] == "ServiceAccount" for s in binding["subjects"]), binding["metadata"]["name"]
        if key in delegated:
            # Kubernetes' own roles for aggregated API servers: the operator only.
            assert subjects == [OPERATOR_SA], binding["metadata"]["name"]
            continue
        assert key in roles, f"{binding['metadata']['name']} binds {key}, which is not in manifests/"
        for account in subjects:
            for rule in roles[key]["rules"]:
                yield account, scope, rule, binding["metadata"]["name"]


def test_rbac_grants_nothing_beyond_the_declared_calls(rendered: list[dict[str, Any]]) -> None:
    unused = []
    for account, scope, rule, binding in grants(rendered):
        assert account in DECLARED_CALLS, f"{binding} binds an unknown subject {account}"
        if "nonResourceURLs" in rule:
            declared_paths = {call.path for call in OPERATOR_NON_RESOURCE_CALLS} if account == OPERATOR_SA else set()
            unused += [f"{binding} grants {account[1]} {verb} {path}" for path in rule["nonResourceURLs"]
                       for verb in rule["verbs"] if verb != "get" or path not in declared_paths or scope]
            continue
        calls = DECLARED_CALLS[account]
        names = rule.get("resourceNames") or [""]
        for group in rule["apiGroups"]:
            for resource, _, subresource in (r.partition("/") for r in rule["resources"]):
                for verb in rule["verbs"]:
                    for name in names:
                        call = ApiCall(group=group, resource=resource, verb=verb, namespace=scope,
                                       subresource=subresource, name=name)
                        if call not in calls:
                            unused.append(f"{binding} grants {account[1]} {call}")
    assert unused == []


@pytest.mark.parametrize(("account", "call"), [
    # A node agent must not be able to steal capacity, evict pods or take over leadership.
    (AGENT_SA, ApiCall(group="", resource="nodes", verb="patch", namespace=None, subresource="status")),
    (AGENT_SA, ApiCall(group="", resource="pods", verb="create", namespace="default", subresource="eviction")),
    (AGENT_SA, ApiCall(group="coordination.k8s.io", resource="leases", verb="update", namespace="colocation-system",
                       name="colocation-operator")),
    (AGENT_SA, ApiCall(group="slo.colocation.dev", resource="noderesources", verb="update", namespace=None,
                       subresource="status")),
    (AGENT_SA,
     ApiCall(group="", resource="configmaps", verb="get", namespace="colocation-system", name="colocation-config")),
    # The operator must not be able to forge heartbeats, read secrets, or write other leases.
    (OPERATOR_SA, ApiCall(group="coordination.k8s.io", resource="leases", verb="update",
                          namespace="colocation-node-lease", name="node-1")),
    (OPERATOR_SA, ApiCall(group="", resource="secrets", verb="get", namespace="colocation-system")),
    (OPERATOR_SA, ApiCall(group="coordination.k8s.io", resource="leases", verb="update", namespace="colocation-system",
                          name="other")),
    (OPERATOR_SA, ApiCall(group="", resource="configmaps", verb="get", namespace="default")),
    (OPERATOR_SA, ApiCall(group="", resource="nodes", verb="delete", namespace=None)),
    (OPERATOR_SA, ApiCall(group="", resource="pods", verb="delete", namespace="default")),
], ids=str)
def test_rbac_denies_what_a_compromised_pod_could_abuse(
    authorizer: RbacAuthorizer, account: tuple[str, str], call: ApiCall
) -> None:
    assert not authorizer.authorize(attributes(service_account_user(*account), call)).allowed


# --- The opt-in resource-metrics component (kubectl top without metrics-server) ---------------------

@pytest.fixture(scope="module")
def with_resource_metrics() -> list[dict[str, Any]]:
    """manifests/ with components/resource-metrics, through an overlay as docs/install.md shows."""
    if KUBECTL is None:
        pytest.skip("no kubectl (neither built by hack/kube/build.sh nor on the PATH): manifests/ cannot be rendered")
    from colocation_sandbox.launcher.project_install import render_manifests

    return render_manifests(REPO, components=("resource-metrics",))


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_resource_metrics_component_renders_valid_kubernetes(
    with_resource_metrics: list[dict[str, Any]], version: str
) -> None:
    for obj in with_resource_metrics:
        kubernetes_validate.validate(obj, version, strict=True)
        assert obj["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") == "colocation", obj["metadata"]


def operator_args(objects: list[dict[str, Any]]) -> list[str]:
    deployment = find(objects, "Deployment", "colocation-operator", permissions.OPERATOR_NAMESPACE)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return list(container["args"])


def test_the_component_registers_metrics_k8s_io_and_turns_the_flag_on(
    rendered: list[dict[str, Any]], with_resource_metrics: list[dict[str, Any]]
) -> None:
    from colocation.manager.operator_command import operator_command

    flag = "--serve-resource-metrics"
    assert flag not in operator_args(rendered)
    assert operator_args(with_resource_metrics) == [*operator_args(rendered), flag]
    assert flag in {option for param in operator_command.params for option in param.opts}
    api = find(with_resource_metrics, "APIService", "v1beta1.metrics.k8s.io")["spec"]
    assert (api["group"], api["version"]) == ("metrics.k8s.io", "v1beta1")
    assert api["service"] == {"name": "colocation-operator", "namespace": permissions.OPERATOR_NAMESPACE, "port": 443}
    # Everything else is the base, unchanged.
    added = [o for o in with_resource_metrics if o not in rendered and o["kind"] != "Deployment"]
    assert sorted((o["kind"], o["metadata"]["name"]) for o in added) == [
        ("APIService", "v1beta1.metrics.k8s.io"), ("ClusterRole", "colocation:aggregated-metrics-reader")]


def test_the_component_lets_viewers_read_metrics_and_grants_the_operator_nothing_new(
    rendered: list[dict[str, Any]], with_resource_metrics: list[dict[str, Any]]
) -> None:
    reader = find(with_resource_metrics, "ClusterRole", "colocation:aggregated-metrics-reader")
    for role in ("view", "edit", "admin"):
        assert reader["metadata"]["labels"][f"rbac.authorization.k8s.io/aggregate-to-{role}"] == "true"
    assert reader["rules"] == [{"apiGroups": ["metrics.k8s.io"], "resources": ["nodes", "pods"],
                                "verbs": ["get", "list"]}]
    assert sorted(map(str, grants(with_resource_metrics))) == sorted(map(str, grants(rendered)))


# --- The opt-in enforcement component (the agent writes cgroups) ------------------------------------

@pytest.fixture(scope="module")
def with_enforcement() -> list[dict[str, Any]]:
    """manifests/ with components/enforcement, through an overlay as docs/install.md shows."""
    if KUBECTL is None:
        pytest.skip("no kubectl (neither built by hack/kube/build.sh nor on the PATH): manifests/ cannot be rendered")
    from colocation_sandbox.launcher.project_install import render_manifests

    return render_manifests(REPO, components=("enforcement",))


def agent_container(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    daemonset = find(objects, "DaemonSet", "colocation-agent", permissions.OPERATOR_NAMESPACE)
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod, container


def test_the_default_agent_only_computes_enforcement(rendered: list[dict[str, Any]]) -> None:
    from colocation.agent.agent_command import agent_command

    _, container = agent_container(rendered)
    assert env_of(container)["COLOCATION_DRY_RUN_ENFORCEMENT"] == "true"
    envvars = {param.envvar for param in agent_command.params}
    assert {"COLOCATION_DRY_RUN_ENFORCEMENT", "COLOCATION_RESTORE_ON_EXIT"} <= envvars


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_enforcement_component_renders_valid_kubernetes(with_enforcement: list[dict[str, Any]],
                                                            version: str) -> None:
    for obj in with_enforcement:
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_enforcement_component_gives_the_agent_root_and_a_writable_cgroup_mount_only(
    rendered: list[dict[str, Any]], with_enforcement: list[dict[str, Any]]
) -> None:
    pod, container = agent_container(with_enforcement)
    env = env_of(container)
    assert (env["COLOCATION_DRY_RUN_ENFORCEMENT"], env["COLOCATION_RESTORE_ON_EXIT"]) == ("false", "true")
    mounts = {m["mountPath"]: m.get("readOnly", False) for m in container["volumeMounts"]}
    assert mounts["/host/sys/fs/cgroup"] is False and mounts["/host/proc"] is True
    context = {**pod["securityContext"], **container["securityContext"]}
    assert (context["runAsUser"], context["runAsNonRoot"]) == (0, False)
    # Root, but nothing more: no capability, no escalation, no privileged container, read-only root fs.
    assert context["capabilities"] == {"drop": ["ALL"]} and context["allowPrivilegeEscalation"] is False
    assert not context.get("privileged") and context["readOnlyRootFilesystem"] is True
    # Everything but the DaemonSet is the base, unchanged.
    assert [o for o in with_enforcement if o["kind"] != "DaemonSet"] == \
        [o for o in rendered if o["kind"] != "DaemonSet"]


def test_the_enforcement_component_mounts_writable_only_the_cgroups_and_proc_sys_vm(
    with_enforcement: list[dict[str, Any]]
) -> None:
    from colocation.agent.agent_command import agent_command

    pod, container = agent_container(with_enforcement)
    writable = sorted(m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly", False))
    assert writable == ["/host/proc/sys/vm", "/host/sys/fs/cgroup", "/tmp"]
    volume = next(v for v in pod["volumes"] if v["name"] == "host-proc-sys-vm")
    assert volume["hostPath"] == {"path": "/proc/sys/vm", "type": "Directory"}
    # System settings stay off unless an overlay turns them on: the NodeSLO always carries values.
    assert "COLOCATION_SYSTEM_SETTINGS" not in env_of(container)
    assert "COLOCATION_SYSTEM_SETTINGS" in {param.envvar for param in agent_command.params}


def test_agents_are_held_to_their_own_nodes_lease(rendered: list[dict[str, Any]]) -> None:
    """The policy names the agents' ServiceAccount and Lease namespace as the code does, and is bound."""
    policy = find(rendered, "ValidatingAdmissionPolicy", "colocation-agent-own-lease")["spec"]
    binding = find(rendered, "ValidatingAdmissionPolicyBinding", "colocation-agent-own-lease")["spec"]
    assert binding == {"policyName": "colocation-agent-own-lease", "validationActions": ["Deny"]}
    assert policy["failurePolicy"] == "Fail"
    assert policy["matchConstraints"]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": permissions.NODE_LEASE_NAMESPACE}
    [condition] = policy["matchConditions"]
    account = f"system:serviceaccount:{permissions.OPERATOR_NAMESPACE}:{permissions.AGENT_SERVICE_ACCOUNT}"
    assert condition["expression"] == f"request.userInfo.username == '{account}'"
    [rule] = policy["validations"]
    assert f"request.userInfo.extra['{NODE_NAME_EXTRA}']" in rule["expression"]
    assert "request.name" in rule["expression"]
