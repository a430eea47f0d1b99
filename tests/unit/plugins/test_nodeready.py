"""plugins/nodeready: NodeReady Filter and its queueing hints (no server)."""

from __future__ import annotations

import dataclasses

import pytest

from ipscheduler.framework import events
from ipscheduler.framework.interface import Code, FilterPlugin, QueueingHint
from ipscheduler.plugins.nodeready import NodeReady
from tests.builders import node as make_node
from tests.builders import pod_info
from tests.unit.plugins.cycle import HINT_NODE, HINT_POD, assert_plugin, hints_test, run_filter

OK = Code.SUCCESS
UNSCHED = Code.UNSCHEDULABLE


def test_plugin_name_and_protocols() -> None:
    assert_plugin(NodeReady(), "NodeReady", FilterPlugin)


# --------------------------------------------------------------------------- NodeReady


@pytest.mark.parametrize(
    ("ready", "code", "reasons"),
    [(True, OK, ()), (False, UNSCHED, ("node(s) were not ready",))],
    ids=["ready", "not-ready-is-retryable-unschedulable"],
)
def test_node_ready(ready: bool, code: Code, reasons: tuple[str, ...]) -> None:
    status = run_filter(NodeReady(), pod_info(), make_node(ready=ready))
    assert status.code is code
    assert status.reasons == reasons


# --------------------------------------------------------------------------- queueing hints

HINTS = [
    # id, event (None: node update from old/new), pod, old, new, expected
    (
        "ready-became-ready",
        None,
        HINT_POD,
        dataclasses.replace(HINT_NODE, ready=False),
        HINT_NODE,
        QueueingHint.QUEUE,
    ),
    (
        "ready-new-not-ready",
        events.NODE_ADD,
        HINT_POD,
        None,
        dataclasses.replace(HINT_NODE, ready=False),
        QueueingHint.SKIP,
    ),
]


test_plugin_hints = hints_test(NodeReady, HINTS)
