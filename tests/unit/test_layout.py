"""The tests mirror the package (ARCHITECTURE.md, "Tests"): the unit tests of
``operator/ipscheduler/<floor>/<module>.py`` are ``tests/unit/<floor>/test_<module>.py``, those
of a subpackage's ``operator/ipscheduler/<floor>/<subpackage>/<module>.py`` are
``tests/unit/<floor>/<subpackage>/test_<module>.py``, those of hack/ are in ``tests/hack/``,
and no test module imports another test module or a conftest (what tests share is in
``tests/builders.py``, ``tests/unit/fakes.py`` and the like). Both ways: every module of a
floor has its test module, but for the few on :data:`UNTESTED`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
UNIT = TESTS / "unit"
PACKAGE = ROOT / "operator" / "ipscheduler"
HACK = ROOT / "hack"

# Unit tests at tests/unit/ that test no one module, each a rule over the whole tree.
WHOLE_TREE = {
    "test_floors.py",  # the generic floors name nothing of the underlayip wing
    "test_layout.py",  # this file
    "test_packaging.py",  # Dockerfiles, deploy/ manifests, the CNI installer
    "test_cni_contract.py",  # testdata/cni-contract, shared with the CNI plugin's Go tests
    "test_monitoring.py",  # deploy/monitoring: rules, dashboard, PodMonitor (promtool)
    "test_stated_facts.py",  # README, docs/, pyproject, Chart.yaml, go.mod and CRDs agree with the code
    "test_docs.py",  # README stays short; every link of README, ARCHITECTURE and docs/ leads somewhere
    "test_architecture_doc.py",  # every module ARCHITECTURE.md names exists
    "test_lowest_versions.py",  # pyproject.toml's dependency floors: the unit tests at the lowest versions
}
# Modules in a floor's test folder that are not tests: helpers its tests share.
HELPERS = {
    "plugins/cycle.py",  # one plugin through the extension points of a cycle
    "plugins/volumebinding/fake_binder.py",  # a volume binder with canned answers
    "plugins/volumebinding/storage.py",  # claims, volumes, classes and the PV controller
    "underlayip/fake_binder.py",  # an address binder with canned answers
}
# Modules of a floor without a test module of their own, each with what tests it instead. The
# list stays short and true: an entry whose module gains its test module, or is gone, fails.
UNTESTED: dict[str, str] = {}


def python_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def floors() -> list[str]:
    return sorted(p.name for p in UNIT.iterdir() if p.is_dir() and p.name != "__pycache__")


@pytest.mark.parametrize("floor", floors())
def test_each_unit_test_folder_is_a_floor_of_the_package(floor: str) -> None:
    assert (PACKAGE / floor / "__init__.py").is_file(), f"tests/unit/{floor}/: no ipscheduler.{floor}"


def mirrored_module(test: Path) -> Path:
    """The module the unit test module ``tests/unit/<floor>/[<subpackage>/]test_<module>.py``
    is named after: ``operator/ipscheduler/<floor>/[<subpackage>/]<module>.py``."""
    rel = test.relative_to(UNIT)
    return PACKAGE.joinpath(*rel.parts[:-1], rel.name.removeprefix("test_"))


@pytest.mark.parametrize("floor", floors())
def test_each_test_folder_in_a_floor_is_a_subpackage_of_it(floor: str) -> None:
    wrong = [
        rel.as_posix()
        for d in sorted((UNIT / floor).rglob("*"))
        if d.is_dir()
        and "__pycache__" not in d.parts
        and not (PACKAGE / (rel := d.relative_to(UNIT)) / "__init__.py").is_file()
    ]
    assert wrong == [], f"tests/unit/<folder>/ without its ipscheduler subpackage: {wrong}"


@pytest.mark.parametrize("floor", floors())
def test_each_unit_test_module_is_named_after_the_module_it_tests(floor: str) -> None:
    wrong = []
    for path in python_files(UNIT / floor):
        rel = path.relative_to(UNIT).as_posix()
        if path.name == "__init__.py" or rel in HELPERS:
            continue
        if not path.name.startswith("test_") or not mirrored_module(path).is_file():
            wrong.append(rel)
    assert wrong == [], f"not test_<module>.py of a module of ipscheduler.{floor} or its subpackages: {wrong}"


def mirroring_test(module: Path) -> Path:
    """The unit test module of ``operator/ipscheduler/<floor>/[<subpackage>/]<module>.py``:
    ``tests/unit/<floor>/[<subpackage>/]test_<module>.py`` (the inverse of :func:`mirrored_module`)."""
    rel = module.relative_to(PACKAGE)
    return UNIT.joinpath(*rel.parts[:-1], f"test_{rel.name}")


def package_floors() -> list[str]:
    return sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))


def untested(floor: str) -> list[str]:
    """The modules of ``floor`` (and of its subpackages) without their test module and not
    on :data:`UNTESTED`; ``__init__.py`` files only re-export (see the test below)."""
    return [
        rel
        for path in python_files(PACKAGE / floor)
        if path.name != "__init__.py"
        and (rel := path.relative_to(PACKAGE).as_posix()) not in UNTESTED
        and not mirroring_test(path).is_file()
    ]


@pytest.mark.parametrize("floor", package_floors())
def test_each_module_of_a_floor_has_its_test_module(floor: str) -> None:
    assert untested(floor) == [], "no tests/unit/<floor>/[<subpackage>/]test_<module>.py, nor on UNTESTED"


def test_the_untested_list_names_modules_that_exist_without_a_test_module_and_says_why() -> None:
    wrong = {
        rel: problem
        for rel, why in UNTESTED.items()
        if (
            problem := "no such module"
            if not (PACKAGE / rel).is_file()
            else "it has a test module now: take it off the list"
            if mirroring_test(PACKAGE / rel).is_file()
            else "no reason given"
            if not why.strip()
            else None
        )
    }
    assert wrong == {}


def only_reexports(source: str) -> bool:
    """A module of nothing but a docstring, imports and ``__all__``."""

    def reexports(i: int, node: ast.stmt) -> bool:
        if isinstance(node, ast.Import | ast.ImportFrom):
            return True
        if isinstance(node, ast.Expr):
            return i == 0 and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            return [ast.unparse(t) for t in targets] == ["__all__"]
        return False

    return all(reexports(i, node) for i, node in enumerate(ast.parse(source).body))


def test_the_packages_of_the_floors_only_reexport() -> None:
    """Which is why an ``__init__.py`` needs no test module: what a package does is in its
    modules."""
    doing = [
        p.relative_to(PACKAGE).as_posix()
        for floor in package_floors()
        for p in (PACKAGE / floor).rglob("__init__.py")
        if not only_reexports(p.read_text())
    ]
    assert doing == []


@pytest.mark.parametrize(
    ("source", "reexports"),
    [
        ('"""A floor."""\n', True),
        ("", True),
        ('"""A package."""\n\nfrom a.b import c, d\nimport e\n\n__all__ = ["c", "d"]\n', True),
        ('from a import b\n\nVERSION = "1"\n', False),
        ("def f() -> None:\n    pass\n", False),
        ('"""doc"""\n"""a second string"""\n', False),
        ("try:\n    import a\nexcept ImportError:\n    a = None\n", False),
    ],
    ids=["a-docstring", "empty", "imports-and-all", "a-constant", "a-function", "two-strings", "a-try"],
)
def test_the_reexport_rule_would_catch_what_it_forbids(source: str, reexports: bool) -> None:
    assert only_reexports(source) is reexports


def test_the_module_rule_would_catch_a_module_without_tests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A floor with a tested module, an untested one, one on the list and a subpackage's
    untested module: only the two untested ones are reported."""
    package, unit = tmp_path / "ipscheduler", tmp_path / "unit"
    for rel in (
        "f/__init__.py",
        "f/tested.py",
        "f/bare.py",
        "f/listed.py",
        "f/sub/__init__.py",
        "f/sub/deep.py",
    ):
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text("")
    (unit / "f").mkdir(parents=True)
    (unit / "f" / "test_tested.py").write_text("")
    monkeypatch.setattr(f"{__name__}.PACKAGE", package)
    monkeypatch.setattr(f"{__name__}.UNIT", unit)
    monkeypatch.setattr(f"{__name__}.UNTESTED", {"f/listed.py": "covered elsewhere"})
    assert untested("f") == ["f/bare.py", "f/sub/deep.py"]
    assert mirroring_test(package / "f" / "sub" / "deep.py") == unit / "f" / "sub" / "test_deep.py"


