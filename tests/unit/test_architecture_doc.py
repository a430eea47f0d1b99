"""ARCHITECTURE.md names only what exists: every module or package path it writes in
backticks (``underlayip/plugin.py``, ``framework/waiting``, ``cmd/wiring.build``) is a module
of ``operator/ipscheduler`` (with that attribute) or a path of the repository, every
``Class.attribute`` it names is one of the package's classes with that attribute, and
every ``CONSTANT`` a name the package defines. So the page cannot name a module that is
gone or a function that was renamed."""

from __future__ import annotations

import ast
import importlib
import re
from functools import cache
from pathlib import Path

import pytest

from tests.markdown import unfenced

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "ipscheduler"
DOC = ROOT / "ARCHITECTURE.md"

UPSTREAM = {"pkg/scheduler/"}
"""Paths of other projects the page names (kube-scheduler's), not of this repository."""

PATH = re.compile(r"^[A-Za-z_][\w.-]*(?:/[\w.-]*)+$|^\w+\.py$")
CLASS_ATTRIBUTE = re.compile(r"^([A-Z]\w*)((?:\.\w+)+)(?:\(\))?$")
CONSTANT = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$")


def code_spans(text: str) -> list[str]:
    """The inline code spans of Markdown ``text``, fenced blocks left out."""
    return [span for line in unfenced(text) for span in re.findall(r"`([^`]+)`", line)]


def module_of(path: str) -> str | None:
    """The dotted module name of ``path`` (``cmd/wiring``, ``health.py``, ``framework/``) when
    it is a module or package of ``operator/ipscheduler``, else None."""
    stem = path.rstrip("/").removesuffix(".py")
    if (PACKAGE / f"{stem}.py").is_file() or (PACKAGE / stem / "__init__.py").is_file():
        return "ipscheduler." + stem.replace("/", ".")
    return None


def has_attributes(obj: object, chain: str) -> bool:
    for name in chain.split("."):
        if not hasattr(obj, name):
            return False
        obj = getattr(obj, name)
    return True


def missing_path(span: str) -> str | None:
    """Why the path ``span`` names nothing of the repository, or None. A path may go on with
    ``.attribute`` after a module (``cmd/wiring.build``)."""
    if span in UPSTREAM or ("/" in span and "." in span.split("/", maxsplit=1)[0]):
        return None  # an API group or annotation (ipscheduler.io/ip), or upstream's
    if module_of(span) or (ROOT / span).exists():
        return None
    head, dot, chain = span.partition(".")
    while dot:
        module = module_of(head)
        if module is not None:
            ok = has_attributes(importlib.import_module(module), chain)
            return None if ok else f"{module} has no {chain}"
        more, dot, chain = chain.partition(".")
        head = f"{head}.{more}"
    return "no such module, package or file"


@cache
def package_definitions() -> tuple[dict[str, list[str]], set[str]]:
    """(class name → the modules defining it, every module-level name assigned) over the
    package's modules."""
    classes: dict[str, list[str]] = {}
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        module = "ipscheduler." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, []).append(module.removesuffix(".__init__"))
            elif isinstance(node, ast.Assign):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return classes, names


def missing_class_attribute(cls: str, chain: str) -> str | None:
    classes, _ = package_definitions()
    if cls not in classes:
        return f"no class {cls} in the package"
    found = [m for m in classes[cls] if has_attributes(getattr(importlib.import_module(m), cls), chain)]
    return None if found else f"{cls} ({', '.join(classes[cls])}) has no {chain}"


def problems(text: str) -> dict[str, str]:
    """Every code span of ``text`` that names a module, class attribute or constant the
    repository lacks, with the reason."""
    found = {}
    for span in code_spans(text):
        why = None
        if PATH.match(span):
            why = missing_path(span)
        elif m := CLASS_ATTRIBUTE.match(span):
            why = missing_class_attribute(m.group(1), m.group(2)[1:])
        elif CONSTANT.match(span) and span not in package_definitions()[1]:
            why = "no such name in the package"
        if why is not None:
            found[span] = why
    return found


def test_every_module_class_and_name_the_page_gives_exists() -> None:
    assert problems(DOC.read_text(encoding="utf-8")) == {}


def test_the_page_names_every_floor_and_wing() -> None:
    """The floors of the package (every subpackage) each have their entry."""
    spans = set(code_spans(DOC.read_text(encoding="utf-8")))
    floors = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    assert [f for f in floors if f"{f}/" not in spans] == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("`underlayip/plugin.py`", {}),
        ("`framework/waiting`", {}),
        ("`cmd/wiring.build`", {}),
        ("`underlayip/pool.PoolView.from_obj`", {}),
        ("`backend/health.py`", {}),
        ("`deploy/13-admission-policies.yaml`, `cni/`", {}),
        ("`ipscheduler.io/ip`, `k8s.v1.cni.cncf.io/networks`, `pkg/scheduler/`", {}),
        ("`underlayip/gone.py`", {"underlayip/gone.py": "no such module, package or file"}),
        ("`framework/nothing`", {"framework/nothing": "no such module, package or file"}),
        (
            "`cmd/wiring.no_such_function`",
            {"cmd/wiring.no_such_function": "ipscheduler.cmd.wiring has no no_such_function"},
        ),
        ("`Cache.snapshot()`, `PoolCache.carry`", {}),
        (
            "`Cache.no_such_method`",
            {"Cache.no_such_method": "Cache (ipscheduler.backend.cache) has no no_such_method"},
        ),
        ("`GoneClass.method`", {"GoneClass.method": "no class GoneClass in the package"}),
        ("`BIND_ANNOTATIONS`", {}),
        ("`NO_SUCH_KEY`", {"NO_SUCH_KEY": "no such name in the package"}),
        ("```\n`underlayip/gone.py`\n```", {}),
    ],
    ids=[
        "file",
        "package-module-without-suffix",
        "module-attribute",
        "module-class-method",
        "top-level-module",
        "repository-paths",
        "api-groups-and-upstream",
        "gone-file",
        "gone-module",
        "gone-function",
        "class-methods",
        "gone-method",
        "gone-class",
        "constant",
        "gone-constant",
        "fenced-block",
    ],
)
def test_a_name_that_is_gone_is_found(text: str, expected: dict[str, str]) -> None:
    assert problems(text) == expected
