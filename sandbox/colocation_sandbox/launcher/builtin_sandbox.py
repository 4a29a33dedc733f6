"""The builtin API server on loopback HTTPS: TLS, bootstrap objects, the kubeconfig it writes."""

from __future__ import annotations

import logging
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from colocation.apimachinery import certificates
from colocation.apimachinery.clock import WallClock, now
from colocation_sandbox.launcher.kubeconfig_files import kubeconfig_document, write_kubeconfig
from colocation_sandbox.server.admission import new_namespace
from colocation_sandbox.server.api_aggregator import Aggregator, authentication_configmap
from colocation_sandbox.server.api_server import ApiServer
from colocation_sandbox.server.builtin_controllers import Controllers
from colocation_sandbox.server.rbac_bootstrap import bootstrap_policy

log = logging.getLogger(__name__)

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
ADMIN_USER = "sandbox-admin"


@dataclass(frozen=True, kw_only=True)
class SandboxConfig:
    host: str = "127.0.0.1"
    port: int = 0  # 0: any free port
    state_dir: Path = Path(".sandbox")
    kubeconfig_out: Path | None = None
    watch_window: int = 5000
    bookmark_interval: float = 60.0
    probe_interval: float = 1.0  # endpoint readiness and APIService availability checks
    max_restart_period: float = 300.0  # the kubelet's crashLoopBackOff.maxContainerRestartPeriod


class Sandbox:
    """The API server on loopback HTTPS, its certificates, and the admin kubeconfig."""

    def __init__(self, config: SandboxConfig, *, clock: WallClock = now) -> None:
        self.config = config
        self.api = ApiServer(clock=clock, window=config.watch_window, bookmark_interval=config.bookmark_interval)
        self.ca = certificates.new_ca("colocation-sandbox-ca")
        self.controllers = Controllers(self.api.store, root_ca_pem=self.ca.cert_pem)
        self.serving = certificates.issue_certificate(self.ca, "colocation-sandbox",
                                                 dns_names=("localhost", "kubernetes", "kubernetes.default",
                                                            "kubernetes.default.svc"),
                                                 ip_addresses=(config.host,))
        self.front_proxy_ca = certificates.new_ca("colocation-sandbox-front-proxy-ca")
        self.api.aggregator = Aggregator(self.api, self.front_proxy_ca, probe_interval=config.probe_interval)
        self._runner: web.AppRunner | None = None
        self.port = 0
        self._bootstrap()

    @property
    def url(self) -> str:
        return f"https://{self.config.host}:{self.port}"

    @property
    def kubeconfig_path(self) -> Path:
        return self.config.kubeconfig_out or self.config.state_dir / "kubeconfig"

    def _bootstrap(self) -> None:
        store, api = self.api.store, self.api
        for name in DEFAULT_NAMESPACES:
            store.create(api.rt("", "namespaces"), new_namespace(name))
        for obj in bootstrap_policy():
            rt = api.registry.by_kind(obj["apiVersion"], obj["kind"])
            assert rt is not None, obj["kind"]
            store.create(rt, obj)
        store.create(api.rt("", "configmaps"), authentication_configmap(self.front_proxy_ca.cert_pem,
                                                                        self.ca.cert_pem))

    def ssl_context(self) -> ssl.SSLContext:
        return certificates.ssl_server_context(self.serving)

    async def start(self) -> None:
        app = self.api.application()
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.config.host, self.config.port))
        self.port = sock.getsockname()[1]
        site = web.SockSite(self._runner, sock, ssl_context=self.ssl_context())
        await site.start()
        assert self.api.aggregator is not None
        self.api.aggregator.start()
        self.write_kubeconfig(self.kubeconfig_path)
        log.info("sandbox API server listening", extra={"url": self.url})

    def write_kubeconfig(self, path: Path, *, token: str | None = None) -> Path:
        document = kubeconfig_document(self.url, self.ca.cert_pem, name="colocation-sandbox", user=ADMIN_USER,
                                  token=token or self.api.tokens.admin_token)
        return write_kubeconfig(path, document)

    async def stop(self) -> None:
        self.api.verbs.drop_watches()
        if self.api.aggregator is not None:
            await self.api.aggregator.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Sandbox:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
