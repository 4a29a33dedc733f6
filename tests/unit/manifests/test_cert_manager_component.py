"""manifests/components/cert-manager: the operator serves the Certificate's Secret, and every
APIService asks cainjector for that Certificate's CA. Rendered only: not run against cert-manager."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import kubernetes_validate
import pytest

from colocation.kube import permissions
from colocation.manager.operator_command import operator_command
from colocation_sandbox.launcher.project_install import render_manifests
from tests.unit.manifests.test_manifests import KUBECTL, KUBERNETES_VERSIONS, REPO, find, operator_args

# cert-manager's listed last, as its kustomization says: it annotates the others' APIServices too.
COMPONENTS = ("resource-metrics", "custom-metrics", "cert-manager")
SERVICE_DNS = f"colocation-operator.{permissions.OPERATOR_NAMESPACE}.svc"  # what kube-apiserver verifies


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed, so manifests/ cannot be rendered with kustomize")
    return render_manifests(REPO, components=COMPONENTS)


def test_every_apiservice_injects_the_ca_of_the_serving_certificate(rendered: list[dict[str, Any]]) -> None:
    apiservices = [o for o in rendered if o["kind"] == "APIService"]
    assert {a["metadata"]["name"] for a in apiservices} == set(permissions.OPERATOR_APISERVICES)
    for apiservice in apiservices:
        source = apiservice["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        namespace, _, name = source.partition("/")
        certificate = find(rendered, "Certificate", name, namespace)
        assert SERVICE_DNS in certificate["spec"]["dnsNames"]
        assert "server auth" in certificate["spec"]["usages"]
        assert "insecureSkipTLSVerify" not in apiservice["spec"] and "caBundle" not in apiservice["spec"]


def test_the_operator_serves_the_certificates_secret(rendered: list[dict[str, Any]]) -> None:
    args = dict(arg.split("=", 1) for arg in operator_args(rendered) if arg.startswith("--tls-"))
    known = {opt for param in operator_command.params for opt in param.opts}
    assert set(args) == {"--tls-cert-file", "--tls-key-file", "--tls-ca-file"} <= known
    pod = find(rendered, "Deployment", "colocation-operator", permissions.OPERATOR_NAMESPACE)["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    serving = find(rendered, "Certificate", "colocation-operator-serving", permissions.OPERATOR_NAMESPACE)
    for path in args.values():
        volume = volumes[mounts[str(PurePosixPath(path).parent)]]
        assert volume["secret"]["secretName"] == serving["spec"]["secretName"]
    # cert-manager's Secret keys: tls.crt, tls.key and ca.crt.
    assert sorted(PurePosixPath(p).name for p in args.values()) == ["ca.crt", "tls.crt", "tls.key"]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_patched_kubernetes_objects_stay_valid(rendered: list[dict[str, Any]], version: str) -> None:
    for obj in rendered:
        if not obj["apiVersion"].startswith("cert-manager.io/"):  # no schemas here for cert-manager's kinds
            kubernetes_validate.validate(obj, version, strict=True)
