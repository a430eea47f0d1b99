"""plugins/nodeunschedulable: NodeUnschedulable Filter and its queueing hints (no server).

Cases follow kube-scheduler's own plugin tests: node_unschedulable_test.go.
"""

from __future__ import annotations

import dataclasses

import pytest

from ipscheduler.framework.interface import Code, FilterPlugin, QueueingHint
from ipscheduler.framework.types import Toleration
from ipscheduler.plugins.nodeunschedulable import NodeUnschedulable
from tests.builders import node as make_node
from tests.builders import pod_info
from tests.unit.plugins.cycle import HINT_NODE, HINT_POD, assert_plugin, hints_test, run_filter

OK = Code.SUCCESS
UNRES = Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_plugin_name_and_protocols() -> None:
    assert_plugin(NodeUnschedulable(), "NodeUnschedulable", FilterPlugin)


# --------------------------------------------------------------------------- NodeUnschedulable

UNSCHEDULABLE_KEY = "node.kubernetes.io/unschedulable"

UNSCHEDULABLE_CASES: list[tuple[str, bool, tuple[Toleration, ...], Code]] = [
    ("unschedulable-node-rejected", True, (), UNRES),
    ("normal-node-accepted", False, (), OK),
    (
        "toleration-for-unschedulable-taint",
        True,
        (Toleration(UNSCHEDULABLE_KEY, "Exists", effect="NoSchedule"),),
        OK,
    ),
    ("toleration-key-any-effect", True, (Toleration(UNSCHEDULABLE_KEY, "Exists"),), OK),
    ("empty-key-exists-tolerates-all", True, (Toleration(operator="Exists"),), OK),
    ("toleration-wrong-effect", True, (Toleration(UNSCHEDULABLE_KEY, "Exists", effect="NoExecute"),), UNRES),
    ("toleration-other-key", True, (Toleration("dedicated", "Exists", effect="NoSchedule"),), UNRES),
    (
        "toleration-equal-nonempty-value",
        True,
        (Toleration(UNSCHEDULABLE_KEY, "Equal", "yes", "NoSchedule"),),
        UNRES,
    ),
    ("toleration-equal-empty-value", True, (Toleration(UNSCHEDULABLE_KEY, "Equal", "", "NoSchedule"),), OK),
    ("toleration-irrelevant-on-normal-node", False, (Toleration(UNSCHEDULABLE_KEY, "Exists"),), OK),
]


@pytest.mark.parametrize(
    ("unschedulable", "tolerations", "code"),
    [c[1:] for c in UNSCHEDULABLE_CASES],
    ids=[c[0] for c in UNSCHEDULABLE_CASES],
)
def test_node_unschedulable(unschedulable: bool, tolerations: tuple[Toleration, ...], code: Code) -> None:
    status = run_filter(
        NodeUnschedulable(), pod_info(tolerations=tolerations), make_node(unschedulable=unschedulable)
    )
    assert status.code is code
    assert status.reasons == (() if code is OK else ("node(s) were unschedulable",))


# --------------------------------------------------------------------------- queueing hints

HINTS = [
    # id, event (None: node update from old/new), pod, old, new, expected
    (
        "unschedulable-uncordoned",
        None,
        HINT_POD,
        dataclasses.replace(HINT_NODE, unschedulable=True),
        HINT_NODE,
        QueueingHint.QUEUE,
    ),
    (
        "unschedulable-cordoned",
        None,
        HINT_POD,
        HINT_NODE,
        dataclasses.replace(HINT_NODE, unschedulable=True),
        QueueingHint.SKIP,
    ),
    (
        "unschedulable-label-change",
        None,
        HINT_POD,
        HINT_NODE,
        dataclasses.replace(HINT_NODE, labels={}),
        QueueingHint.SKIP,
    ),
]


test_plugin_hints = hints_test(NodeUnschedulable, HINTS)
