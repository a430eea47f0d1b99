"""Unit tests for the PrioritySort queue-sort plugin (no server)."""

from __future__ import annotations

import functools

import pytest

from ipscheduler.framework.interface import QueuedPodInfo, QueueSortPlugin
from ipscheduler.framework.types import PodInfo
from ipscheduler.plugins.queuesort import PrioritySort

SORT = PrioritySort()


def qpi(name: str, priority: int = 0, qos: str = "BestEffort", ts: float = 0.0) -> QueuedPodInfo:
    """A queued pod with the given priority, QoS class and queue timestamp."""
    pod = PodInfo(uid=f"uid-{name}", namespace="default", name=name, priority=priority, qos_class=qos)
    return QueuedPodInfo(pod=pod, timestamp=ts)


def test_plugin_name_and_protocol() -> None:
    assert PrioritySort.name == "PrioritySort"
    assert isinstance(SORT, QueueSortPlugin)


LESS_CASES = [
    # (a, b, a_before_b, b_before_a)
    (qpi("a", priority=10, ts=5), qpi("b", priority=1, ts=1), True, False),
    (qpi("a", priority=1, qos="Guaranteed", ts=0), qpi("b", priority=2, qos="BestEffort", ts=9), False, True),
    (qpi("a", priority=-5), qpi("b", priority=-10), True, False),
    (qpi("a", priority=2_000_000_000), qpi("b", priority=1_000_000_000), True, False),
    (qpi("a", qos="Guaranteed", ts=9), qpi("b", qos="Burstable", ts=1), True, False),
    (qpi("a", qos="Burstable", ts=9), qpi("b", qos="BestEffort", ts=1), True, False),
    (qpi("a", qos="BestEffort", ts=1), qpi("b", qos="Guaranteed", ts=9), False, True),
    (qpi("a", qos="Burstable", ts=1.0), qpi("b", qos="Burstable", ts=2.0), True, False),
    (qpi("a", ts=2.5), qpi("b", ts=2.0), False, True),
    (qpi("a", priority=3, qos="Burstable", ts=7), qpi("b", priority=3, qos="Burstable", ts=7), False, False),
    (qpi("a", qos="Unknown", ts=1), qpi("b", qos="BestEffort", ts=2), True, False),
]


@pytest.mark.parametrize(
    ("a", "b", "a_first", "b_first"),
    LESS_CASES,
    ids=[
        "higher-priority-first-despite-later-timestamp",
        "priority-beats-qos-and-time",
        "negative-priorities",
        "large-priorities",
        "same-priority-guaranteed-before-burstable",
        "same-priority-burstable-before-besteffort",
        "same-priority-besteffort-after-guaranteed",
        "same-priority-same-qos-earlier-first",
        "same-priority-same-qos-later-second",
        "all-equal-neither-first",
        "unknown-qos-ranks-as-besteffort",
    ],
)
def test_less(a: QueuedPodInfo, b: QueuedPodInfo, a_first: bool, b_first: bool) -> None:
    assert SORT.less(a, b) is a_first
    assert SORT.less(b, a) is b_first


def test_irreflexive() -> None:
    p = qpi("a", priority=1, qos="Guaranteed", ts=1)
    assert not SORT.less(p, p)


def test_full_queue_order() -> None:
    pods = [
        qpi("low-be-early", priority=0, qos="BestEffort", ts=1),
        qpi("low-g-late", priority=0, qos="Guaranteed", ts=10),
        qpi("high-be-late", priority=100, qos="BestEffort", ts=20),
        qpi("low-bu-mid", priority=0, qos="Burstable", ts=5),
        qpi("low-g-early", priority=0, qos="Guaranteed", ts=2),
        qpi("high-g-latest", priority=100, qos="Guaranteed", ts=30),
        qpi("neg", priority=-1, qos="Guaranteed", ts=0),
    ]

    def cmp(x: QueuedPodInfo, y: QueuedPodInfo) -> int:
        return -1 if SORT.less(x, y) else (1 if SORT.less(y, x) else 0)

    ordered = [p.pod.name for p in sorted(pods, key=functools.cmp_to_key(cmp))]
    assert ordered == [
        "high-g-latest",
        "high-be-late",
        "low-g-early",
        "low-g-late",
        "low-bu-mid",
        "low-be-early",
        "neg",
    ]
