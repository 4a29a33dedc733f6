"""charts/colocation installs what manifests/ installs, its values change what they say, bad ones fail.

The reference is `kubectl kustomize manifests/` (with the matching components): the chart must
render the same objects with the same contents, Helm's own labels aside, so the two install paths
cannot drift apart.
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from colocation_sandbox.launcher.controlplane.binaries import kubectl_binary
from colocation_sandbox.launcher.project_install import render_manifests
from tests.unit.charts.helm_chart import CHART, REPO, helm, render, set_args

# Labels Helm adds and kustomize does not; every other label must be the same.
HELM_LABELS = ("app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "helm.sh/chart")
# Each feature value and the kustomize component it stands for.
FEATURES = {"features.resourceMetrics": "resource-metrics", "features.customMetrics": "custom-metrics",
            "features.nodeQoSEnforcement": "enforcement"}
# The values that stand for the nats-store component: the operator on NATS JetStream, and its servers.
NATS_STORE = {"store.type": "nats", "store.nats.deploy": True}
ObjectKey = tuple[str, str | None, str]
# What only the chart installs, and why: helm's post-delete hook that runs `colocation cleanup`
# (test_cleanup_hook checks it; kubectl users run the command themselves, docs/install.md "Uninstall").
CHART_ONLY: frozenset[ObjectKey] = frozenset({
    ("ServiceAccount", "default", "colocation-cleanup"), ("ClusterRole", None, "colocation-cleanup"),
    ("ClusterRoleBinding", None, "colocation-cleanup"), ("Job", "default", "colocation-cleanup")})


def kustomized(components: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    if kubectl_binary() is None:
        pytest.skip("no kubectl (neither built by hack/kube/build.sh nor on the PATH): manifests/ cannot be rendered")
    return render_manifests(REPO, components=components)


def comparable(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without Helm's labels, with lists whose order means nothing sorted by name."""
    obj = copy.deepcopy(obj)
    labels = obj["metadata"].get("labels", {})
    for label in HELM_LABELS:
        labels.pop(label, None)
    for pod in pod_specs(obj):
        pod["volumes"] = sorted(pod.get("volumes", []), key=lambda entry: entry["name"])  # the same, for volumes
        for container in pod["containers"]:
            for field in ("env", "volumeMounts"):  # a strategic merge patch moves entries it adds or changes
                container[field] = sorted(container.get(field, []), key=lambda entry: entry["name"])
    return obj


def pod_specs(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if obj["kind"] in ("Deployment", "DaemonSet"):
        yield obj["spec"]["template"]["spec"]


def by_key(objects: list[dict[str, Any]]) -> dict[ObjectKey, dict[str, Any]]:
    keyed = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): comparable(o) for o in objects}
    assert len(keyed) == len(objects), "two objects of one kind, namespace and name"
    return keyed


def assert_same_install(chart: list[dict[str, Any]], manifests: list[dict[str, Any]]) -> None:
    ours, theirs = by_key(chart), by_key(manifests)
    assert ours.keys() >= CHART_ONLY, "the chart-only objects are gone: update CHART_ONLY"
    ours = {key: obj for key, obj in ours.items() if key not in CHART_ONLY}
    assert sorted(ours.keys(), key=str) == sorted(theirs.keys(), key=str)
    differing = [key for key in theirs if ours[key] != theirs[key]]
    assert [ours[key] for key in differing] == [theirs[key] for key in differing], differing


def test_default_values_render_what_manifests_install(helm_path: str) -> None:
    assert_same_install(render(helm_path), kustomized())


@pytest.mark.parametrize("feature", FEATURES)
def test_each_feature_adds_exactly_its_component(helm_path: str, feature: str) -> None:
    chart = render(helm_path, {feature: True})
    assert_same_install(chart, kustomized((FEATURES[feature],)))
    assert by_key(chart) != by_key(render(helm_path)), f"{feature} changes nothing"


def test_the_deployed_nats_store_is_the_nats_store_component(helm_path: str) -> None:
    chart = render(helm_path, NATS_STORE)
    assert_same_install(chart, kustomized(("nats-store",)))
    assert ("StatefulSet", "colocation-system", "colocation-nats") in by_key(chart)


def test_every_feature_at_once_is_every_component(helm_path: str) -> None:
    chart = render(helm_path, {**dict.fromkeys(FEATURES, True), **NATS_STORE})
    assert_same_install(chart, kustomized((*FEATURES.values(), "nats-store")))


def test_every_helm_labelled_object_carries_the_release(helm_path: str) -> None:
    """What `helm uninstall` and `kubectl get -l app.kubernetes.io/instance=...` find."""
    for obj in render(helm_path, {**dict.fromkeys(FEATURES, True), **NATS_STORE}):
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == "colocation", obj["metadata"]["name"]
        assert labels["app.kubernetes.io/part-of"] == "colocation", obj["metadata"]["name"]


