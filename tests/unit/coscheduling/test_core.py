"""coscheduling/core: the PodGroupManager alone, on a GroupIndex and a fake clock: PreFilter's
checks, the permitted and backed-off groups and their expiry, Permit's decision, PostFilter's
rejection, Unreserve's warning, QueueSort's time, and the pods a group has placed."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest

from ipscheduler.coscheduling.core import PodGroupManager, calculate_assigned_pods
from ipscheduler.coscheduling.groups import GroupIndex, Member
from ipscheduler.coscheduling.models import POD_GROUP_LABEL, PodGroupView
from ipscheduler.framework.interface import QueuedPodInfo
from ipscheduler.framework.quantity import parse_quantity
from ipscheduler.framework.types import NodeInfo, PodInfo
from tests.builders import pod_info

NS = "ns"
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
DEFAULT_TIMEOUT = 60.0


class FakeClock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def group(
    min_member: int = 3, timeout: float | None = None, cpu: str | None = None, name: str = "g"
) -> PodGroupView:
    resources = {"cpu": parse_quantity(cpu)} if cpu is not None else {}
    return PodGroupView(
        NS, name, uid="pg", min_member=min_member, timeout=timeout, creation=T0, min_resources=resources
    )


def manager(
    g: PodGroupView, members: int | None = None, backoff: float = 0.0, bound: int = 0
) -> tuple[PodGroupManager, FakeClock]:
    """A manager over an index holding ``g`` and ``members`` pods of it (default
    ``minMember``), the first ``bound`` of them on a node."""
    index = GroupIndex()
    index.set_group(g.key, g)
    for i in range(g.min_member if members is None else members):
        node = "node-1" if i < bound else ""
        index.set_member(f"g-{i}", Member(f"g-{i}", NS, f"g-{i}", g.key, node_name=node))
    clock = FakeClock()
    return PodGroupManager(index, DEFAULT_TIMEOUT, backoff, clock, wall_offset=0.0), clock


def member(name: str, group_name: str = "g", node: str = "", namespace: str = NS) -> PodInfo:
    return pod_info(name, uid=name, namespace=namespace, labels={POD_GROUP_LABEL: group_name}, node_name=node)


def cpu_nodes(cpu: str) -> dict[str, NodeInfo]:
    allocatable = {"cpu": parse_quantity(cpu), "pods": Decimal(110)}
    return {"node-1": NodeInfo(name="node-1", allocatable=allocatable)}


ENOUGH, SHORT = cpu_nodes("4"), cpu_nodes("2")


@pytest.mark.parametrize(
    ("g", "members", "nodes", "problem"),
    [
        (group(), 3, {}, None),
        (
            group(),
            2,
            {},
            "pre-filter pod g-0 cannot find enough sibling pods, current pods number: 2, "
            "minMember of group: 3",
        ),
        (group(min_member=1, cpu="3"), 1, ENOUGH, None),
        (group(min_member=1, cpu="3"), 1, SHORT, "resource gap: cpu 1"),
        (group(min_member=2, cpu="3"), 2, {}, "resource gap: cpu 3, pods 2"),
    ],
    ids=["enough-members", "too-few-members", "min-resources-met", "min-resources-short", "no-nodes"],
)
def test_pre_filter(g: PodGroupView, members: int, nodes: dict[str, NodeInfo], problem: str | None) -> None:
    m, _ = manager(g, members)
    assert m.pre_filter(member("g-0"), g, nodes) == problem


@pytest.mark.parametrize(
    ("timeout", "later", "problem"),
    [
        (30.0, 29.9, None),
        (30.0, 30.0, "resource gap: cpu 1"),
        (None, DEFAULT_TIMEOUT - 0.1, None),
        (None, DEFAULT_TIMEOUT, "resource gap: cpu 1"),
    ],
    ids=[
        "within-schedule-timeout-not-checked-again",
        "at-schedule-timeout-checked-again",
        "within-default-timeout-not-checked-again",
        "at-default-timeout-checked-again",
    ],
)
def test_a_permitted_group_expires_after_its_schedule_timeout(
    timeout: float | None, later: float, problem: str | None
) -> None:
    g = group(min_member=1, timeout=timeout, cpu="3")
    m, clock = manager(g)
    assert m.pre_filter(member("g-0"), g, ENOUGH) is None
    clock.now += later
    assert m.pre_filter(member("g-0"), g, SHORT) == problem


@pytest.mark.parametrize(
    ("backoff", "members", "later", "problem"),
    [
        (10.0, 4, 9.9, "podGroup ns/g failed recently"),
        (10.0, 4, 10.0, None),
        (0.0, 4, 0.0, None),
        (
            10.0,
            3,
            0.0,
            "pre-filter pod g-0 cannot find enough sibling pods, current pods number: 3, "
            "minMember of group: 4",
        ),
    ],
    ids=[
        "backed-off-until-it-ends",
        "backoff-over",
        "no-backoff-configured",
        "too-few-pods-to-retry-not-backed-off",
    ],
)
def test_a_group_rejected_in_post_filter_is_backed_off(
    backoff: float, members: int, later: float, problem: str | None
) -> None:
    g = group(min_member=4)
    m, clock = manager(g, members, backoff=backoff)
    assert m.post_filter(g, assigned=1) is True
    clock.now += later
    assert m.pre_filter(member("g-0"), g, {}) == problem


def test_post_filter_drops_the_groups_permit() -> None:
    g = group(min_member=2, timeout=30, cpu="3")
    m, _ = manager(g)
    assert m.pre_filter(member("g-0"), g, ENOUGH) is None
    assert m.pre_filter(member("g-1"), g, SHORT) is None, "permitted: not checked again"
    assert m.post_filter(g, assigned=0) is True
    assert m.pre_filter(member("g-1"), g, SHORT) == "resource gap: cpu 1"


@pytest.mark.parametrize(
    ("min_member", "assigned", "rejects"),
    [(4, 2, True), (4, 4, False), (4, 5, False), (20, 18, False), (20, 17, True)],
    ids=["far-from-min", "already-complete", "over-complete", "within-10-percent", "just-over-10-percent"],
)
def test_post_filter_fails_a_group_more_than_10_percent_short(
    min_member: int, assigned: int, rejects: bool
) -> None:
    g = group(min_member=min_member)
    m, _ = manager(g)
    assert m.post_filter(g, assigned) is rejects


@pytest.mark.parametrize(
    ("min_member", "assigned", "complete"),
    [(3, 2, True), (3, 1, False), (3, 5, True), (1, 0, True)],
    ids=["last-pod-completes", "waits-for-more", "more-than-enough", "group-of-one"],
)
def test_permit(min_member: int, assigned: int, complete: bool) -> None:
    g = group(min_member=min_member)
    m, _ = manager(g)
    assert m.permit(g, assigned) is complete


@pytest.mark.parametrize(
    ("waits", "timed_out", "rejected", "warning"),
    [
        (
            True,
            True,
            1,
            ("Timeout", "2 reserved pod(s) released: timed out after 7s waiting for minMember 3"),
        ),
        (
            True,
            False,
            1,
            (
                "Unschedulable",
                "2 reserved pod(s) released: pod g-2 was given back before the group reached minMember 3",
            ),
        ),
        (
            False,
            False,
            2,
            (
                "Unschedulable",
                "3 reserved pod(s) released: pod g-2 was given back before the group reached minMember 3",
            ),
        ),
        (False, False, 0, None),
        (False, True, 0, None),
    ],
    ids=[
        "timed-out",
        "given-back-in-time",
        "rejected-without-waiting",
        "a-siblings-own-unreserve",
        "a-sibling-that-timed-out-after-the-group-was-released",
    ],
)
def test_unreserve_says_why_the_group_was_released(
    waits: bool, timed_out: bool, rejected: int, warning: tuple[str, str] | None
) -> None:
    """Timeout or not is what ended the pod's wait (the framework says), never a comparison
    of clocks: a CI run once saw a group time out at Permit and get no Timeout event."""
    g = group(min_member=3, timeout=7)
    m, clock = manager(g)
    if waits:
        assert m.permit(g, assigned=0) is False
        assert m.permit(g, assigned=1) is False, "the wait started with the first pod"
    clock.now += 0.5  # whatever the clocks say
    assert m.unreserve(g, member("g-2"), rejected, timed_out) == warning
    assert m.unreserve(g, member("g-2"), 0, timed_out) is None, "the group's wait ended"


def test_a_complete_group_ends_its_wait() -> None:
    g = group(min_member=2, timeout=7)
    m, clock = manager(g)
    assert m.permit(g, assigned=0) is False
    assert m.permit(g, assigned=1) is True
    clock.now += 100
    assert m.unreserve(g, member("g-1"), 0) is None


@pytest.mark.parametrize(
    ("bound", "pod", "siblings"),
    [(0, "g-0", {"g-1", "g-2"}), (1, "g-1", {"g-2"}), (0, "x", {"g-0", "g-1", "g-2"})],
    ids=["all-pending", "bound-ones-left-out", "a-pod-not-indexed-yet"],
)
def test_siblings_to_activate(bound: int, pod: str, siblings: set[str]) -> None:
    g = group()
    m, _ = manager(g, bound=bound)
    assert m.siblings_to_activate(member(pod), g.key) == siblings


@pytest.mark.parametrize(
    ("g", "timeout"),
    [(group(timeout=7), 7.0), (group(), DEFAULT_TIMEOUT)],
    ids=["the-groups-own", "the-default"],
)
def test_timeout(g: PodGroupView, timeout: float) -> None:
    m, _ = manager(g)
    assert m.timeout(g) == timeout


@pytest.mark.parametrize(
    ("pod", "initial", "sort_time"),
    [
        (member("g-0"), 5.0, (T0.timestamp(), "ns/g")),
        (member("h-0", group_name="h"), 5.0, (5.0, "ns/h")),
        (pod_info("solo", namespace=NS), 5.0, (5.0, "")),
        (pod_info("solo", namespace=NS), None, (9.0, "")),
    ],
    ids=[
        "known-group-by-creation",
        "unknown-group-by-queue-time",
        "no-group",
        "no-first-attempt-by-timestamp",
    ],
)
def test_sort_time(pod: PodInfo, initial: float | None, sort_time: tuple[float, str]) -> None:
    m, _ = manager(group())
    assert m.sort_time(QueuedPodInfo(pod=pod, timestamp=9.0, initial_attempt_timestamp=initial)) == sort_time


@pytest.mark.parametrize(
    ("placed", "count"),
    [
        ([], 0),
        ([member("g-1", node="node-1"), member("g-2", node="node-1")], 2),
        ([member("g-0", node="node-1"), member("g-1", node="node-1")], 1),
        ([member("h-0", group_name="h", node="node-1"), member("g-1", namespace="other", node="node-1")], 0),
    ],
    ids=["none", "siblings-count", "the-pod-itself-does-not", "other-groups-and-namespaces-do-not"],
)
def test_calculate_assigned_pods(placed: list[PodInfo], count: int) -> None:
    nodes = {"node-1": NodeInfo(name="node-1", pods=tuple(placed))}
    assert calculate_assigned_pods("ns/g", member("g-0"), nodes) == count
