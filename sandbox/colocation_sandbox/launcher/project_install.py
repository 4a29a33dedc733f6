"""Installing the project into a sandbox: its CRDs and the rendered install manifests."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from colocation_sandbox.launcher.builtin_sandbox import Sandbox
from colocation_sandbox.launcher.child_processes import run
from colocation_sandbox.launcher.controlplane.binaries import kubectl_binary
from colocation_sandbox.server.admission import admit

log = logging.getLogger(__name__)


def project_root(start: Path | None = None) -> Path | None:
    """The source tree holding crds/ and manifests/, when running from a checkout."""
    here = (start or Path(__file__)).resolve()
    for candidate in here.parents:
        if (candidate / "crds").is_dir() and (candidate / "manifests" / "kustomization.yaml").is_file():
            return candidate
    return None


def render_manifests(root: Path, timeout: float = 60.0, *, components: tuple[str, ...] = (),
                     kubectl: str | None = None) -> list[dict[str, Any]]:
    """`kubectl kustomize manifests/`, parsed. kubectl carries kustomize; nothing else does here.

    `components` names optional kustomize components (manifests/components/NAME), rendered
    through an overlay as a user would enable them. kubectl is the one given, else the one the
    project builds (hack/kube/build.sh), else the one on the PATH.
    """
    kubectl = kubectl or kubectl_binary()
    if kubectl is None:
        raise RuntimeError("kubectl is needed to render manifests/ (kustomize): build it with "
                           "hack/kube/build.sh (needs Go), install it, or use --api-only")
    with tempfile.TemporaryDirectory(prefix="colocation-overlay-") as overlay:
        target = root / "manifests"
        if components:
            # kustomize refuses absolute paths: the overlay names the base relative to itself.
            base = os.path.relpath(target, overlay)
            (Path(overlay) / "kustomization.yaml").write_text(yaml.safe_dump({
                "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": [base],
                "components": [f"{base}/components/{name}" for name in components]}))
            target = Path(overlay)
        result = run([kubectl, "kustomize", str(target)], timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"kubectl kustomize manifests/ failed: {result.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def load_crds(root: Path) -> list[dict[str, Any]]:
    return [doc for path in sorted((root / "crds").glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]


def install_project(sandbox: Sandbox, root: Path | None = None, *, with_apiservice: bool = True,
                    components: tuple[str, ...] = ()) -> None:
    """Create the CRDs, then every manifest object, as `kubectl apply` would on a fresh cluster.

    Without operator replicas to serve it, the metrics APIService is left out: an APIService with
    no backend makes every kubectl discovery print errors, as it would on a real cluster.
    `components` are optional kustomize components to include (e.g. "resource-metrics").
    """
    root = root or project_root()
    if root is None:
        raise RuntimeError("cannot find the project's crds/ and manifests/ (run from a source checkout, "
                           "or use --api-only)")
    api = sandbox.api
    objects = load_crds(root) + render_manifests(root, components=components)
    installed = 0
    for obj in objects:
        if obj["kind"] == "APIService" and not with_apiservice:
            log.info("APIService not registered: no operator replicas run",
                     extra={"apiservice": obj["metadata"]["name"]})
            continue
        rt = api.registry.by_kind(obj["apiVersion"], obj["kind"])
        if rt is None:
            raise RuntimeError(f'{obj["kind"]} {obj["metadata"]["name"]}: its kind is not served by the sandbox')
        namespace = obj["metadata"].get("namespace", "")
        if rt.namespaced and not namespace:
            obj = {**obj, "metadata": {**obj["metadata"], "namespace": "default"}}
        admitted, _ = admit(rt, obj, "Strict", creating=True)  # the defaults and checks an HTTP create would get
        api.store.create(rt, admitted)
        installed += 1
    log.info("project installed into the sandbox", extra={"objects": installed})