def test_the_charts_crds_are_crds_verbatim() -> None:
    ours = {path.name: path.read_bytes() for path in sorted((CHART / "crds").glob("*"))}
    theirs = {path.name: path.read_bytes() for path in sorted((REPO / "crds").glob("*"))}
    assert ours.keys() == theirs.keys()
    assert [name for name in ours if ours[name] != theirs[name]] == []


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def container(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    containers: list[dict[str, Any]] = find(objects, kind, name)["spec"]["template"]["spec"]["containers"]
    return containers[0]


def test_values_reach_the_workloads(helm_path: str) -> None:
    objects = render(helm_path, {
        "image.repository": "registry.example.com/team/colocation", "image.tag": "v0.1.0",
        "image.pullPolicy": "Always", "operator.replicas": 3,
        "operator.resources.limits.memory": "4Gi", "agent.resources.requests.cpu": "100m",
        "agent.nodeSelector.pool": "batch", "agent.tolerations[0].key": "dedicated",
        "agent.tolerations[0].operator": "Equal", "agent.tolerations[0].value": "batch",
        "agent.tolerations[0].effect": "NoSchedule"})
    operator = find(objects, "Deployment", "colocation-operator")
    agent = find(objects, "DaemonSet", "colocation-agent")
    assert operator["spec"]["replicas"] == 3
    for kind, name in (("Deployment", "colocation-operator"), ("DaemonSet", "colocation-agent")):
        assert container(objects, kind, name)["image"] == "registry.example.com/team/colocation:v0.1.0"
        assert container(objects, kind, name)["imagePullPolicy"] == "Always"
    assert container(objects, "Deployment", "colocation-operator")["resources"]["limits"] == {
        "cpu": "2", "memory": "4Gi"}
    assert container(objects, "DaemonSet", "colocation-agent")["resources"]["requests"] == {
        "cpu": "100m", "memory": "64Mi"}
    assert agent["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "batch"}
    assert agent["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}]


def test_system_settings_are_off_unless_asked_for(helm_path: str) -> None:
    def env(values: dict[str, object]) -> dict[str, str]:
        agent = container(render(helm_path, values), "DaemonSet", "colocation-agent")
        return {entry["name"]: entry.get("value") for entry in agent["env"]}

    assert "COLOCATION_SYSTEM_SETTINGS" not in env({"features.nodeQoSEnforcement": True})
    assert env({"features.nodeQoSEnforcement": True, "agent.systemSettings": True})[
        "COLOCATION_SYSTEM_SETTINGS"] == "true"


def test_lease_timings_become_the_operators_flags(helm_path: str) -> None:
    objects = render(helm_path, {"operator.leaderElection.leaseDuration": 30,
                                 "operator.leaderElection.renewDeadline": 20.5,
                                 "operator.leaderElection.retryPeriod": 4})
    args = container(objects, "Deployment", "colocation-operator")["args"]
    assert args[-6:] == ["--lease-duration", "30", "--renew-deadline", "20.5", "--retry-period", "4"]
    # One given alone is checked against the operator's defaults for the others (10, 2).
    args = container(render(helm_path, {"operator.leaderElection.leaseDuration": 12}),
                     "Deployment", "colocation-operator")["args"]
    assert args[-2:] == ["--lease-duration", "12"] and "--renew-deadline" not in args


@pytest.mark.parametrize(("values", "message"), [
    ({"operator.replicas": 0}, "at '/operator/replicas': minimum: got 0, want 1"),
    ({"image.pullPolicy": "Sometimes"}, "at '/image/pullPolicy'"),
    ({"features.customMetric": True}, "additional properties 'customMetric' not allowed"),
    ({"features.customMetrics": "yes"}, "at '/features/customMetrics'"),
    ({"operator.resources.limits.memory": "lots"}, "at '/operator/resources/limits/memory'"),
    ({"agent.tolerations[0].operator": "Sometimes"}, "at '/agent/tolerations/0/operator'"),
    ({"agent.systemSettings": "yes"}, "at '/agent/systemSettings'"),
    ({"operator.leaderElection.retryPeriod": 0}, "at '/operator/leaderElection/retryPeriod'"),
    ({"operator.leaderElection.leaseDuration": 8},
     "operator.leaderElection: need leaseDuration > renewDeadline > retryPeriod, got 8 > 10 > 2"),
], ids=lambda value: str(value) if isinstance(value, dict) else "")
def test_bad_values_fail_naming_the_value(helm_path: str, values: dict[str, object], message: str) -> None:
    result = helm(helm_path, "template", "colocation", str(CHART), *set_args(values), check=False)
    assert result.returncode != 0 and result.stdout == ""
    assert message in result.stderr, result.stderr


def test_the_release_namespace_cannot_be_one_the_chart_creates(helm_path: str) -> None:
    result = helm(helm_path, "template", "colocation", str(CHART), "--namespace", "colocation-system", check=False)
    assert result.returncode != 0
    assert "install the release into another namespace (e.g. --namespace default), not colocation-system" \
        in result.stderr, result.stderr


@pytest.mark.parametrize("features", [{}, {**dict.fromkeys(FEATURES, True), **NATS_STORE}],
                         ids=["defaults", "every-feature"])
def test_helm_lint_is_clean(helm_path: str, features: dict[str, object]) -> None:
    result = helm(helm_path, "lint", "--strict", str(CHART), *set_args(features))
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout, result.stdout


def test_the_charts_app_version_is_the_packages() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