@pytest.mark.parametrize(
    ("test", "module", "exists"),
    [
        ("backend/test_cache.py", "backend/cache.py", True),
        ("plugins/volumebinding/test_binder.py", "plugins/volumebinding/binder.py", True),
        ("plugins/test_volumebinding.py", "plugins/volumebinding.py", False),
        ("plugins/test_binder.py", "plugins/binder.py", False),
    ],
    ids=["a-floors-module", "a-subpackages-module", "a-subpackage-as-one-module", "a-module-out-of-its-room"],
)
def test_the_mirror_rule_would_catch_what_it_forbids(test: str, module: str, exists: bool) -> None:
    """A subpackage's modules are tested in its folder, each in its own test module."""
    assert mirrored_module(UNIT / test) == PACKAGE / module
    assert (PACKAGE / module).is_file() is exists


def test_the_unit_tests_at_the_top_test_top_level_modules_or_the_whole_tree() -> None:
    wrong = [
        p.name
        for p in UNIT.glob("test_*.py")
        if p.name not in WHOLE_TREE and not (PACKAGE / p.name.removeprefix("test_")).is_file()
    ]
    assert wrong == []


def test_the_tests_of_hack_are_apart_and_named_after_what_they_test() -> None:
    """``tests/hack/test_<x>.py`` tests ``hack/<x>.py`` (or ``tests/<x>.py``, a test tool), and
    ``tests/hack/<p>/test_<x>.py`` the module ``hack/<p>/<x>.py`` of a tool that is a package;
    no unit test of the package imports hack/ (the whole-tree checks may, for the tools
    hack/binaries.py builds: helm, promtool)."""
    wrong = [
        p.relative_to(TESTS).as_posix()
        for p in (TESTS / "hack").rglob("test_*.py")
        if not any(
            (folder / p.parent.relative_to(TESTS / "hack") / p.name.removeprefix("test_")).is_file()
            for folder in (HACK, TESTS)
        )
    ]
    assert wrong == []
    hack_modules = {p.stem for p in HACK.glob("*.py")} | {p.parent.name for p in HACK.glob("*/__init__.py")}
    importing = [
        p.relative_to(TESTS).as_posix()
        for p in python_files(UNIT)
        if not (p.parent == UNIT and p.name in WHOLE_TREE)
        and {name.split(".")[0] for name in imported_modules(p)} & hack_modules
    ]
    assert importing == []


