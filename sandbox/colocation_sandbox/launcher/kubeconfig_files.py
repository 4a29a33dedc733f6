"""Kubeconfigs the launchers write: the admin's, and each child's with its own credentials."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml


def kubeconfig_document(server: str, ca_pem: bytes, *, name: str, user: str, token: str | None = None,
                        client: tuple[str, str] | None = None, namespace: str = "default") -> dict[str, Any]:
    """A kubeconfig document with either a bearer token or a client certificate (embedded)."""
    credentials: dict[str, str] = {}
    if token is not None:
        credentials["token"] = token
    if client is not None:
        credentials["client-certificate-data"] = base64.b64encode(Path(client[0]).read_bytes()).decode()
        credentials["client-key-data"] = base64.b64encode(Path(client[1]).read_bytes()).decode()
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": name, "preferences": {},
        "clusters": [{"name": name, "cluster": {
            "server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": user, "namespace": namespace}}],
    }


def write_kubeconfig(path: Path, document: dict[str, Any]) -> Path:
    """Write it owner-only, in one step (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(yaml.safe_dump(document, sort_keys=False))
    tmp.chmod(0o600)
    tmp.replace(path)
    return path
