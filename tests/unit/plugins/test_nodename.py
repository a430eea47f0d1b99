"""plugins/nodename: NodeName Filter, the node names a pod asks for, and the queueing hints
(no server).

Cases follow kube-scheduler 1.34's node_name_test.go.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from ipscheduler.framework import events
from ipscheduler.framework.interface import Code, FilterPlugin, QueueingHint
from ipscheduler.framework.types import PodInfo
from ipscheduler.plugins.nodename import NodeName, requested_node_names
from tests.builders import container, node, pod, pod_body
from tests.unit.plugins.cycle import HINT_NODE, assert_plugin, hints_test, run_filter

UNRES = Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_plugin_name_and_protocols() -> None:
    assert_plugin(NodeName(), "NodeName", FilterPlugin)


# --------------------------------------------------------------------------- NodeName


def pinned(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    """Required node affinity with one nodeSelectorTerm per ``matchFields`` list."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": fields} for fields in terms]
            }
        }
    }


def name_in(*names: str, operator: str = "In") -> dict[str, Any]:
    return {"key": "metadata.name", "operator": operator, "values": list(names)}


NODE_NAME_CASES: list[tuple[str, dict[str, Any], str, bool]] = [
    # (id, pod body, node name, fits)
    ("no-node-name", pod_body(container()), "node-a", True),
    ("spec-node-name-matches", pod_body(container(), node="node-a"), "node-a", True),
    ("spec-node-name-differs", pod_body(container(), node="node-a"), "node-b", False),
    ("affinity-pin-matches", pod_body(container(), affinity=pinned([name_in("node-a")])), "node-a", True),
    ("affinity-pin-differs", pod_body(container(), affinity=pinned([name_in("node-a")])), "node-b", False),
    (
        "affinity-terms-are-ored",
        pod_body(container(), affinity=pinned([name_in("node-a")], [name_in("node-b")])),
        "node-b",
        True,
    ),
    (
        "affinity-terms-are-ored-other-node",
        pod_body(container(), affinity=pinned([name_in("node-a")], [name_in("node-b")])),
        "node-c",
        False,
    ),
    (
        "a-term-without-name-pin-leaves-pod-free",
        pod_body(container(), affinity=pinned([name_in("node-a")], [])),
        "node-c",
        True,
    ),
    (
        "not-in-is-not-a-pin",
        pod_body(container(), affinity=pinned([name_in("node-a", operator="NotIn")])),
        "node-b",
        True,
    ),
    (
        "fields-of-a-term-are-anded",
        pod_body(container(), affinity=pinned([name_in("node-a", "node-b"), name_in("node-b")])),
        "node-a",
        False,
    ),
    (
        "spec-node-name-wins-over-affinity",
        pod_body(container(), node="node-b", affinity=pinned([name_in("node-a")])),
        "node-b",
        True,
    ),
    (
        "malformed-affinity-is-no-pin",
        pod_body(
            container(), affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": 3}}
        ),
        "node-b",
        True,
    ),
]


@pytest.mark.parametrize(
    ("body", "node_name", "ok"), [c[1:] for c in NODE_NAME_CASES], ids=[c[0] for c in NODE_NAME_CASES]
)
def test_node_name(body: dict[str, Any], node_name: str, ok: bool) -> None:
    status = run_filter(NodeName(), PodInfo.from_obj(body), node(node_name))
    if ok:
        assert status.is_success()
    else:
        assert (status.code, status.reasons) == (UNRES, ("node(s) didn't match the requested node name",))
        assert status.plugin == "NodeName"


def test_requested_node_names() -> None:
    assert requested_node_names(pod(container())) is None
    assert requested_node_names(pod(container(), node="x")) == frozenset({"x"})
    both = pinned([name_in("a")], [name_in("b")])
    assert requested_node_names(pod(container(), affinity=both)) == frozenset({"a", "b"})


# --------------------------------------------------------------------------- queueing hints

P_ON_N2 = PodInfo(
    uid="u",
    namespace="ns",
    name="p",
    affinity={
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
                ]
            }
        }
    },
)

HINTS = [
    # id, event, pod, old, new, expected
    (
        "nodename-the-named-node",
        events.NODE_ADD,
        P_ON_N2,
        None,
        dataclasses.replace(HINT_NODE, name="n2"),
        QueueingHint.QUEUE,
    ),
    ("nodename-another-node", events.NODE_ADD, P_ON_N2, None, HINT_NODE, QueueingHint.SKIP),
]


test_plugin_hints = hints_test(NodeName, HINTS)
