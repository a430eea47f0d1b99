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


ROOT = PACKAGE.parents[1]
INTERNAL = re.compile(r"\b(issues?|seeds?)\s+#?\d+\b|(?<![\w/&])#\d+\b|\.\./shared|shared/NOTE[S]", re.I)
"""An internal number ("issue N", "#N", "seed N": the project's own tracker and the documents
it grew from) or a path beside the checkout."""
UPSTREAM_PR = re.compile(r"\bPR\s+$")
"""What comes before an upstream pull request's bare number (``kubernetes PR #N``); one named
``kubernetes#N`` does not match :data:`INTERNAL` at all."""
CITING = ("operator", "hack", "tests", "docs", "deploy", "cni", "examples")
"""The folders whose code and prose are read for internal numbers, beside the top-level pages."""


def internal_citations(text: str) -> list[int]:
    """The lines (1-based) of ``text`` where an internal number or outside path is cited."""
    return [
        text.count("\n", 0, m.start()) + 1
        for m in INTERNAL.finditer(text)
        if not (m.group().startswith("#") and UPSTREAM_PR.search(text[max(0, m.start() - 20) : m.start()]))
    ]


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ("history by date (2026-11-25, 533ce05)", []),
        ("upstream: whereabouts#176, kubernetes PR\n    #131345, cilium#40999", []),
        ("see issue 21", [1]),
        ("the fix\n(Issue #41)", [2]),
        ("closes #41", [1]),
        ("from seed 002", [1]),
        ("as ../shared/NOTES.md says", [1]),
    ],
    ids=["date-and-commit", "upstream", "issue", "issue-hash", "bare-hash", "seed", "outside-path"],
)
def test_internal_citations(text: str, lines: list[int]) -> None:
    assert internal_citations(text) == lines


def test_nothing_cites_internal_numbers_or_files_outside_the_repository() -> None:
    """A reader has the repository only: no internal number (the project's own tracker, the
    documents it grew from) in its code, tests, tools or documentation, whose history goes by
    date and commit; no path to a file beside the checkout."""
    files = [*ROOT.glob("*.md")] + [
        path
        for folder in CITING
        for path in (ROOT / folder).rglob("*")
        if path.suffix in {".py", ".md", ".go", ".yaml", ".sh"} and "__pycache__" not in path.parts
    ]
    found = [
        f"{rel}:{n}"
        for path in sorted(files)
        if path != Path(__file__).resolve()  # its examples of what is refused
        for n in internal_citations(path.read_text(encoding="utf-8"))
        for rel in [path.relative_to(ROOT).as_posix()]
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
