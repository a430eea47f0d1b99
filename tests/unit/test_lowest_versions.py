"""The lowest versions pyproject.toml allows are the ones the code is tested with.

Each dependency's floor (``>=``) is meant to be the first release that has what the code
uses. This test installs, in a new virtualenv under pytest's ``tmp_path``, the lowest
versions the direct dependencies allow (``uv pip install --resolution lowest-direct``,
the ``test`` extra's exact pins included), checks that every direct dependency got exactly
its declared floor (a floor raised or lowered without this run fails here), and runs the
unit tests there. It works on a copy of the checkout's files (git's tracked and untracked,
not ignored) so that installing the project writes nothing beside the checkout.

It needs the package index: with ``CI=true`` an unreachable index fails it; elsewhere
it skips with the reason. About a minute and a half with a warm uv cache.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO_ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = REPO_ROOT / "pyproject.toml"
INNER_MARKERS = "not e2e and not slow"
"""What runs in the lowest-versions environment: the unit tests, this one left out."""
NO_INDEX = re.compile(
    r"Failed to fetch|error sending request|dns error|Connection refused|Could not connect|"
    r"timed out|Network is unreachable",
    re.IGNORECASE,
)
"""How uv says the package index could not be reached."""

pytestmark = pytest.mark.slow


def floors() -> dict[str, str]:
    """Each direct dependency of ``[project] dependencies`` → its ``>=`` floor."""
    deps = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["dependencies"]
    found: dict[str, str] = {}
    for line in deps:
        req = Requirement(line)
        lowest = [s.version for s in req.specifier if s.operator == ">="]
        assert len(lowest) == 1, f"{line!r}: every dependency needs one floor (>=)"
        found[canonicalize_name(req.name)] = lowest[0]
    return found


def test_every_direct_dependency_declares_a_floor() -> None:
    assert {"kopf", "kubernetes-asyncio", "pydantic", "aiohttp"} <= floors().keys()


def _uv() -> str:
    """uv: the one in this virtualenv (the ``test`` extra), else on PATH."""
    venv_bin = Path(sys.executable).parent / "uv"
    if venv_bin.is_file():
        return str(venv_bin)
    found = shutil.which("uv")
    if found is None:
        pytest.fail(
            f"uv not found (looked for {venv_bin} and on PATH); "
            "install the test extras: pip install -e '.[test]' (provides uv)"
        )
    return found


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def _tail(proc: subprocess.CompletedProcess[str], lines: int = 60) -> str:
    return "\n".join((proc.stdout + proc.stderr).splitlines()[-lines:])


def _copy_checkout(dest: Path) -> None:
    """The checkout's files as git sees them (tracked, and untracked but not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        src = REPO_ROOT / name
        if src.is_file():  # a tracked file deleted in the work tree is left out
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def test_the_unit_tests_pass_with_the_lowest_allowed_versions(tmp_path: Path) -> None:
    uv = _uv()
    src, venv = tmp_path / "src", tmp_path / "venv"
    _copy_checkout(src)
    env = {
        **os.environ,
        "PYTHONPYCACHEPREFIX": str(tmp_path / "pycache"),
        "UV_NO_PROGRESS": "1",
    }
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)

    made = _run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], tmp_path, env, 120)
    assert made.returncode == 0, _tail(made)
    python = venv / "bin" / "python"
    install = [uv, "pip", "install", "--python", str(python), "--resolution", "lowest-direct"]
    installed = _run([*install, "-e", f"{src}[test]"], tmp_path, env, 240)
    if installed.returncode != 0 and NO_INDEX.search(installed.stderr):
        if os.environ.get("CI") == "true":
            pytest.fail(f"the package index is unreachable in CI:\n{_tail(installed)}")
        pytest.skip(f"the package index is unreachable: {_tail(installed, 3)}")
    assert installed.returncode == 0, _tail(installed)

    listed = _run([uv, "pip", "freeze", "--python", str(python)], tmp_path, env, 60)
    assert listed.returncode == 0, _tail(listed)
    versions = {
        canonicalize_name(name): version
        for name, _, version in (line.partition("==") for line in listed.stdout.splitlines())
    }
    declared = {name: Version(floor) for name, floor in floors().items()}
    got = {name: Version(versions[name]) if name in versions else None for name in declared}
    assert got == declared, (
        "the lowest allowed versions are not the declared floors (a floor below what another "
        "dependency requires, or a release missing from the index)"
    )

    tests = _run(
        [
            str(python),
            "-m",
            "pytest",
            "-m",
            INNER_MARKERS,
            "-q",
            "-n",
            "2",
            "-p",
            "no:cacheprovider",
            "--basetemp",
            str(tmp_path / "basetemp"),
        ],
        src,
        env,
        420,  # within pytest-timeout's 600 s for the whole test
    )
    assert tests.returncode == 0, f"the unit tests failed with the lowest versions:\n{_tail(tests)}"


def test_the_floors_docs_install_md_names_are_pyprojects() -> None:
    """docs/install.md's "Python" line names some floors: they are pyproject.toml's."""
    text = (REPO_ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    (line,) = re.findall(r"floor in pyproject\.toml \(([^)]*)\)", text)
    named = dict(re.findall(r"([\w-]+) (\d[\w.]*)", line))
    declared = floors()
    assert named and {n: Version(v) for n, v in named.items()} == {n: Version(declared[n]) for n in named}
