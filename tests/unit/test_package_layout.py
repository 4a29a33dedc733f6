"""The package's shape: layers that import only downward, unique module names, tests that mirror it,
and a wheel that holds the product and not its test harness.

The layers themselves are import-linter contracts in pyproject.toml (`make lint` runs
`lint-imports`); this proves that check bites, and checks what import-linter does not.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "colocation"
# The sandbox: its own distribution (sandbox/pyproject.toml), mirrored by tests/unit/sandbox.
SANDBOX_PACKAGE = ROOT / "sandbox" / "colocation_sandbox"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def sources() -> list[Path]:
    return [*PACKAGE.rglob("*.py"), *SANDBOX_PACKAGE.rglob("*.py")]


def modules() -> list[Path]:
    return [path for path in sources() if path.name not in ("__init__.py", "__main__.py")]


def lint_imports(package_root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                          cwd=package_root, capture_output=True, text=True, timeout=120, check=False)


def test_every_module_name_is_unique_across_the_package() -> None:
    """A traceback or a log line names the module by its file or logger name: it must say where it is."""
    names = Counter(path.stem for path in modules())
    repeated = sorted(name for name, count in names.items() if count > 1)
    assert repeated == [], [str(p.relative_to(ROOT)) for p in modules() if p.stem in repeated]


def test_no_docstring_cites_a_design_document_outside_the_repository() -> None:
    citing = [str(path.relative_to(ROOT)) for path in sources() if "DESIGN.md" in path.read_text()]
    assert citing == []
    assert (ROOT / "docs" / "architecture.md").is_file()


# Folders of tests/unit for what lives beside the package: the benchmarks' code, the manifests,
# the Helm chart and the docs.
OUTSIDE_THE_PACKAGE = ("benchmarks", "manifests", "charts", "docs")
# Top-level tests of both packages as a whole, not of one module.
WHOLE_PACKAGE_TESTS = (Path(__file__).name, "test_keyword_only.py")


def test_unit_tests_mirror_the_package() -> None:
    """Each folder of tests/unit is a package of colocation (tests/unit/sandbox/...: of colocation_sandbox);
    at the top only tests of top-level modules."""
    unit = ROOT / "tests" / "unit"
    top_level = sorted(p.stem.removeprefix("test_") for p in unit.glob("test_*.py")
                       if p.name not in WHOLE_PACKAGE_TESTS)
    assert [name for name in top_level if not (PACKAGE / f"{name}.py").is_file()] == []
    for folder in (p for p in unit.rglob("*") if p.is_dir()):
        relative = folder.relative_to(unit)
        if relative.parts[0] in OUTSIDE_THE_PACKAGE or {"__pycache__", "fixtures"} & set(relative.parts):
            continue
        if relative.parts[0] == "sandbox":
            inside = Path(*relative.parts[1:])
            assert (SANDBOX_PACKAGE / inside).is_dir(), f"tests/unit/{relative} has no colocation_sandbox/{inside}"
            continue
        assert (PACKAGE / relative).is_dir(), f"tests/unit/{relative} has no colocation/{relative}"


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed (pip install -e .[test])")
def test_the_layering_check_passes_and_fails_on_an_upward_import(tmp_path: Path) -> None:
    checked = lint_imports(ROOT / "operator")
    assert checked.returncode == 0, checked.stdout
    copy = tmp_path / "operator"
    shutil.copytree(PACKAGE, copy / "colocation", ignore=shutil.ignore_patterns("__pycache__"))
    lowest = copy / "colocation" / "apimachinery" / "objects.py"
    lowest.write_text(lowest.read_text() + "\nimport colocation.manager  # an upward import\n")
    result = lint_imports(copy)
    assert result.returncode != 0
    assert re.search(r"colocation\.apimachinery\.objects -> colocation\.manager", result.stdout), result.stdout


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed (pip install -e .[test])")
def test_the_layering_check_fails_when_the_product_imports_the_sandbox(tmp_path: Path) -> None:
    copy = tmp_path / "operator"
    shutil.copytree(PACKAGE, copy / "colocation", ignore=shutil.ignore_patterns("__pycache__"))
    module = copy / "colocation" / "noderesource.py"
    module.write_text(module.read_text() + "\nimport colocation_sandbox.server.jsonpath  # the test harness\n")
    result = lint_imports(copy)
    assert result.returncode != 0
    assert re.search(r"colocation\.noderesource -> colocation_sandbox\.server\.jsonpath", result.stdout), result.stdout


def test_the_wheel_holds_the_product_and_not_the_sandbox(tmp_path: Path) -> None:
    """The `colocation` wheel (what the image installs: the Dockerfile builds it with the same pinned
    backend) has the command line and no file of the sandbox, which is its own distribution."""
    built = subprocess.run([sys.executable, "-c", "import sys; from hatchling.build import build_wheel; "
                            "print(build_wheel(sys.argv[1]))", str(tmp_path)],
                           cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert built.returncode == 0, f"hatchling (pyproject.toml [build-system]; make venv installs it): {built.stderr}"
    with zipfile.ZipFile(tmp_path / built.stdout.strip().splitlines()[-1]) as wheel:
        names = wheel.namelist()
    assert "colocation/cli.py" in names
    assert [name for name in names if name.startswith(("colocation_sandbox/", "colocation/sandbox/"))] == []
