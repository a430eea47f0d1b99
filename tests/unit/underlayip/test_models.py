"""underlayip/models: the committed NodeIPPool CRD is generated from the pydantic models and has
the expected shape (every property described, conditions a map by type); the pool-size ceiling
is computed from etcd's limit and enforced."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ipscheduler.underlayip import models
from ipscheduler.underlayip.models import crd_yaml
from ipscheduler.underlayip.pool import PoolContext, ready_condition
from tests.builders import pool

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
    ("Nominated", "integer", ".status.nominated"),
    ("Releasing", "integer", ".status.releasing"),
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


# --------------------------------------------------------------------------- descriptions


def _properties(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every property of the schema, items and map values included, with its path."""
    for name, child in node.get("properties", {}).items():
        yield f"{path}.{name}", child
        yield from _properties(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _properties(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield f"{path}{{}}", node["additionalProperties"]
        yield from _properties(node["additionalProperties"], f"{path}{{}}")


def test_every_property_has_a_description(schema: dict[str, Any]) -> None:
    paths = dict(_properties(schema))
    assert {".spec.capacity", ".status.conditions", ".status.conditions[].type"} <= set(paths)
    missing = sorted(path for path, node in paths.items() if not node.get("description"))
    assert missing == [".metadata"], "kubectl explain shows nothing for these"  # metadata: its own
    assert schema["properties"]["metadata"] == {"type": "object"}  # the API server allows no more


@pytest.mark.parametrize(
    "field", ["type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"]
)
def test_each_condition_field_is_described(schema: dict[str, Any], field: str) -> None:
    item = schema["properties"]["status"]["properties"]["conditions"]["items"]
    assert len(item["properties"][field]["description"]) > 10


def test_conditions_are_a_map_keyed_by_type(schema: dict[str, Any]) -> None:
    conditions = schema["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert "type" in conditions["items"]["required"]  # a map key must be required


# --------------------------------------------------------------------------- the pool-size ceiling


def test_the_ceiling_is_computed_from_the_worst_case_allocation() -> None:
    uid, wire = models.worst_case_allocation()
    # Every field but releasingSince: a Releasing allocation (one byte longer a phase, never a
    # reservedBy) is the shorter shape.
    # Every field but releasingSince (above) and ips: a dual-stack allocation is longer, but
    # holds two addresses (test_a_dual_stack_allocation_takes_less_per_address).
    assert set(wire) | {"releasingSince", "ips", "interface"} == {
        f.alias or name for name, f in models.Allocation.model_fields.items()
    }
    assert wire["phase"] == "Retained" and "reservedBy" in wire
    releasing = {**wire, "phase": "Releasing", "releasingSince": wire["retainedSince"]}
    del releasing["retainedSince"], releasing["reservedBy"]
    assert len(json.dumps(releasing)) < len(json.dumps(wire))
    entry = len(json.dumps({uid: wire}, separators=(",", ":"))) - 1
    assert models.ALLOCATION_BYTES > entry > 1200
    assert models.RESERVED_BYTES == 2 * models.SPEC_BYTES + models.OTHER_BYTES
    assert models.MAX_POOL_ADDRESSES == (models.ETCD_MAX_REQUEST_BYTES - models.RESERVED_BYTES) // (
        models.SAFETY_MARGIN * models.ALLOCATION_BYTES
    )
    assert models.MAX_POOL_ADDRESSES == 448  # the figure the module docstring and docs/configuration.md give


def test_a_dual_stack_allocation_takes_less_per_address() -> None:
    """The ceiling counts addresses: a worst-case allocation holding two (``ips``) adds fewer
    than twice :data:`ALLOCATION_BYTES`, so a pool of dual-stack pods stays within it."""
    uid, wire = models.worst_case_allocation()
    dual = {**wire, "ips": ["f" * models.IP_TEXT_MAX] * models.MAX_ALLOCATION_IPS}
    entry = len(json.dumps({uid: dual}, separators=(",", ":"))) - 1
    managed = (
        len(json.dumps({f"f:{uid}": {".": {}, **{f"f:{k}": {} for k in dual}}}, separators=(",", ":"))) - 1
    )
    assert models.ALLOCATION_BYTES < entry + managed < 2 * models.ALLOCATION_BYTES


def test_a_pool_of_further_interfaces_keeps_nearly_the_whole_margin() -> None:
    """An allocation naming an interface (at its 15-character maximum) is 47 bytes longer than
    the worst case: a pool of MAX_POOL_ADDRESSES of them leaves a margin of 1.94 (module doc)."""
    uid, wire = models.worst_case_allocation()
    named = {**wire, "interface": "i" * models.IFNAME_MAX}
    entry = len(json.dumps({uid: named}, separators=(",", ":"))) - 1
    fields = {f"f:{k}": {} for k in named}
    managed = len(json.dumps({f"f:{uid}": {".": {}, **fields}}, separators=(",", ":"))) - 1
    assert entry + managed - models.ALLOCATION_BYTES == 47
    room = models.ETCD_MAX_REQUEST_BYTES - models.RESERVED_BYTES
    assert round(room / (models.MAX_POOL_ADDRESSES * (entry + managed)), 2) == 1.94


def test_a_full_worst_case_pool_fits_half_of_etcds_limit() -> None:
    """MAX_POOL_ADDRESSES worst-case allocations in a worst-case status, with their managed
    fields, leave the margin free."""
    uid, wire = models.worst_case_allocation()
    uids = [f"{i:08x}{uid[8:]}" for i in range(models.MAX_POOL_ADDRESSES)]
    status = {"allocations": dict.fromkeys(uids, wire)}
    managed = {f"f:{u}": {".": {}, **{f"f:{k}": {} for k in wire}} for u in uids}
    size = len(json.dumps([status, managed], separators=(",", ":"))) + models.RESERVED_BYTES
    assert size <= models.ETCD_MAX_REQUEST_BYTES / models.SAFETY_MARGIN + models.RESERVED_BYTES
    assert size < models.ETCD_MAX_REQUEST_BYTES


def test_the_crd_caps_capacity_and_large_cidrs_at_the_ceiling(schema: dict[str, Any]) -> None:
    spec = schema["properties"]["spec"]
    assert spec["properties"]["capacity"]["maximum"] == models.MAX_POOL_ADDRESSES
    (rule,) = spec["x-kubernetes-validations"]
    assert "has(self.capacity)" in rule["rule"] and "prefixLength() >= " in rule["rule"]
    assert f"{models.MIN_PREFIX_V4} : {models.MIN_PREFIX_V6}" in rule["rule"]
    assert str(models.MAX_POOL_ADDRESSES) in rule["message"]
    # The shortest CIDRs allowed without capacity hold no more than the ceiling; one bit more does.
    assert (
        2 ** (32 - models.MIN_PREFIX_V4) - 2
        <= models.MAX_POOL_ADDRESSES
        < 2 ** (33 - models.MIN_PREFIX_V4) - 2
    )
    assert 2 ** (128 - models.MIN_PREFIX_V6) <= models.MAX_POOL_ADDRESSES < 2 ** (129 - models.MIN_PREFIX_V6)


CEILING = models.MAX_POOL_ADDRESSES


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"addresses": ["10.0.0.0/16"]}, "spec.addresses: 65534 addresses (after exclude) exceed the"),
        ({"addresses": ["10.0.0.1-10.0.1.200"]}, "spec.addresses: 456 addresses (after exclude) exceed"),
        ({"addresses": ["10.0.0.0/24", "10.0.1.0/24"]}, "spec.addresses: 508 addresses"),
        ({"addresses": ["fd00::/64"]}, f"spec.addresses: {2**64} addresses"),
        ({"capacity": CEILING + 1}, f"spec.capacity: capacity {CEILING + 1} exceeds the"),
        ({"addresses": ["10.0.0.0/16"], "capacity": CEILING + 1}, "spec.capacity: capacity"),
    ],
    ids=["cidr", "range", "two-cidrs", "ipv6-64", "count-only-capacity", "capacity-above"],
)
def test_a_pool_above_the_ceiling_is_invalid_with_a_clear_message(spec: dict[str, Any], error: str) -> None:
    p = pool(**spec)
    assert p.spec_error is not None and p.spec_error.startswith(error)
    assert f"the pool-size ceiling of {CEILING} (the most a pool's status can record within etcd's" in (
        p.spec_error
    )
    assert f"set spec.capacity to at most {CEILING}, or split the addresses" in p.spec_error
    assert p.capacity() == 0
    assert ready_condition(p, PoolContext()) == ("False", "InvalidSpec", p.spec_error)


