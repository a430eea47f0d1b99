"""Unit tests for ipscheduler.framework.types and ipscheduler.framework.quantity (no server)."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pytest

from ipscheduler.framework.quantity import parse_quantity
from ipscheduler.framework.resources import qos_class
from ipscheduler.framework.types import NodeInfo, PodInfo, Taint, Toleration

# --------------------------------------------------------------------------- parse_quantity


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100m", Decimal("0.1")),
        ("1Gi", Decimal(2**30)),
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),
        ("1e-3", Decimal("0.001")),
        ("0.5", Decimal("0.5")),
        (".5", Decimal("0.5")),
        ("1.5Gi", Decimal(3 * 2**29)),
        ("2", Decimal(2)),
        ("0", Decimal(0)),
        ("-1", Decimal(-1)),
        ("+1k", Decimal(1000)),
        ("128974848", Decimal(128974848)),
        ("129M", Decimal(129_000_000)),
        ("123Mi", Decimal(123 * 2**20)),
        ("1Ki", Decimal(1024)),
        ("1Ti", Decimal(2**40)),
        ("1Pi", Decimal(2**50)),
        ("1Ei", Decimal(2**60)),
        ("1E", Decimal(10**18)),
        ("1P", Decimal(10**15)),
        ("1T", Decimal(10**12)),
        ("1G", Decimal(10**9)),
        ("1k", Decimal(1000)),
        ("500u", Decimal("0.0005")),
        ("3n", Decimal("0.000000003")),
        (4, Decimal(4)),
        (0.25, Decimal("0.25")),
    ],
    ids=repr,
)
def test_parse_quantity(text: Any, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "abc",
        "1Gib",
        "1 Gi",
        "1gi",
        "1K",
        "1e",
        "e3",
        "1e3Gi",
        "1.5.5",
        "--1",
        "1m1",
        "Gi",
        None,
        True,
        [],
        {},
    ],
    ids=repr,
)
def test_parse_quantity_invalid(text: Any) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(text)


def test_parse_quantity_huge_exponent_raises_value_error() -> None:
    with pytest.raises(ValueError):
        parse_quantity("1e1000000")


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_parse_quantity_non_finite_float(value: float) -> None:
    with pytest.raises(ValueError):
        parse_quantity(value)


# --------------------------------------------------------------------------- qos_class


def ctr(requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None) -> dict[str, Any]:
    """A container with the given resources."""
    res: dict[str, Any] = {}
    if requests is not None:
        res["requests"] = requests
    if limits is not None:
        res["limits"] = limits
    return {"name": "c", "resources": res}


CM = {"cpu": "1", "memory": "1Gi"}

QOS_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("no-containers", {}, "BestEffort"),
    ("no-resources", {"containers": [{"name": "c"}]}, "BestEffort"),
    ("empty-resources", {"containers": [ctr({}, {})]}, "BestEffort"),
    (
        "only-extended-resources",
        {"containers": [ctr({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "1"})]},
        "BestEffort",
    ),
    ("only-ephemeral-storage", {"containers": [ctr({"ephemeral-storage": "1Gi"})]}, "BestEffort"),
    ("zero-requests-ignored", {"containers": [ctr({"cpu": "0", "memory": "0"})]}, "BestEffort"),
    ("cpu-request-only", {"containers": [ctr({"cpu": "100m"})]}, "Burstable"),
    ("memory-limit-only", {"containers": [ctr(limits={"memory": "1Gi"})]}, "Burstable"),
    ("requests-equal-limits", {"containers": [ctr(CM, CM)]}, "Guaranteed"),
    (
        "requests-defaulted-from-limits",
        {"containers": [ctr({"cpu": "500m", "memory": "256Mi"}, {"cpu": "500m", "memory": "256Mi"})]},
        "Guaranteed",
    ),
    ("mixed-units-equal", {"containers": [ctr({"cpu": "1000m", "memory": "1024Mi"}, CM)]}, "Guaranteed"),
    (
        "exponent-units-equal",
        {"containers": [ctr({"cpu": "1", "memory": "1e9"}, {"cpu": "1", "memory": "1G"})]},
        "Guaranteed",
    ),
    ("requests-below-limits", {"containers": [ctr({"cpu": "500m", "memory": "1Gi"}, CM)]}, "Burstable"),
    ("cpu-limit-only-no-memory", {"containers": [ctr({"cpu": "1"}, {"cpu": "1"})]}, "Burstable"),
    (
        "extended-resource-ignored-for-guaranteed",
        {"containers": [ctr({**CM, "nvidia.com/gpu": "1"}, {**CM, "nvidia.com/gpu": "2"})]},
        "Guaranteed",
    ),
    ("two-guaranteed-containers", {"containers": [ctr(CM, CM), ctr(CM, CM)]}, "Guaranteed"),
    ("one-container-without-limits", {"containers": [ctr(CM, CM), ctr()]}, "Burstable"),
    (
        "init-and-app-guaranteed",
        {
            "containers": [ctr(CM, CM)],
            "initContainers": [ctr({"cpu": "2", "memory": "2Gi"}, {"cpu": "2", "memory": "2Gi"})],
        },
        "Guaranteed",
    ),
    ("init-container-without-limits", {"containers": [ctr(CM, CM)], "initContainers": [ctr()]}, "Burstable"),
    (
        "init-container-requests-counted",
        {"containers": [ctr()], "initContainers": [ctr({"cpu": "1"})]},
        "Burstable",
    ),
    ("malformed-quantity-ignored", {"containers": [ctr({"cpu": "lots"}, {"cpu": "lots"})]}, "BestEffort"),
    ("malformed-containers-type", {"containers": "nope"}, "BestEffort"),
    ("malformed-resources-type", {"containers": [{"resources": ["cpu"]}, "x"]}, "BestEffort"),
]


@pytest.mark.parametrize(("spec", "expected"), [c[1:] for c in QOS_CASES], ids=[c[0] for c in QOS_CASES])
def test_qos_class(spec: dict[str, Any], expected: str) -> None:
    assert qos_class(spec) == expected


def test_qos_class_limits_only_is_guaranteed() -> None:
    assert qos_class({"containers": [ctr(limits=CM)]}) == "Guaranteed"


# --------------------------------------------------------------------------- Taint / Toleration


def test_taint_str_and_from_obj() -> None:
    assert str(Taint("dedicated", "gpu", "NoSchedule")) == "{dedicated: gpu}"
    assert str(Taint("k")) == "{k: }"
    assert Taint.from_obj({"key": "k", "effect": "NoExecute"}) == Taint("k", "", "NoExecute")
    assert Taint.from_obj({"value": "v"}) is None
    assert Taint.from_obj("k=v:NoSchedule") is None


def test_toleration_from_obj() -> None:
    raw = {"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30}
    assert Toleration.from_obj(raw) == Toleration("k", "Exists", "", "NoSchedule")
    assert Toleration.from_obj({"key": 1, "value": None}) == Toleration()


# --------------------------------------------------------------------------- PodInfo.from_obj

MIN_POD_META = {"uid": "u1", "namespace": "ns", "name": "p"}


def test_pod_from_minimal_body() -> None:
    pod = PodInfo.from_obj({"metadata": dict(MIN_POD_META)})
    zero = {"cpu": Decimal(0), "memory": Decimal(0)}  # no containers: no scoring defaults either
    assert pod == PodInfo(uid="u1", namespace="ns", name="p", nonzero_requests=zero)
    assert pod.key == "ns/p"
    assert pod.scheduler_name == "default-scheduler"
    assert pod.phase == "Pending"
    assert pod.priority == 0
    assert pod.qos_class == "BestEffort"
    assert not pod.bound
    assert not pod.terminal
    assert not pod.deleting


def test_pod_from_full_body() -> None:
    body = {
        "metadata": {
            **MIN_POD_META,
            "creationTimestamp": "2024-05-01T10:00:00Z",
            "deletionTimestamp": "2024-05-01T11:00:00Z",
            "annotations": {"ipscheduler.io/pool": "blue", "bad": 1},
            "resourceVersion": "42",
        },
        "spec": {
            "schedulerName": "ip-scheduler",
            "nodeName": "node-a",
            "priority": 1000,
            "nodeSelector": {"zone": "a"},
            "affinity": {"nodeAffinity": {}},
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "hostNetwork": True,
            "schedulingGates": [{"name": "gate"}],
            "containers": [ctr(CM, CM)],
        },
        "status": {"phase": "Succeeded"},
    }
    pod = PodInfo.from_obj(body)
    assert pod.scheduler_name == "ip-scheduler"
    assert pod.node_name == "node-a"
    assert pod.bound
    assert pod.terminal
    assert pod.deleting
    assert pod.priority == 1000
    assert pod.qos_class == "Guaranteed"
    assert pod.creation == datetime.datetime(2024, 5, 1, 10, tzinfo=datetime.UTC)
    assert pod.node_selector == {"zone": "a"}
    assert pod.affinity == {"nodeAffinity": {}}
    assert pod.tolerations == (Toleration("k", "Exists"),)
    assert pod.host_network
    assert pod.annotations == {"ipscheduler.io/pool": "blue"}
    assert pod.scheduling_gates == ("gate",)
    assert pod.resource_version == "42"


def test_pod_status_qos_class_wins_over_spec() -> None:
    body = {
        "metadata": dict(MIN_POD_META),
        "spec": {"containers": [ctr(CM, CM)]},
        "status": {"qosClass": "Burstable"},
    }
    assert PodInfo.from_obj(body).qos_class == "Burstable"


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"metadata": None},
        {"metadata": "x"},
        {"metadata": {"namespace": "ns", "name": "p"}},
        {"metadata": {"uid": "u", "name": "p"}},
        {"metadata": {"uid": "u", "namespace": "ns"}},
        {"metadata": {"uid": 1, "namespace": "ns", "name": "p"}},
        {"metadata": {"uid": "u", "namespace": "ns", "name": ""}},
    ],
    ids=[
        "empty",
        "null-metadata",
        "string-metadata",
        "no-uid",
        "no-namespace",
        "no-name",
        "int-uid",
        "empty-name",
    ],
)
def test_pod_from_obj_requires_identity(body: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="pod without"):
        PodInfo.from_obj(body)


MALFORMED_POD_CASES: list[tuple[str, Any, Any, dict[str, Any]]] = [
    # (id, spec, status, expected attributes)
    ("spec-not-dict", "x", {}, {"priority": 0, "tolerations": (), "affinity": {}}),
    ("priority-string", {"priority": "10"}, {}, {"priority": 0}),
    ("priority-bool", {"priority": True}, {}, {"priority": 0}),
    ("priority-negative", {"priority": -5}, {}, {"priority": -5}),
    ("scheduler-name-int", {"schedulerName": 3}, {}, {"scheduler_name": "default-scheduler"}),
    (
        "node-selector-non-str-dropped",
        {"nodeSelector": {"a": "b", "c": 1, "d": None}},
        {},
        {"node_selector": {"a": "b"}},
    ),
    ("node-selector-list", {"nodeSelector": ["a"]}, {}, {"node_selector": {}}),
    ("affinity-list", {"affinity": ["x"]}, {}, {"affinity": {}}),
    ("tolerations-dict", {"tolerations": {"key": "k"}}, {}, {"tolerations": ()}),
    ("host-network-string", {"hostNetwork": "true"}, {}, {"host_network": False}),
    ("scheduling-gates-malformed", {"schedulingGates": "g"}, {}, {"scheduling_gates": ()}),
    ("qos-class-unknown", {}, {"qosClass": "Platinum"}, {"qos_class": "BestEffort"}),
    ("phase-int", {}, {"phase": 3}, {"phase": "Pending"}),
    ("status-not-dict", {}, "x", {"phase": "Pending"}),
]


@pytest.mark.parametrize(
    ("spec", "status", "expected"),
    [c[1:] for c in MALFORMED_POD_CASES],
    ids=[c[0] for c in MALFORMED_POD_CASES],
)
def test_pod_from_malformed_body(spec: Any, status: Any, expected: dict[str, Any]) -> None:
    pod = PodInfo.from_obj(
        {"metadata": {**MIN_POD_META, "creationTimestamp": "yesterday"}, "spec": spec, "status": status}
    )
    assert pod.creation is None
    for attr, value in expected.items():
        assert getattr(pod, attr) == value


# --------------------------------------------------------------------------- NodeInfo.from_obj


def test_node_from_minimal_body() -> None:
    node = NodeInfo.from_obj({"metadata": {"name": "n1"}})
    assert node == NodeInfo(name="n1")
    assert not node.ready
    assert not node.unschedulable
    assert node.taints == ()
    assert node.allocatable == {}


def test_node_from_full_body() -> None:
    body = {
        "metadata": {"name": "n1", "uid": "nu", "labels": {"zone": "a", "bad": 2}},
        "spec": {
            "unschedulable": True,
            "taints": [
                {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                {"key": "bare"},
                {"value": "no-key"},
                "junk",
            ],
        },
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True"},
            ],
            "allocatable": {
                "cpu": "3500m",
                "memory": "1Gi",
                "pods": "110",
                "bad": "lots",
                "hugepages-2Mi": 0,
            },
        },
    }
    node = NodeInfo.from_obj(body)
    assert node.uid == "nu"
    assert node.labels == {"zone": "a"}
    assert node.unschedulable
    assert node.ready
    assert node.taints == (Taint("dedicated", "gpu", "NoSchedule"), Taint("bare"))
    assert node.allocatable == {
        "cpu": Decimal("3.5"),
        "memory": Decimal(2**30),
        "pods": Decimal(110),
        "hugepages-2Mi": Decimal(0),
    }


@pytest.mark.parametrize(
    ("conditions", "ready"),
    [
        ([{"type": "Ready", "status": "True"}], True),
        ([{"type": "Ready", "status": "False"}], False),
        ([{"type": "Ready", "status": "Unknown"}], False),
        ([{"type": "Ready", "status": True}], False),
        ([{"type": "DiskPressure", "status": "True"}], False),
        ("Ready", False),
        (["Ready", None], False),
        (None, False),
    ],
    ids=["true", "false", "unknown", "bool-status", "other-condition", "string", "junk-items", "null"],
)
def test_node_ready_condition(conditions: Any, ready: bool) -> None:
    assert NodeInfo.from_obj({"metadata": {"name": "n"}, "status": {"conditions": conditions}}).ready is ready


@pytest.mark.parametrize(
    "body",
    [
        {"metadata": {"name": "n", "labels": "a=b"}, "spec": "x", "status": ["y"]},
        {"metadata": {"name": "n"}, "spec": {"unschedulable": "true", "taints": {"key": "k"}}},
        {"metadata": {"name": "n"}, "status": {"allocatable": ["cpu"]}},
    ],
    ids=["wrong-section-types", "string-unschedulable-dict-taints", "allocatable-list"],
)
def test_node_from_malformed_body(body: dict[str, Any]) -> None:
    node = NodeInfo.from_obj(body)
    assert node == NodeInfo(name="n")


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"metadata": None},
        {"metadata": {"name": ""}},
        {"metadata": {"name": 5}},
        {"metadata": {"uid": "u"}},
    ],
    ids=["empty", "null-metadata", "empty-name", "int-name", "no-name"],
)
def test_node_from_obj_requires_name(body: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"node without metadata\.name"):
        NodeInfo.from_obj(body)


def test_node_from_obj_survives_huge_allocatable() -> None:
    node = NodeInfo.from_obj({"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "1e1000000"}}})
    assert node.name == "n"


def _bound_body(uid: str, ip: str) -> dict[str, Any]:
    return {
        "metadata": {
            "uid": uid,
            "namespace": "default",
            "name": f"web-{uid}",
            "labels": {"app": "web", "pod-template-hash": "5d9c"},
            "annotations": {
                "ipscheduler.io/ip": ip,
                "kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z",
            },
        },
        "spec": {
            "schedulerName": "ip-scheduler",
            "nodeName": "node-a",
            "nodeSelector": {"zone": "a"},
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}},
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone"}],
            "containers": [
                ctr({"cpu": "100m", "memory": "64Mi"}, None),
                {"name": "b", "ports": [{"hostPort": 80}]},
            ],
        },
        "status": {"phase": "Running"},
    }


def test_lean_keeps_what_filters_and_adoption_read_of_a_bound_pod() -> None:
    full = PodInfo.from_obj(_bound_body("u1", "10.0.0.5"))
    lean = full.lean("ipscheduler.io/")
    for kept in (
        "uid",
        "namespace",
        "name",
        "scheduler_name",
        "node_name",
        "phase",
        "priority",
        "qos_class",
        "labels",
        "requests",
        "nonzero_requests",
        "host_ports",
        "affinity",
        "host_network",
        "creation",
        "resource_version",
        "deleting",
    ):
        assert getattr(lean, kept) == getattr(full, kept), kept
    assert lean.annotations == {"ipscheduler.io/ip": "10.0.0.5"}  # only ours
    assert lean.tolerations == () and lean.node_selector == {} and lean.topology_spread == ()


def test_lean_pods_of_one_workload_share_their_maps() -> None:
    a = PodInfo.from_obj(_bound_body("u1", "10.0.0.5")).lean("ipscheduler.io/")
    b = PodInfo.from_obj(_bound_body("u2", "10.0.0.6")).lean("ipscheduler.io/")
    assert a.labels is b.labels
    assert a.requests is b.requests
    assert a.nonzero_requests is b.nonzero_requests
    assert a.annotations is not b.annotations  # the addresses differ
    with pytest.raises(TypeError):
        a.labels["app"] = "other"  # type: ignore[index]  # shared, so read-only
