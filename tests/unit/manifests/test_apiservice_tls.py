"""The install's APIServices are verified: none skips TLS verification, none carries a bundle
of its own (the operator patches it in), and the operator may patch exactly those that exist."""

from __future__ import annotations

from pathlib import Path

import pytest

from colocation.kube import permissions
from colocation_sandbox.launcher.controlplane.binaries import kubectl_binary
from colocation_sandbox.launcher.project_install import render_manifests

REPO = Path(__file__).resolve().parents[3]
COMPONENTS = tuple(sorted(p.name for p in (REPO / "manifests" / "components").iterdir() if p.is_dir()))


def test_no_apiservice_skips_verification_and_the_operator_may_patch_each() -> None:
    if kubectl_binary() is None:
        pytest.skip("no kubectl (neither built by hack/kube/build.sh nor on the PATH): manifests/ cannot be rendered")
    rendered = render_manifests(REPO, components=COMPONENTS)
    apiservices = {o["metadata"]["name"]: o["spec"] for o in rendered if o["kind"] == "APIService"}
    assert "v1alpha1.metrics.colocation.dev" in apiservices
    for name, spec in apiservices.items():
        assert "insecureSkipTLSVerify" not in spec and "caBundle" not in spec, name
        assert spec["service"] == {"namespace": permissions.OPERATOR_NAMESPACE, "name": "colocation-operator",
                                   "port": 443}, name
    # Every one of them, and nothing else: RBAC names exactly these (test_manifests checks the RBAC).
    assert set(apiservices) == set(permissions.OPERATOR_APISERVICES)