@pytest.mark.parametrize(
    ("spec", "capacity"),
    [
        ({"addresses": ["10.0.0.0/24"]}, 254),
        ({"addresses": ["10.0.0.1-10.0.1.200"], "exclude": ["10.0.1.193-10.0.1.200"]}, CEILING),
        (
            {
                "addresses": ["10.0.0.0/23"],
                "subnets": [{"cidr": "10.0.0.0/23", "gateway": "10.0.0.1"}],
                "exclude": ["10.0.1.0/26"],
            },
            510 - 64 - 1,
        ),
        ({"addresses": ["10.0.0.0/16"], "capacity": CEILING}, CEILING),
        ({"addresses": ["fd00::/64"], "capacity": 10}, 10),
        ({"capacity": CEILING}, CEILING),
    ],
    ids=[
        "cidr-24",
        "range-minus-exclude",
        "minus-exclude-and-gateway",
        "capped-cidr",
        "capped-ipv6",
        "count-only",
    ],
)
def test_a_pool_within_the_ceiling_is_valid(spec: dict[str, Any], capacity: int) -> None:
    p = pool(**spec)
    assert p.spec_error is None
    assert p.capacity() == capacity


def test_a_malformed_entry_is_reported_as_such_not_as_a_size() -> None:
    p = pool(addresses=["10.0.0.0/16", "10.0.0.300"])
    assert p.spec_error is not None and "10.0.0.300" in p.spec_error and "ceiling" not in p.spec_error
