"""The Dockerfile and its lock files, read statically (tests/e2e/test_image.py runs the image that
`make image` builds): every runtime dependency pinned with a hash, installed with --require-hashes,
a numeric non-root user, and no build tools in the final stage."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "Dockerfile"
IMAGE_LOCK = REPO / "requirements" / "image.txt"
BUILD_LOCK = REPO / "requirements" / "build.txt"
_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+)")
_BUILD_TOOLS = re.compile(r"\b(gcc|g\+\+|cc|make|build-essential|apt-get|apk|hatchling|setuptools-scm|"
                          r"pip wheel|python -m build|uv build)\b")


def lock(path: Path) -> dict[str, tuple[Version, list[str]]]:
    """{canonical name: (pinned version, sha256 hashes)} of a pip-compile --generate-hashes file."""
    pins: dict[str, tuple[Version, list[str]]] = {}
    current = None
    for line in path.read_text().splitlines():
        if (match := _PIN.match(line)) is not None:
            current = canonicalize_name(match["name"])
            pins[current] = (Version(match["version"]), [])
        elif current is not None and (hashed := re.search(r"--hash=sha256:([0-9a-f]{64})\b", line)):
            pins[current][1].append(hashed[1])
        elif line and not line.startswith((" ", "#")):
            raise AssertionError(f"{path.name}: unexpected line {line!r}")
    return pins


def stages() -> list[list[str]]:
    """The Dockerfile's instructions (continuations joined, comments dropped), one list per stage."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in DOCKERFILE.read_text().splitlines()
                                          if not line.lstrip().startswith("#")))
    found: list[list[str]] = []
    for instruction in filter(None, (line.strip() for line in text.splitlines())):
        if instruction.upper().startswith("FROM "):
            found.append([])
        if found:
            found[-1].append(instruction)
    return found


def pip_installs(instructions: list[str]) -> list[list[str]]:
    """Every `pip install ...` command of the stage's RUN instructions, as arguments."""
    commands = []
    for instruction in instructions:
        if instruction.upper().startswith("RUN "):
            for command in re.split(r"&&|;", instruction[4:]):
                words = [w for w in shlex.split(command) if not w.startswith("--mount=")]
                if words[:2] == ["pip", "install"] or words[:4] == ["python", "-m", "pip", "install"]:
                    commands.append(words)
    return commands


@pytest.mark.parametrize("dependency", tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"])
def test_every_runtime_dependency_is_pinned_in_the_lock_with_a_hash(dependency: str) -> None:
    requirement = Requirement(dependency)
    pins = lock(IMAGE_LOCK)
    name = canonicalize_name(requirement.name)
    assert name in pins, f"{requirement.name} is not in {IMAGE_LOCK.name}: run pip-compile (docs/install.md)"
    version, hashes = pins[name]
    assert requirement.specifier.contains(version, prereleases=True), f"{name}=={version} does not satisfy {dependency}"
    assert hashes, f"{name} has no sha256 hash"


@pytest.mark.parametrize("path", [IMAGE_LOCK, BUILD_LOCK], ids=lambda p: p.name)
def test_every_pin_of_the_locks_has_a_hash(path: Path) -> None:
    pins = lock(path)
    assert pins
    assert [name for name, (_, hashes) in pins.items() if not hashes] == []


def test_the_build_lock_pins_the_build_backend_pyproject_asks_for() -> None:
    pins = lock(BUILD_LOCK)
    for dependency in tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]:
        requirement = Requirement(dependency)
        version, _ = pins[canonicalize_name(requirement.name)]
        assert requirement.specifier.contains(version)


def test_every_locked_install_requires_hashes_and_no_index_in_the_final_stage() -> None:
    final = stages()[-1]
    installs = pip_installs(final)
    assert installs, "the final stage installs nothing"
    for words in installs:
        assert "--no-index" in words and "--no-deps" in words, words
        if "-r" in words:
            assert "--require-hashes" in words and words[words.index("-r") + 1].endswith("requirements/image.txt")
    assert any("-r" in words for words in installs), "the final stage does not install the lock file"


def test_the_builder_fetches_only_hashed_binary_wheels() -> None:
    builder = " ".join(stages()[0])
    for command in re.findall(r"pip (?:install|download)[^&]*", builder):
        assert "--require-hashes" in command and "--only-binary=:all:" in command, command
    assert "--no-build-isolation" in builder  # the project's wheel is built with the pinned backend


def test_the_final_stage_runs_as_a_numeric_non_root_user() -> None:
    users = [i.split(None, 1)[1] for i in stages()[-1] if i.upper().startswith("USER ")]
    assert users, "no USER: the image would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0 and (not gid or (gid.isdigit() and int(gid) != 0))


def test_the_final_stage_has_no_build_tools() -> None:
    final = stages()[-1]
    runs = " ".join(i for i in final if i.upper().startswith("RUN "))
    assert _BUILD_TOOLS.search(runs) is None, _BUILD_TOOLS.search(runs)
    assert not any(i.upper().startswith(("COPY ", "ADD ")) and "--from=builder" not in i for i in final)
    assert "uninstall --yes setuptools wheel pip" in runs  # the base image's installers go too


def test_the_build_context_includes_the_locks() -> None:
    allowed = {line[1:] for line in (REPO / ".dockerignore").read_text().splitlines() if line.startswith("!")}
    assert {"requirements/image.txt", "requirements/build.txt"} <= allowed


def test_the_image_holds_no_sandbox() -> None:
    """The sandbox (sandbox/, colocation-sandbox) is a test harness: outside the build context and the lock."""
    allowed = {line[1:] for line in (REPO / ".dockerignore").read_text().splitlines() if line.startswith("!")}
    assert not any(path.startswith("sandbox") for path in allowed)
    assert "colocation-sandbox" not in lock(IMAGE_LOCK)
    assert not any(i.upper().startswith(("COPY ", "ADD ")) and "sandbox" in i for stage in stages() for i in stage)
