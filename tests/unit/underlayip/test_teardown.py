"""The release rules of a gone pod's address (ipscheduler.underlayip.teardown), pure."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from ipscheduler.underlayip.models import Allocation
from ipscheduler.underlayip.teardown import (
    SIMULATED_NODE_ANNOTATION,
    NodeState,
    confirmed,
    kubelet_let_go,
    node_state,
    on_an_interface,
    release_at,
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


def last_state(phase: str = "Running", deleted: str | None = None, grace: Any = None) -> dict[str, Any]:
    """A DELETED event's object: the pod's last state the bound-pods watch matched."""
    meta: dict[str, Any] = {"name": "p", "uid": "u1"}
    if deleted is not None:
        meta["deletionTimestamp"] = deleted
    if grace is not None:
        meta["deletionGracePeriodSeconds"] = grace
    return {"metadata": meta, "spec": {"nodeName": "n1"}, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("body", "want"),
    [
        (last_state(), True),
        (last_state(deleted="2026-11-27T12:00:10Z", grace=10), True),
        (last_state(deleted="2026-11-27T12:00:00Z", grace=0), False),
        (last_state(deleted="2026-11-27T12:00:00Z"), False),
        (last_state(deleted="2026-11-27T12:00:00Z", grace=True), False),
        (last_state("Succeeded", deleted="2026-11-27T12:00:00Z", grace=0), True),
        (last_state("Failed"), True),
        ({"metadata": {"name": "u1"}}, False),
        ({"metadata": {"name": "u1"}, "status": "Failed"}, False),
    ],
    ids=[
        "left-the-watch-undeleted:-turned-terminal",
        "graceful-deletion:-only-the-kubelet-completes-it",
        "forced-or-grace-0",
        "deleted-without-a-grace-period-recorded",
        "malformed-grace",
        "terminal",
        "failed",
        "relist-without-state",
        "malformed",
    ],
)
def test_kubelet_let_go(body: dict[str, Any], want: bool) -> None:
    assert kubelet_let_go(body) is want


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
        "the-kubelet-ended-it",
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


@pytest.mark.parametrize(
    ("ip", "phase", "want"),
    [
        ("10.0.0.1", "Bound", True),
        ("10.0.0.1", "Reserved", True),
        (None, "Bound", False),
        (None, "Nominated", False),
        ("10.0.0.1", "Retained", False),
        ("10.0.0.1", "Releasing", False),
    ],
    ids=["bound", "reserved", "count-only-slot", "nominated-place", "retained", "releasing-already"],
)
def test_only_an_address_an_interface_may_hold_waits_for_its_node(
    ip: str | None, phase: Any, want: bool
) -> None:
    a = Allocation(ip=ip, pod="ns/p", phase=phase, since=T0)
    assert on_an_interface(a) is want
