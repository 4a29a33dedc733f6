"""The container image (`make image`): what it holds, and the operators and agents running from it.

The image's root filesystem is a buildah working container, and every program runs in it as
`colocation sandbox --image` starts them (colocation_sandbox.launcher.controlplane.image_root):
chrooted, the root read-only, as the numeric user. Only with `--apiserver kube` (so it runs once,
on the real control plane), and skipped, saying so, where buildah is missing or the image is not
built.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import AsyncIterator, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import orjson
import pytest

from colocation_sandbox.launcher.controlplane.image_root import ImageRoot, ImageUnavailable
from tests.e2e.conftest import REPO, apiserver_kind
from tests.e2e.kube import Kube, apiservice_available, ready_operator_endpoints, start_sandbox_process
from tests.timing import eventually_async

IMAGE = "colocation:dev"
USER = (65532, 65532)
SIMULATED_NODE = "sim-node-1"
NODEMETRICS = "/apis/metrics.colocation.dev/v1alpha1/nodemetrics"


def _skip_unless_kube(config: pytest.Config) -> None:
    if config.getoption("--kubeconfig") or apiserver_kind(config) != "kube":
        pytest.skip("the image's tests run once, with --apiserver kube")


@pytest.fixture(scope="module")
def image(request: pytest.FixtureRequest) -> Iterator[ImageRoot]:
    _skip_unless_kube(request.config)
    try:
        root = ImageRoot.open(IMAGE)
    except ImageUnavailable as error:
        pytest.skip(f"the image {IMAGE}: {error} (make image builds it)")
    yield root
    root.close()


def run_in(image: ImageRoot, *program: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(image.command(program, user=image.user, mounts=[], env={}), capture_output=True,
                          text=True, timeout=60, check=False)


def test_the_image_runs_colocation_as_its_numeric_user_and_has_no_sandbox(image: ImageRoot) -> None:
    assert image.user == USER
    answer = run_in(image, "colocation", "--version")
    assert answer.returncode == 0, answer.stderr
    assert version("colocation") in answer.stdout
    sandbox = run_in(image, "colocation", "sandbox")
    assert sandbox.returncode != 0
    assert "not installed" in sandbox.stdout + sandbox.stderr
    ids = run_in(image, "python", "-c", "import os; print(os.getuid(), os.getgid())")
    assert ids.stdout.split() == [str(USER[0]), str(USER[1])], ids.stderr


def test_nothing_in_the_image_is_writable_by_its_user(image: ImageRoot) -> None:
    """No file or directory is the user's, and none is writable by everyone but directories like
    /tmp (sticky: each user's own files only); and the root is read-only when it runs."""
    writable = []
    for directory, names, files in os.walk(image.path):
        for name in [*names, *files]:
            path = Path(directory, name)
            mode = path.lstat()
            if path.is_symlink() or (path.is_dir() and mode.st_mode & stat.S_ISVTX):
                continue
            if mode.st_uid == USER[0] or mode.st_gid == USER[1] or mode.st_mode & 0o002:
                writable.append("/" + str(path.relative_to(image.path)))
    assert writable == []
    attempt = run_in(image, "python", "-c", "open('/tmp/x', 'w')")
    assert "Read-only file system" in attempt.stderr


def test_the_archive_holds_the_image(image: ImageRoot) -> None:
    """What `make image` exports (and a user loads) is the image these tests run."""
    built = subprocess.run([str(REPO / "hack/image/build.sh"), "--check"], capture_output=True, text=True,
                           timeout=60, check=False)
    if built.returncode != 0 or shutil.which("skopeo") is None:
        pytest.skip("the image's archive is not up to date (make image), or skopeo is not installed")
    archive = built.stdout.strip().splitlines()[-1]
    manifest = orjson.loads(subprocess.run(["skopeo", "inspect", "--raw", f"oci-archive:{archive}"],
                                           capture_output=True, timeout=60, check=True).stdout)
    assert manifest["config"]["digest"] == f"sha256:{image.image_id}"


@pytest.fixture(scope="module")
def image_sandbox(request: pytest.FixtureRequest, image: ImageRoot,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    state = tmp_path_factory.mktemp("image-sandbox")
    args = ["--apiserver", "kube", "--image", IMAGE, "--nodes", "2", "--pods-per-node", "3",
            "--no-serve-custom-metrics", "--no-serve-resource-metrics"]
    with start_sandbox_process(state, args) as kubeconfig:
        yield kubeconfig, state


@pytest.fixture
async def admin(image_sandbox: tuple[Path, Path]) -> AsyncIterator[Kube]:
    async with Kube.from_kubeconfig(image_sandbox[0]) as kube:
        yield kube


def _entry_point(image: ImageRoot) -> str:
    """Where `colocation` is in the image (found on its PATH), relative to its root: nowhere on the
    host, so only a process in the image finds it there."""
    found = shutil.which("colocation", path=":".join(f"{image.path}{d}" for d in image.env["PATH"].split(":")))
    assert found is not None
    inside = Path(found).relative_to(image.path)
    assert not (Path("/") / inside).exists()
    return str(inside)


def _process(pid: int, entry_point: str) -> tuple[bool, list[str]]:
    """Whether the process's root holds the image's `colocation`, and its uids (real, effective, saved, fs)."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    uids = next(line.split()[1:] for line in status if line.startswith("Uid:"))
    return Path(f"/proc/{pid}/root", entry_point).exists(), uids


async def test_the_operators_and_a_simulated_agent_run_from_the_image(
        image: ImageRoot, image_sandbox: tuple[Path, Path], admin: Kube) -> None:
    state = image_sandbox[1]
    await eventually_async(lambda: apiservice_available(admin), timeout=60)
    await eventually_async(lambda: ready_operator_endpoints(admin, 2), timeout=60)

    async def reported() -> Any:
        status, body = await admin.request("GET", f"{NODEMETRICS}/{SIMULATED_NODE}")
        return status == 200 and body
    nodemetric = await eventually_async(reported, timeout=60, message=f"a NodeMetric of {SIMULATED_NODE}")
    assert nodemetric["metadata"]["name"] == SIMULATED_NODE

    operators = orjson.loads((state / "operators.json").read_bytes())
    agents = orjson.loads((state / "agents.json").read_bytes())
    simulated = [agent for agent in agents if agent["simulated"]]
    assert len(operators) == 2 and simulated
    entry_point = _entry_point(image)
    for process in [*operators, *simulated]:
        assert _process(process["pid"], entry_point) == (True, [str(USER[0])] * 4), process
