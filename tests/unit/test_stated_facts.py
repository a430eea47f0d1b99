"""What the project states about itself agrees with what it is: the dependency floors of
pyproject.toml with the APIs the code imports, the Go and Kubernetes versions of the README
and docs/ with cni/go.mod and the chart's kubeVersion, the event API they name with the one
the code writes, the pool-size ceiling and the annotations they document with the code's,
the CRDs' headers with their generator, their printer columns' descriptions.

Each test reads the files as committed; none needs a cluster or the network.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "ipscheduler"
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOCS = "\n".join(p.read_text(encoding="utf-8") for p in DOC_FILES)
"""README.md and docs/*.md: what the project states about itself to its users."""
CHART = ROOT / "deploy" / "chart" / "ipscheduler"
CRD_FILES = sorted([*(ROOT / "crds").glob("*.yaml"), *(CHART / "crds").glob("*.yaml")])


def _pyproject() -> dict[str, object]:
    import tomllib

    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def _dependencies() -> dict[str, Requirement]:
    """pyproject.toml's ``[project] dependencies``, by canonical distribution name."""
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    reqs = [Requirement(r) for r in project["dependencies"]]
    return {canonicalize_name(r.name): r for r in reqs}


def _floor(req: Requirement) -> Version:
    """The lowest version ``req`` admits: its one ``>=`` bound."""
    (floor,) = [Version(s.version) for s in req.specifier if s.operator == ">="]
    return floor


def _imports() -> set[str]:
    """Every module the operator's code imports (``a.b`` of ``import a.b`` and ``from a.b
    import c``, absolute imports only)."""
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module)
    return found


# ------------------------------------------------------------------- dependencies


def test_every_third_party_import_is_a_declared_dependency() -> None:
    """A module the code imports comes from a distribution pyproject.toml names, not from
    one that happens to be installed with another (aiohttp with kubernetes-asyncio)."""
    providers = packages_distributions()
    declared = set(_dependencies())
    missing = {}
    for module in sorted(_imports()):
        top = module.split(".")[0]
        if top in sys.stdlib_module_names or top == "ipscheduler":
            continue
        dists = {canonicalize_name(d) for d in providers.get(top, [])}
        assert dists, f"{module}: no installed distribution provides it"
        if not dists & declared:
            missing[module] = sorted(dists)
    assert missing == {}, f"imported but not in pyproject.toml's dependencies: {missing}"


FLOORS = [
    # (distribution, floor, the module the code imports, first in that release)
    ("prometheus-client", "0.24.0", "prometheus_client.aiohttp"),
    ("python-json-logger", "3.1.0", "pythonjsonlogger.json"),
]
"""Modules that appeared in a release later than the distribution's first: the floor must
be that release (checked against each release's files: prometheus_client/aiohttp/ is in
0.24.0's wheel and not in 0.23.1's; pythonjsonlogger/json.py in 3.1.0's, not 3.0.1's)."""


@pytest.mark.parametrize(("dist", "floor", "module"), FLOORS, ids=[f[0] for f in FLOORS])
def test_a_dependencys_floor_is_the_first_release_with_the_module_imported(
    dist: str, floor: str, module: str
) -> None:
    assert module in _imports(), f"the code no longer imports {module}: drop this row"
    assert _floor(_dependencies()[dist]) == Version(floor), f"{dist}: {module} is new in {floor}"


def section(heading: str) -> str:
    """The text under the one heading ``heading`` (any level) of README.md and docs/*.md, up
    to the next heading."""
    found = re.findall(rf"^#+ {re.escape(heading)}\n(.*?)(?=^#+ |\Z)", DOCS, flags=re.MULTILINE | re.DOTALL)
    assert len(found) == 1, f"{len(found)} sections {heading!r} in README.md and docs/"
    return str(found[0])


# ----------------------------------------------------------- versions in the docs


def test_the_docs_go_version_is_cni_go_mods() -> None:
    """Every "Go >= X" of README.md and docs/ is the ``go`` line of cni/go.mod (``make test``
    builds the plugin with the local toolchain)."""
    gomod = (ROOT / "cni" / "go.mod").read_text(encoding="utf-8")
    (go,) = re.findall(r"^go (\d+\.\d+)(?:\.\d+)?$", gomod, flags=re.MULTILINE)
    stated = re.findall(r"Go >= (\d+\.\d+)", DOCS)
    assert stated and set(stated) == {go}, f"the docs say Go >= {stated}, cni/go.mod says go {go}"


def test_the_docs_minimum_kubernetes_is_the_charts_kube_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    m = re.fullmatch(r">=\s*1\.(\d+)\.0-0", chart["kubeVersion"])
    assert m, chart["kubeVersion"]
    (oldest,) = re.findall(r"GA since v1\.(\d+), the oldest release we expect\s+to work", DOCS)
    assert oldest == m.group(1), f"docs: v1.{oldest}; Chart.yaml kubeVersion: {chart['kubeVersion']}"


def test_the_docs_name_the_event_api_the_code_writes() -> None:
    """The recorder posts core/v1 Events (CoreV1Api), and the docs say so."""
    import inspect

    from kubernetes_asyncio.client import CoreV1Api

    from ipscheduler.kube.client import KubeApi

    patch = inspect.getsource(KubeApi.patch_event)
    (call,) = re.findall(r"self\.core\.(\w+)\(", patch)
    assert hasattr(CoreV1Api, call), call
    create = inspect.getsource(KubeApi.create_event)
    assert re.search(r'send_json\("POST", path', create), create
    assert re.search(r'path = f"/api/v1/namespaces/\{[^}]*\}/events"', create), create
    for source in (patch, create):
        assert "events.k8s.io" not in source
    compatibility = section("Compatibility and stability").split("\n- **The", 1)[0]
    assert "core/v1 Events" in compatibility
    assert "`events.k8s.io/v1`," not in compatibility


def test_the_docs_pool_size_ceiling_is_the_models() -> None:
    from ipscheduler.underlayip.models import MAX_POOL_ADDRESSES

    stated = re.findall(r"Pool-size ceiling: (\d+) addresses", DOCS)
    assert stated == [str(MAX_POOL_ADDRESSES)], f"docs: {stated}; models: {MAX_POOL_ADDRESSES}"
    assert f"ceiling of {MAX_POOL_ADDRESSES}" in DOCS


def _names_the_code_defines() -> dict[str, str]:
    """Every annotation, label, finalizer and extended resource the code reads or writes on
    Kubernetes objects, by the constant that holds it."""
    from ipscheduler.coscheduling import models as podgroups
    from ipscheduler.underlayip import models, publisher

    names = {
        f"models.{k}": v
        for k, v in vars(models).items()
        if k.startswith("ANNOTATION_") and k != "ANNOTATION_PREFIX" and isinstance(v, str)
    }
    names |= {
        "models.FINALIZER": models.FINALIZER,
        "publisher.RESOURCE": publisher.RESOURCE,
        "publisher.RELEASED_ANNOTATION": publisher.RELEASED_ANNOTATION,
        "coscheduling.POD_GROUP_LABEL": podgroups.POD_GROUP_LABEL,
    }
    return names


def test_the_docs_list_every_annotation_label_and_finalizer_the_code_uses() -> None:
    rows = section("Annotations, labels and finalizers")
    documented = set(re.findall(r"^\| `([^`]+)` \|", rows, flags=re.MULTILINE))
    missing = {k: v for k, v in _names_the_code_defines().items() if v not in documented}
    assert missing == {}, "not in docs/configuration.md's table of annotations"
    unknown = {
        name
        for name in documented
        if name.startswith(("ipscheduler.io/", "scheduling.x-k8s.io/"))
        and name not in _names_the_code_defines().values()
    }
    assert unknown == set(), "documented, but the code defines no such name"


# ------------------------------------------------------------------------ CRDs


@pytest.mark.parametrize("path", CRD_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_crds_header_names_its_generator_and_the_command_writes_it(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    m = re.match(r"# Generated from (\S+) by `python -m ipscheduler (crd(?: \w+)?)`\. Do not edit\.\n", text)
    assert m, text.splitlines()[0]
    source, command = m.groups()
    assert (ROOT / source).is_file(), f"{path.name}'s header names {source}, which does not exist"
    assert "def crd_yaml" in (ROOT / source).read_text(encoding="utf-8"), source
    proc = subprocess.run(
        [sys.executable, "-m", "ipscheduler", *command.split()],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert proc.stdout == text, f"{path} is not what its header's command prints: run `make crds`"


@pytest.mark.parametrize("path", CRD_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_printer_column_has_a_description(path: Path) -> None:
    crd = yaml.safe_load(path.read_text(encoding="utf-8"))
    for version in crd["spec"]["versions"]:
        columns = version["additionalPrinterColumns"]
        assert columns
        for column in columns:
            assert len(column.get("description", "")) > 10, f"{version['name']} column {column['name']}"


def test_a_printer_column_without_a_description_anywhere_is_refused() -> None:
    from ipscheduler.framework.crdschema import printer_columns

    schema = {
        "properties": {"spec": {"properties": {"size": {"type": "integer", "description": "How many."}}}}
    }
    assert printer_columns([{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}], schema) == [
        {"name": "Size", "type": "integer", "jsonPath": ".spec.size", "description": "How many."}
    ]
    with pytest.raises(ValueError, match=r"printer column Other \(\.spec\.other\): no description"):
        printer_columns([{"name": "Other", "type": "string", "jsonPath": ".spec.other"}], schema)
