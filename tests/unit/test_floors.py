"""The generic floors speak only Kubernetes (ARCHITECTURE.md): the names of what the
underlayip wing writes on pods, and its NodeIPPool resource and cluster events, live in that
wing (import-linter keeps the imports out; this keeps the literals and names out)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "ipscheduler"
GENERIC = ("framework", "plugins", "backend", "scheduler", "kube")
OUR_ANNOTATION = re.compile(r"ipscheduler\.io/(ip|pool|network)\b")
POOL_NAME = re.compile(r"node_?ip_?pool|address_?released", re.IGNORECASE)
"""An identifier about the NodeIPPool resource or its events (prose may name them)."""


@pytest.mark.parametrize("floor", GENERIC)
def test_a_generic_floor_names_no_annotation_of_the_underlayip_wing(floor: str) -> None:
    files = sorted((PACKAGE / floor).rglob("*.py"))
    assert files, f"no modules under {floor}/"
    found = [
        f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
        for path in files
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if OUR_ANNOTATION.search(line)
    ]
    assert found == []


@pytest.mark.parametrize("floor", GENERIC)
def test_a_generic_floor_has_no_name_for_the_pool_resource_or_its_events(floor: str) -> None:
    found = []
    for path in sorted((PACKAGE / floor).rglob("*.py")):
        tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
        found += [
            f"{path.relative_to(PACKAGE)}:{t.start[0]}: {t.string}"
            for t in tokens
            if t.type == tokenize.NAME and POOL_NAME.search(t.string)
        ]
    assert found == []


def test_the_pool_rule_would_catch_what_it_forbids() -> None:
    assert POOL_NAME.search("NODE_IP_POOL_CHANGE")
    assert POOL_NAME.search("ADDRESS_RELEASED")
    assert POOL_NAME.search("NodeIPPool")
    assert not POOL_NAME.search("NODE_ADD")


GROUP_API = re.compile(r"scheduling\.x-k8s\.io|pod-group")
"""What names the coscheduling wing's PodGroup API (its group and its label)."""


@pytest.mark.parametrize("floor", GENERIC)
def test_a_generic_floor_names_nothing_of_the_podgroup_api(floor: str) -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
        for path in sorted((PACKAGE / floor).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if GROUP_API.search(line)
    ]
    assert found == []


def _imports() -> dict[str, set[str]]:
    """Module → the ipscheduler modules it imports, every import counted: top-level, inside
    a function (lazy) or under ``TYPE_CHECKING``."""

    modules = {
        ".".join(("ipscheduler", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(
            ".__init__"
        ): path
        for path in PACKAGE.rglob("*.py")
    }
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                    for a in node.names
                ]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def test_no_two_modules_import_each_other_even_lazily() -> None:
    """No import cycle of any length (a strongly connected component of more than one module),
    whatever the import's kind: a lazy or type-only import still ties two rooms together."""
    graph = _imports()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = [stack.pop()]
            while component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert len(graph) > 50 and cycles == []


def test_docstrings_cite_no_internal_numbers_and_no_file_outside_the_repository() -> None:
    """A reader of the code has the repository only: no "issue 21" or "seed 002" (the
    project's own tracker), no path to a file beside the checkout."""
    internal = re.compile(r"\b(issue|seed) \d+\b|\.\./shared|shared/NOTES")
    found = [
        f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if internal.search(line)
    ]
    assert found == []


MODULE_LINES = 550
"""A module longer than this says in its docstring why its size is earned."""


def test_a_long_module_says_why_its_size_is_earned() -> None:
    """Rooms stay small: a module over :data:`MODULE_LINES` lines carries a docstring
    paragraph beginning ``Size:`` that says why it is one module."""

    long = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > MODULE_LINES:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if not re.search(r"^Size: \S", doc, re.MULTILINE):
                long[str(path.relative_to(PACKAGE))] = text.count("\n")
    assert long == {}
