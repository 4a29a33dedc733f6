"""How the real agent reaches kube-apiserver: straight over aiohttp when it can, else kubernetes-asyncio.

In a pod (KUBERNETES_SERVICE_HOST/PORT, the ServiceAccount's ca.crt and token, read again when
the kubelet rotates it), or with a kubeconfig whose current context has only an https server, its
CA and a bearer token, the agent connects itself. Any other configuration goes through
kubernetes-asyncio, with its messages: what worked still works, the same way.

Why: docs/agent.md#reaching-kube-apiserver
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import logging
import os
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import yaml

from colocation.agent.kubeapi import ApiClientKube, KubeApi, SessionKube
from colocation.apimachinery.trust import trusting

log = logging.getLogger(__name__)

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_CLUSTER_KEYS = {"server", "certificate-authority", "certificate-authority-data"}
_USER_KEYS = {"token"}
_CONTEXT_KEYS = {"cluster", "user", "namespace"}


@dataclass(frozen=True)
class DirectConfig:
    """An https server, the CA bundle that signed its certificate, and where the bearer token comes from."""

    server: str
    ca_pem: bytes
    token: Callable[[], str]


class TokenFile:
    """A token file read again when it changes (the kubelet replaces a projected token before it expires)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, str] | None = None

    def __call__(self) -> str:
        try:
            changed = self.path.stat().st_mtime_ns
        except OSError:  # between the kubelet's rename and the new file: keep the last token
            return self._seen[1] if self._seen else ""
        if self._seen is None or self._seen[0] != changed:
            with contextlib.suppress(OSError):
                self._seen = (changed, self.path.read_text().strip())
        return self._seen[1] if self._seen else ""


def _constant(token: str) -> Callable[[], str]:
    return lambda: token


def in_cluster(environ: Mapping[str, str], service_account: Path = SERVICE_ACCOUNT) -> DirectConfig | None:
    """The pod's service account, as kubernetes-asyncio's in-cluster configuration finds it; None if incomplete."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get("KUBERNETES_SERVICE_PORT", "")
    token, ca = service_account / "token", service_account / "ca.crt"
    try:
        if not (host and port and token.read_text().strip()):
            return None
        ca_pem = ca.read_bytes()
    except OSError:
        return None
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    return DirectConfig(f"https://{host}:{port}", ca_pem, TokenFile(token))


def from_kubeconfig(path: Path) -> DirectConfig | None:
    """The current context of a plain kubeconfig (server, CA, token); None for anything more, or unreadable."""
    try:
        document = yaml.safe_load(path.read_text())
        named = {kind: {str(entry["name"]): entry[kind[:-1]] for entry in document.get(kind) or []}
                 for kind in ("clusters", "users", "contexts")}
        context = named["contexts"][document["current-context"]]
        cluster, user = named["clusters"][context["cluster"]], named["users"][context["user"]]
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError):
        return None
    if not (isinstance(context, dict) and isinstance(cluster, dict) and isinstance(user, dict)) \
            or set(context) - _CONTEXT_KEYS or set(cluster) - _CLUSTER_KEYS or set(user) != _USER_KEYS:
        return None
    server = str(cluster.get("server") or "")
    if urllib.parse.urlsplit(server).scheme != "https" or not isinstance(user["token"], str) or not user["token"]:
        return None
    try:
        if "certificate-authority-data" in cluster:
            ca_pem = base64.b64decode(str(cluster["certificate-authority-data"]), validate=True)
        elif "certificate-authority" in cluster:
            ca_pem = (path.parent / os.path.expanduser(str(cluster["certificate-authority"]))).read_bytes()
        else:
            return None  # the system's trust store: left to kubernetes-asyncio
    except (OSError, ValueError):
        return None
    return DirectConfig(server.rstrip("/"), ca_pem, _constant(user["token"]))


def direct_config(kubeconfig: Path | None, environ: Mapping[str, str] = os.environ,
                  service_account: Path = SERVICE_ACCOUNT) -> DirectConfig | None:
    """Where and how to connect without kubernetes-asyncio, in the order it would look; None: use it."""
    if urllib.request.getproxies_environment().get("https"):
        return None  # proxies (and their exceptions) are kubernetes-asyncio's to honour
    if kubeconfig is None:
        pod = in_cluster(environ, service_account)
        if pod is not None:
            return pod
        if environ.get("KUBERNETES_SERVICE_HOST"):
            return None  # in a pod, but not as expected: kubernetes-asyncio says why
        default = environ.get("KUBECONFIG", "~/.kube/config")
        if os.pathsep in default:
            return None
        kubeconfig = Path(os.path.expanduser(default))
    return from_kubeconfig(kubeconfig)


@contextlib.asynccontextmanager
async def agent_api(kubeconfig: Path | None) -> AsyncIterator[KubeApi]:
    """The agent's KubeApi for `kubeconfig` (else in-cluster, else the default kubeconfig), closed on exit.

    Raises colocation.kube.client.KubeConfigError, as before, when kubernetes-asyncio finds no way in.
    """
    direct = direct_config(kubeconfig)
    if direct is None:
        from colocation.kube.client import api_client

        async with await api_client(kubeconfig) as api:
            log.info("reaching the API server through kubernetes-asyncio")
            yield ApiClientKube(api)
        return
    # Requests and watches in pools of their own: a watch holds its connection for minutes.
    async with aiohttp.ClientSession() as requests, aiohttp.ClientSession() as watches:
        log.info("reaching the API server directly", extra={"server": direct.server})
        yield SessionKube(requests, direct.server, trusting(direct.ca_pem), token=direct.token, watch_session=watches)

