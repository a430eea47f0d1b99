"""The release rules of a gone pod's address (ipscheduler.underlayip.teardown), pure."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from ipscheduler.underlayip.teardown import (
    SIMULATED_NODE_ANNOTATION,
    NodeState,
    confirmed,
    node_state,
    release_at,
    reported_terminal,
)

T0 = datetime.datetime(2026, 11, 27, 12, 0, 0, tzinfo=datetime.UTC)


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def node(ready: str | None, since: Any = "2026-11-27T11:00:00Z", **annotations: str) -> dict[str, Any]:
    conditions = [{"type": "MemoryPressure", "status": "False"}]
    if ready is not None:
        conditions.append({"type": "Ready", "status": ready, "lastTransitionTime": since})
    return {"metadata": {"name": "n1", "annotations": annotations}, "status": {"conditions": conditions}}


@pytest.mark.parametrize(
    ("body", "want"),
    [
        (node("True"), NodeState(True, datetime.datetime(2026, 11, 27, 11, 0, tzinfo=datetime.UTC))),
        (node("False"), NodeState(False)),
        (node("Unknown"), NodeState(False)),
        (node(None), NodeState(False)),
        (node("True", since=None), NodeState(True, None)),
        (node("True", since="yesterday"), NodeState(True, None)),
        (
            node("True", since="2026-11-27T11:00:00"),
            NodeState(True, datetime.datetime(2026, 11, 27, 11, tzinfo=datetime.UTC)),
        ),
        (
            node("True", **{SIMULATED_NODE_ANNOTATION: "fake"}),
            NodeState(True, datetime.datetime(2026, 11, 27, 11, tzinfo=datetime.UTC), simulated=True),
        ),
        ({"metadata": "x", "status": {"conditions": "y"}}, NodeState(False)),
        ({}, NodeState(False)),
    ],
    ids=[
        "ready",
        "not-ready",
        "unknown",
        "no-ready-condition",
        "ready-without-transition-time",
        "unparsable-transition-time",
        "naive-transition-time-is-utc",
        "kwok-node",
        "malformed",
        "empty",
    ],
)
def test_node_state(body: dict[str, Any], want: NodeState) -> None:
    assert node_state(body) == want


@pytest.mark.parametrize(
    ("body", "want"),
    [
        ({"status": {"phase": "Succeeded"}}, True),
        ({"status": {"phase": "Failed"}}, True),
        ({"status": {"phase": "Running"}}, False),
        ({"status": {"phase": "Pending"}}, False),
        ({"metadata": {"name": "uid-1"}}, False),
        ({"status": "Failed"}, False),
    ],
    ids=["succeeded", "failed", "running", "pending", "relist-without-state", "malformed"],
)
def test_reported_terminal(body: dict[str, Any], want: bool) -> None:
    assert reported_terminal(body) is want


READY = NodeState(True, at(-3600))


@pytest.mark.parametrize(
    ("terminal", "state", "want"),
    [
        (True, READY, True),
        (False, READY, False),
        (False, NodeState(False), False),
        (False, None, True),
        (False, NodeState(True, simulated=True), True),
    ],
    ids=[
        "kubelet-reported-terminal",
        "deleted-without-report",
        "deleted-while-not-ready",
        "node-deleted",
        "kwok-node",
    ],
)
def test_confirmed(terminal: bool, state: NodeState | None, want: bool) -> None:
    assert confirmed(terminal, state) is want


@pytest.mark.parametrize(
    ("state", "want"),
    [
        (READY, at(15)),
        (NodeState(True, at(60)), at(75)),
        (NodeState(True, None), at(15)),
        (NodeState(False), None),
        (None, at(0)),
        (NodeState(False, simulated=True), at(0)),
    ],
    ids=[
        "ready-all-along:-the-delay-from-the-pod's-removal",
        "ready-again-later:-the-delay-from-then",
        "ready-since-unknown",
        "not-ready:-waits",
        "node-deleted:-at-once",
        "kwok-node:-at-once",
    ],
)
def test_release_at(state: NodeState | None, want: datetime.datetime | None) -> None:
    assert release_at(T0, state, 15.0) == want


def test_release_at_reads_a_naive_time_as_utc() -> None:
    assert release_at(T0.replace(tzinfo=None), READY, 15.0) == at(15)
