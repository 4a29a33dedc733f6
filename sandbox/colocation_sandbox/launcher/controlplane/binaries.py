"""Where the control-plane binaries are: built once by hack/kube/build.sh and cached outside the tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

BUILD_SCRIPT = Path("hack") / "kube" / "build.sh"
BIN_ENV = "COLOCATION_KUBE_BIN"
NAMES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok")
# A cold build on 2 cores takes minutes (BENCHMARKS.md, "Building the control plane").
BUILD_TIMEOUT_SECONDS = 3600


class BinariesMissing(RuntimeError):
    """The control plane is not built and cannot be; the message is one line, fit for a CLI."""


@dataclass(frozen=True)
class Binaries:
    directory: Path

    def path(self, name: str) -> str:
        return str(self.directory / name)

    @property
    def kubectl(self) -> str:
        return self.path("kubectl")


def source_root(script: Path = BUILD_SCRIPT) -> Path | None:
    """The source checkout this package runs from, found by one of its hack/ build scripts."""
    for candidate in Path(__file__).resolve().parents:
        if (candidate / script).is_file():
            return candidate
    return None


def _complete(directory: Path) -> bool:
    return all(os.access(directory / name, os.X_OK) for name in NAMES)


def locate(*, build: bool = True) -> Binaries:
    """The binaries: from $COLOCATION_KUBE_BIN, else hack/kube/build.sh (building them if needed,
    with its progress on stderr)."""
    given = os.environ.get(BIN_ENV)
    if given:
        directory = Path(given)
        if not _complete(directory):
            raise BinariesMissing(f"{BIN_ENV}={given} lacks one of {', '.join(NAMES)}")
        return Binaries(directory)
    root = source_root()
    if root is None:
        raise BinariesMissing(f"no source checkout with {BUILD_SCRIPT}: set {BIN_ENV} to a directory "
                              f"holding {', '.join(NAMES)}")
    if shutil.which("go") is None:
        raise BinariesMissing("the real control plane is built from Go modules and go is not on the PATH "
                              "(Go 1.26 is needed)")
    directory = Path(run_build_script(root / BUILD_SCRIPT, build=build, timeout=BUILD_TIMEOUT_SECONDS,
                                      missing=BinariesMissing))
    if not _complete(directory):
        raise BinariesMissing(f"{BUILD_SCRIPT} left {directory} without one of {', '.join(NAMES)}")
    return Binaries(directory)


CERT_MANAGER_BUILD_SCRIPT = Path("hack") / "cert-manager" / "build.sh"


def locate_cert_manager(*, build: bool = True) -> Path:
    """The directory of cert-manager's controller and cainjector (and its CRDs, in crds/), built by
    hack/cert-manager/build.sh (building them if needed, with its progress on stderr)."""
    return Path(locate_built(CERT_MANAGER_BUILD_SCRIPT, what="cert-manager", build=build,
                             timeout=BUILD_TIMEOUT_SECONDS, missing=BinariesMissing))


def locate_built(script: Path, *, what: str, build: bool, timeout: float, missing: type[RuntimeError],
                 env: str | None = None) -> str:
    """What one of hack/'s build scripts (`script`, relative to the checkout) built: $`env` when it
    is set, else the script's answer, building first if needed and `build` (its progress on
    stderr). `missing`, with a one-line message, when neither gives it."""
    given = os.environ.get(env) if env else None
    if given:
        if not os.access(given, os.X_OK):
            raise missing(f"{env}={given} is not an executable")
        return given
    root = source_root(script)
    if root is None:
        raise missing(f"no source checkout with {script}" + (f": set {env} to a {what} binary" if env else ""))
    if build and shutil.which("go") is None:
        raise missing(f"{what} is built from its Go module and go is not on the PATH (Go 1.26 is needed)")
    return run_build_script(root / script, build=build, timeout=timeout, missing=missing)


def run_build_script(script: Path, *, build: bool, timeout: float, missing: type[RuntimeError]) -> str:
    """What one of hack/'s build scripts built (the last line it printed), building it if `build`
    (its progress on stderr), else only checking; `missing` (a one-line message) when it fails."""
    result = subprocess.run([str(script)] + ([] if build else ["--check"]), stdout=subprocess.PIPE,
                            stderr=sys.stderr, text=True, timeout=timeout, check=False)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        name = script.relative_to(script.parents[2])  # hack/NAME/build.sh
        raise missing(f"{name} failed (exit {result.returncode}); see its output above")
    return lines[-1]


def kubectl_binary() -> str | None:
    """kubectl for the project's own use: the one the project builds, of the control plane's own
    version (when it is built already: this never starts a build), else the one on the PATH."""
    try:
        return locate(build=False).kubectl
    except (BinariesMissing, OSError, subprocess.SubprocessError):
        return shutil.which("kubectl")
