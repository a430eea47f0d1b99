"""underlayip/models: the committed NodeIPPool CRD is generated from the pydantic models and has
the expected shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ipscheduler.underlayip.models import crd_yaml

CRD_PATH = Path(__file__).resolve().parents[3] / "crds" / "nodeippools.ipscheduler.io.yaml"


@pytest.fixture(scope="module")
def crd() -> dict[str, Any]:
    loaded = yaml.safe_load(CRD_PATH.read_text())
    assert isinstance(loaded, dict)
    return loaded


@pytest.fixture(scope="module")
def version(crd: dict[str, Any]) -> dict[str, Any]:
    versions = crd["spec"]["versions"]
    assert len(versions) == 1
    v = versions[0]
    assert isinstance(v, dict)
    return v


@pytest.fixture(scope="module")
def schema(version: dict[str, Any]) -> dict[str, Any]:
    s = version["schema"]["openAPIV3Schema"]
    assert isinstance(s, dict)
    return s


def test_committed_crd_is_up_to_date() -> None:
    assert CRD_PATH.read_text() == crd_yaml(), "run `make crds`"


def test_generated_yaml_parses_to_the_same_object(crd: dict[str, Any]) -> None:
    assert yaml.safe_load(crd_yaml()) == crd


def test_identity(crd: dict[str, Any], version: dict[str, Any]) -> None:
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == "nodeippools.ipscheduler.io"
    spec = crd["spec"]
    assert spec["group"] == "ipscheduler.io"
    assert spec["scope"] == "Cluster"
    names = spec["names"]
    assert names["kind"] == "NodeIPPool"
    assert names["plural"] == "nodeippools"
    assert names["singular"] == "nodeippool"
    assert names["shortNames"] == ["nip"]
    assert version["name"] == "v1alpha1"
    assert version["served"] is True
    assert version["storage"] is True


def test_status_subresource(version: dict[str, Any]) -> None:
    assert version["subresources"] == {"status": {}}


PRINTER_COLUMNS = [
    ("Node", "string", ".spec.nodeName"),
    ("Capacity", "integer", ".status.capacity"),
    ("Allocated", "integer", ".status.allocated"),
    ("Free", "integer", ".status.free"),
    ("Retained", "integer", ".status.retained"),
    ("Age", "date", ".metadata.creationTimestamp"),
]


def test_printer_columns(version: dict[str, Any]) -> None:
    columns = version["additionalPrinterColumns"]
    default_columns = [(c["name"], c["type"], c["jsonPath"]) for c in columns if not c.get("priority")]
    assert default_columns == PRINTER_COLUMNS


@pytest.mark.parametrize(
    ("path", "key", "expected"),
    [
        (("spec",), "required", ["nodeName"]),
        (("spec", "capacity"), "minimum", 0),
        (("spec", "capacity"), "type", "integer"),
        (("spec", "nodeName"), "minLength", 1),
        (("spec", "addresses"), "type", "array"),
        (("status", "allocations"), "type", "object"),
        (("status", "free"), "type", "integer"),
    ],
    ids=[
        "spec-requires-node-name",
        "capacity-minimum-0",
        "capacity-integer",
        "node-name-non-empty",
        "addresses-array",
        "allocations-map",
        "free-integer",
    ],
)
def test_schema(schema: dict[str, Any], path: tuple[str, ...], key: str, expected: Any) -> None:
    node = schema
    for i, part in enumerate(path):
        node = node["properties"][part]
        assert isinstance(node, dict), path[: i + 1]
    assert node[key] == expected


def test_schema_top_level(schema: dict[str, Any]) -> None:
    assert schema["type"] == "object"
    assert "spec" in schema["required"]
    assert set(schema["properties"]) >= {"apiVersion", "kind", "metadata", "spec", "status"}
    assert "nodeName" in schema["properties"]["spec"]["properties"]
