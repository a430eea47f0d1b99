"""framework/diagnosis: why a pod fits no node — kube-scheduler's FitError text, the reason
histogram, the plugins that rejected the pod."""

from __future__ import annotations

import pytest

from ipscheduler.framework.diagnosis import Diagnosis
from ipscheduler.framework.status import Status

TAINT = "node(s) had untolerated taint {a: b}"
NO_IP = "node(s) had no free underlay IPs"


MESSAGE_CASES = [
    # (num_all_nodes, node name → status, pre_filter, expected message)
    (
        3,
        {
            "n1": Status.unschedulable(TAINT),
            "n2": Status.unschedulable(NO_IP),
            "n3": Status.unschedulable(NO_IP),
        },
        None,
        "0/3 nodes are available: 1 node(s) had untolerated taint {a: b}, "
        "2 node(s) had no free underlay IPs.",
    ),
    (0, {}, None, "no nodes available to schedule pods"),
    (0, {}, Status.unschedulable("pod has unbound PVC"), "no nodes available to schedule pods"),
    (
        12,
        {
            **{f"a{i}": Status.unschedulable("node(s) y") for i in range(10)},
            "b1": Status.unschedulable("node(s) x"),
            "b2": Status.unschedulable("node(s) x"),
        },
        None,
        "0/12 nodes are available: 10 node(s) y, 2 node(s) x.",
    ),
    (
        2,
        {"n1": Status.unschedulable("node(s) b", "node(s) a"), "n2": Status.unschedulable("node(s) a")},
        None,
        "0/2 nodes are available: 1 node(s) b, 2 node(s) a.",
    ),
    (
        3,
        {"n1": Status.unschedulable(NO_IP)},
        Status.unschedulable("pod has unbound PVC"),
        "0/3 nodes are available: pod has unbound PVC.",
    ),
    (
        4,
        {
            "n1": Status.unschedulable(NO_IP),
            "n2": Status.unresolvable("node(s) didn't match Pod's node affinity"),
        },
        None,
        "0/4 nodes are available: 1 node(s) didn't match Pod's node affinity, "
        "1 node(s) had no free underlay IPs.",
    ),
]


@pytest.mark.parametrize(
    ("num", "statuses", "pre_filter", "expected"),
    MESSAGE_CASES,
    ids=[
        "kube-scheduler-example",
        "zero-nodes",
        "zero-nodes-with-prefilter",
        "sorted-as-strings-10-before-2",
        "several-reasons-per-node",
        "prefilter-counts-for-every-node",
        "fewer-statuses-than-nodes",
    ],
)
def test_diagnosis_message(
    num: int, statuses: dict[str, Status], pre_filter: Status | None, expected: str
) -> None:
    d = Diagnosis(node_to_status=statuses, pre_filter=pre_filter, num_all_nodes=num)
    assert d.message() == expected


def test_histogram() -> None:
    d = Diagnosis(
        node_to_status={"n1": Status.unschedulable(TAINT), "n2": Status.unschedulable(NO_IP, TAINT)},
        num_all_nodes=2,
    )
    assert d.histogram() == {TAINT: 2, NO_IP: 1}
    d.pre_filter = Status.unschedulable("x")
    assert d.histogram() == {"x": 2}


@pytest.mark.parametrize(
    ("statuses", "pre_filter", "plugins"),
    [
        ({}, None, set()),
        (
            {
                "n1": Status.unschedulable(TAINT, plugin="TaintToleration"),
                "n2": Status.unschedulable(NO_IP, plugin="UnderlayIP"),
                "n3": Status.unschedulable(NO_IP, plugin="UnderlayIP"),
            },
            None,
            {"TaintToleration", "UnderlayIP"},
        ),
        ({"n1": Status.unschedulable(TAINT)}, None, set()),
        (
            {"n1": Status.unschedulable(TAINT, plugin="TaintToleration")},
            Status.unschedulable("pod has unbound PVC", plugin="VolumeBinding"),
            {"VolumeBinding"},
        ),
        ({"n1": Status.unschedulable(TAINT, plugin="TaintToleration")}, Status.error("boom"), set()),
    ],
    ids=[
        "nothing-rejected",
        "every-rejecting-filter",
        "a-status-without-its-plugin",
        "the-pre-filter-alone",
        "a-pre-filter-without-its-plugin",
    ],
)
def test_unschedulable_plugins(
    statuses: dict[str, Status], pre_filter: Status | None, plugins: set[str]
) -> None:
    d = Diagnosis(node_to_status=statuses, pre_filter=pre_filter, num_all_nodes=len(statuses))
    assert d.unschedulable_plugins == plugins