def test_every_test_folder_is_a_package() -> None:
    """Tests are imported as packages (``tests.unit.fakes``); test modules of the same name
    in two floors (``test_cache.py``) need it."""
    folders = {p.parent for p in python_files(TESTS)}
    assert sorted(f.relative_to(ROOT).as_posix() for f in folders if not (f / "__init__.py").is_file()) == []


def imported_modules(path: Path, source: str | None = None) -> list[str]:
    """The dotted names the module at ``path`` (its text, or ``source``) imports, relative
    imports resolved (``from a import b`` counts as ``a`` and ``a.b``: b may be a module)."""
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text() if source is None else source, str(path))):
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            module = ".".join((*base, *(node.module.split(".") if node.module else ())))
            out.append(module)
            out.extend(f"{module}.{alias.name}" for alias in node.names)
    return out


def is_test_module(dotted: str) -> bool:
    """A test module or conftest of ours (``tests.…``; a library's ``test_utils`` is not)."""
    parts = dotted.split(".")
    return parts[0] == "tests" and any(p.startswith("test_") or p == "conftest" for p in parts)


@pytest.mark.parametrize(
    ("source", "imports_a_test"),
    [
        ("from tests.unit.test_queue import pod", True),
        ("from tests.unit import test_queue", True),
        ("import tests.unit.backend.test_queue", True),
        ("from .test_queue import pod", True),
        ("from . import conftest", True),
        ("from tests.e2e.conftest import Pools", True),
        ("from tests.builders import pod\nfrom tests.unit.fakes import pool_cache", False),
        ("from tests.e2e.helpers import Pools\nimport pytest", False),
        ("from aiohttp import test_utils", False),
    ],
    ids=[
        "from-a-test-module",
        "a-test-module-from-its-package",
        "import-a-test-module",
        "relative",
        "a-conftest-relative",
        "a-conftest",
        "builders-and-fakes",
        "e2e-helpers",
        "a-librarys-test-utils",
    ],
)
def test_the_import_rule_would_catch_what_it_forbids(source: str, imports_a_test: bool) -> None:
    names = [n for n in imported_modules(UNIT / "backend" / "test_example.py", source) if is_test_module(n)]
    assert bool(names) is imports_a_test, names


def test_no_test_module_imports_another_test_module_or_a_conftest() -> None:
    """Nor does a helper module: what tests share lives outside test modules, so a test
    module runs the same whether or not another one is collected."""
    offenders = {
        path.relative_to(TESTS).as_posix(): names
        for path in python_files(TESTS)
        if (names := [n for n in imported_modules(path) if is_test_module(n)])
    }
    assert offenders == {}
