"""E2E fixtures: a sandbox started as a real process, or a real cluster with --kubeconfig PATH."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from colocation_sandbox.launcher.controlplane.binaries import kubectl_binary
from colocation_sandbox.launcher.nats_cluster import NatsCluster
from tests.e2e.kube import Kube, apiservice_available, fresh_namespace, ready_operator_endpoints, start_sandbox_process
from tests.timing import eventually_async

REPO = Path(__file__).resolve().parents[2]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--kubeconfig", action="store", default=None,
                     help="Run the e2e tests against this cluster instead of a fresh sandbox.")
    parser.addoption("--apiserver", action="store", default="builtin", choices=("builtin", "kube"),
                     help="The sandbox the e2e tests start: builtin (in-memory) or kube (the real control "
                          "plane, `colocation sandbox --apiserver kube`).")
    parser.addoption("--store", action="store", default="memory", choices=("memory", "nats"),
                     help="Where the sandbox's operator replicas keep NodeMetrics (`colocation sandbox --store`).")


def apiserver_kind(config: pytest.Config) -> str:
    return str(config.getoption("--apiserver"))


def pytest_sessionstart(session: pytest.Session) -> None:
    """The real control plane needs CAP_NET_ADMIN (pod network namespaces): without it, one line."""
    if apiserver_kind(session.config) != "kube":
        return
    from colocation_sandbox.launcher.controlplane.podnetwork import PodNetworkUnavailable, check_available

    try:
        check_available()
    except PodNetworkUnavailable as error:
        pytest.exit(f"skip: e2e against the real control plane: {error}", returncode=0)


@pytest.fixture(scope="session")
def real_cluster(request: pytest.FixtureRequest) -> bool:
    """True against a real kube-apiserver: a given cluster, or the real control plane the run starts."""
    return request.config.getoption("--kubeconfig") is not None or apiserver_kind(request.config) == "kube"


@pytest.fixture(scope="session")
def kubeconfig(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    given = request.config.getoption("--kubeconfig")
    if given:
        yield Path(given)
        return
    state = tmp_path_factory.mktemp("sandbox")
    with start_sandbox_process(state, ["--api-only", *sandbox_kind_args(request.config)]) as path:
        yield path


def sandbox_kind_args(config: pytest.Config) -> list[str]:
    """The arguments that make `colocation sandbox` start the control plane and the store this run tests."""
    kind = ["--apiserver", "kube"] if apiserver_kind(config) == "kube" else []
    return [*kind, "--store", str(config.getoption("--store"))]


def store_kind(config: pytest.Config) -> str:
    return str(config.getoption("--store"))


@pytest.fixture(autouse=True)
def _skip_sandbox_only(request: pytest.FixtureRequest, real_cluster: bool) -> None:
    marker = request.node.get_closest_marker("sandbox_only")
    if real_cluster and marker:
        reason = marker.kwargs.get("reason", "relies on the sandbox's own controls")
        pytest.skip(f"sandbox only: {reason}")
    memory_only = request.node.get_closest_marker("memory_store_only")
    if memory_only and store_kind(request.config) != "memory":
        pytest.skip(f"in-memory store only: {memory_only.kwargs.get('reason', 'its replication')}")


@pytest.fixture
async def kube(kubeconfig: Path) -> AsyncIterator[Kube]:
    async with Kube.from_kubeconfig(kubeconfig) as client:
        yield client


@pytest.fixture
async def namespace(kube: Kube) -> AsyncIterator[str]:
    """A fresh namespace per test, deleted afterwards."""
    async with fresh_namespace(kube) as name:
        yield name


class Kubectl:
    """The real kubectl binary against the test cluster, with its own discovery cache."""

    def __init__(self, binary: str, kubeconfig: Path, cache_dir: Path) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.cache_dir = cache_dir

    def run(self, *args: str, input: str | None = None, check: bool = True,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "KUBECACHEDIR": str(self.cache_dir),
               "HOME": str(self.cache_dir)}
        result = subprocess.run([self.binary, "--cache-dir", str(self.cache_dir), *args], input=input,
                                capture_output=True, text=True, env=env, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result


@pytest.fixture
def kubectl(kubeconfig: Path, tmp_path: Path) -> Kubectl:
    binary = kubectl_binary()
    if binary is None:
        pytest.skip("no kubectl: neither built by hack/kube/build.sh (needs Go) nor on the PATH")
    return Kubectl(binary, kubeconfig, tmp_path / "kubectl-cache")


@pytest.fixture(scope="session")
def python() -> str:
    return sys.executable


# ---- fixtures for the contract tests -----------------------------------------------------------

@pytest.fixture(scope="session")
def small_window_kubeconfig(real_cluster: bool, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A second sandbox that forgets watch history quickly and sends bookmarks twice a second."""
    if real_cluster:
        pytest.skip("a sandbox with a small watch window exists only without --kubeconfig")
    state = tmp_path_factory.mktemp("sandbox-small-window")
    with start_sandbox_process(state, ["--api-only", "--watch-window", "100", "--bookmark-interval", "0.5"]) as path:
        yield path


@pytest.fixture
async def small_window_kube(small_window_kubeconfig: Path) -> AsyncIterator[Kube]:
    async with Kube.from_kubeconfig(small_window_kubeconfig) as client:
        yield client


@pytest.fixture
async def cluster_cleanup(kube: Kube) -> AsyncIterator[list[str]]:
    """Paths of cluster-scoped objects a test created; deleted (last first) after the test."""
    paths: list[str] = []
    yield paths
    for path in reversed(paths):
        await kube.request("DELETE", path)


@pytest.fixture
async def faults(kube: Kube) -> AsyncIterator[Kube]:
    """The sandbox's fault controls, cleared after the test whatever it left behind."""
    yield kube
    await kube.request("DELETE", "/sandbox/faults")


@pytest.fixture
async def widgets(kube: Kube) -> AsyncIterator[object]:
    """A Widget CRD (tests.e2e.kube.Widgets) in a group of its own, Established, deleted after the test."""
    from tests.e2e.kube import Widgets, install_crd  # appended fixtures keep the lead's imports untouched

    kind = Widgets(f"e2e-{uuid.uuid4().hex[:8]}.example.com")
    await install_crd(kube, kind)
    yield kind
    await kube.request("DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{kind.crd_name}")


@pytest.fixture
async def as_user(kubeconfig: Path) -> AsyncIterator[object]:
    """`await as_user(token)`: an open client that authenticates with that token only (None: anonymous)."""
    from tests.e2e.kube import token_client

    clients: list[Kube] = []

    async def open_client(token: str | None) -> Kube:
        client = await token_client(kubeconfig, token).__aenter__()
        clients.append(client)
        return client

    yield open_client
    for client in clients:
        await client.__aexit__(None, None, None)


# ---- fixtures over a module's own `sandbox` fixture: (kubeconfig, state dir) ---------------------

@pytest.fixture(scope="module")
def nats(sandbox: tuple[Path, Path]) -> Iterator[NatsCluster]:
    """The NATS servers of the module's `--store nats` sandbox (tests.e2e.nats_sandbox)."""
    from tests.e2e.nats_sandbox import servers_of

    yield from servers_of(sandbox[1])


@pytest.fixture
async def admin(sandbox: tuple[Path, Path]) -> AsyncIterator[Kube]:
    """The sandbox's admin, once the NodeMetric APIService is Available and both replicas Ready."""
    async with Kube.from_kubeconfig(sandbox[0]) as kube:
        await eventually_async(lambda: apiservice_available(kube), timeout=30)
        await eventually_async(lambda: ready_operator_endpoints(kube, 2), timeout=30)
        yield kube
