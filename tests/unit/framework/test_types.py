"""framework/types: Taint, Toleration, and PodInfo and NodeInfo parsed from API bodies (no server)."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pytest

from ipscheduler.framework.types import NodeInfo, OwnerRef, PodInfo, Snapshot, Taint, Toleration
from tests.builders import affinity_term, container, label_selector, node, pod_affinity, workload_pod

CM = {"cpu": "1", "memory": "1Gi"}
HOST = "kubernetes.io/hostname"

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
            "containers": [container(CM, CM, name="c")],
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
        "spec": {"containers": [container(CM, CM, name="c")]},
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
                container({"cpu": "100m", "memory": "64Mi"}, name="c"),
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


# --------------------------------------------------------------------------- Snapshot


def test_the_snapshot_lists_only_nodes_with_pods_that_have_affinity_terms() -> None:
    anti = pod_affinity(anti=[affinity_term(label_selector(foo="bar"), HOST)])
    plain, with_terms = workload_pod("plain"), workload_pod("anti", affinity=anti)

    def n(name: str, pods: list[PodInfo] | None = None) -> NodeInfo:
        return node(name, {HOST: name}, pods or [])

    snap = Snapshot()
    for x in [n("n1", [plain]), n("n2", [plain, with_terms]), n("n3")]:
        snap.put(x)
    assert list(snap.have_pods_with_affinity) == ["n2"]
    snap.put(n("n2", [plain]))  # the pod with terms left
    snap.put(n("n3", [with_terms]))
    assert list(snap.have_pods_with_affinity) == ["n3"]
    snap.drop("n3")
    assert not snap.have_pods_with_affinity and sorted(snap) == ["n1", "n2"]


@pytest.mark.parametrize(
    ("refs", "owner"),
    [
        (
            [{"kind": "StatefulSet", "name": "web", "uid": "u-s", "controller": True}],
            OwnerRef("StatefulSet", "web", "u-s"),
        ),
        (
            [
                {"kind": "ConfigMap", "name": "cm", "uid": "u-c"},
                {"kind": "ReplicaSet", "name": "rs", "uid": "u-r", "controller": True},
            ],
            OwnerRef("ReplicaSet", "rs", "u-r"),
        ),
        ([{"kind": "StatefulSet", "name": "web", "uid": "u-s"}], None),
        ([{"kind": "StatefulSet", "name": "web", "controller": True}], None),
        ("garbage", None),
        (None, None),
    ],
    ids=["controller", "controller-among-others", "not-a-controller", "no-uid", "not-a-list", "none"],
)
def test_the_pods_controller_reference(refs: Any, owner: OwnerRef | None) -> None:
    body = {
        "metadata": {
            "uid": "u",
            "namespace": "ns",
            "name": "p",
            "ownerReferences": refs,
            "generateName": "p-",
        }
    }
    pod = PodInfo.from_obj(body)
    assert pod.owner == owner and pod.generate_name == "p-"
    assert pod.lean().owner == owner, "the lean form keeps it"
