"""coscheduling/plugin: Coscheduling at QueueSort, PreFilter, PostFilter, Permit and Unreserve,
table-driven as the in-tree plugins are."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal

import pytest

from ipscheduler.coscheduling.core import format_gap, resource_gap
from ipscheduler.coscheduling.groups import GroupIndex, Member
from ipscheduler.coscheduling.models import POD_GROUP_LABEL, PodGroupView
from ipscheduler.coscheduling.plugin import Coscheduling, CoschedulingArgs
from ipscheduler.framework.interface import (
    PERMIT_TIMED_OUT,
    PODS_TO_ACTIVATE,
    Code,
    CycleState,
    QueuedPodInfo,
    Room,
    Status,
)
from ipscheduler.framework.quantity import parse_quantity
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.framework.waiting import WaitingPods
from tests.builders import pod_info
from tests.unit.fakes import EventLog

NS = "ns"
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


@dataclass
class Handle:
    """The plugin's view of the framework: waiting pods, and the room CapacityAware reports."""

    room: Room | None = None
    waiting_pods: WaitingPods = field(default_factory=WaitingPods)
    binder: object = None

    def room_for(self, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Room | None:
        return self.room

    def activate(self, uids: set[str]) -> None:
        raise AssertionError("Coscheduling activates pods through the cycle state")


def member_pod(name: str, group: str = "g", node: str = "", **fields: object) -> PodInfo:
    return pod_info(name, uid=name, namespace=NS, labels={POD_GROUP_LABEL: group}, node_name=node, **fields)


def index(
    min_member: int = 3, members: int = 3, group: str = "g", timeout: float | None = None
) -> GroupIndex:
    idx = GroupIndex()
    idx.set_group(
        f"{NS}/{group}",
        PodGroupView(NS, group, uid="pg", min_member=min_member, timeout=timeout, creation=T0),
    )
    for i in range(members):
        idx.set_member(f"{group}-{i}", Member(f"{group}-{i}", NS, f"{group}-{i}", f"{NS}/{group}"))
    return idx


def plugin(idx: GroupIndex, room: int | None = None, **args: int) -> Coscheduling:
    handle = Handle(Room(room, "UnderlayIP", "free underlay IPs") if room is not None else None)
    return Coscheduling(CoschedulingArgs(**args), handle, idx)  # type: ignore[arg-type]


def nodes_with(*placed: PodInfo) -> dict[str, NodeInfo]:
    return {"node-1": NodeInfo(name="node-1", pods=tuple(placed))}


@pytest.mark.parametrize(
    ("idx", "pod", "room", "placed", "code", "plugin_name", "reason"),
    [
        (index(), pod_info("solo", uid="solo", namespace=NS), 0, 0, Code.SUCCESS, "", ""),
        (
            index(),
            member_pod("x", group="other"),
            5,
            0,
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            "Coscheduling",
            "PodGroup ns/other not found",
        ),
        (
            index(members=2),
            member_pod("g-0"),
            5,
            0,
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            "Coscheduling",
            "pre-filter pod g-0 cannot find enough sibling pods, current pods number: 2, "
            "minMember of group: 3",
        ),
        (
            index(),
            member_pod("g-0"),
            2,
            0,
            Code.UNSCHEDULABLE,
            "UnderlayIP",
            "PodGroup ns/g needs 3 more pod(s) placed to reach minMember 3, "
            "but the nodes have free underlay IPs for 2",
        ),
        (index(), member_pod("g-2"), 1, 2, Code.SUCCESS, "", ""),
        (index(), member_pod("g-0"), None, 0, Code.SUCCESS, "", ""),
        (index(), member_pod("g-0"), 3, 0, Code.SUCCESS, "", ""),
    ],
    ids=[
        "no-group",
        "podgroup-missing",
        "too-few-members",
        "too-few-addresses-fails-fast",
        "placed-siblings-count",
        "no-capacity-plugin",
        "exactly-enough-room",
    ],
)
def test_pre_filter(
    idx: GroupIndex, pod: PodInfo, room: int | None, placed: int, code: Code, plugin_name: str, reason: str
) -> None:
    siblings = [member_pod(f"g-{i}", node="node-1") for i in range(placed)]
    st = plugin(idx, room).pre_filter(CycleState(), pod, nodes_with(*siblings))
    assert (st.code, st.plugin, st.message) == (code, plugin_name, reason)


def test_pre_filter_says_when_the_podgroup_api_is_missing() -> None:
    idx = index()
    idx.installed = False
    st = plugin(idx).pre_filter(CycleState(), member_pod("g-0"), {})
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "PodGroup API scheduling.x-k8s.io/v1alpha1 is not installed" in st.message


def test_a_backed_off_group_is_refused_until_its_backoff_ends() -> None:
    now = [100.0]
    idx = index()
    p = Coscheduling(CoschedulingArgs(podGroupBackoffSeconds=10), Handle(), idx, clock=lambda: now[0])  # type: ignore[arg-type]
    result, st = asyncio.run(p.post_filter(_state_of(p, member_pod("g-0")), member_pod("g-0"), {}))
    assert st.code is Code.UNSCHEDULABLE
    assert result is None
    assert p.pre_filter(CycleState(), member_pod("g-1"), {}).message == "podGroup ns/g failed recently"
    now[0] = 111.0
    assert p.pre_filter(CycleState(), member_pod("g-1"), {}).is_success()


def _state_of(p: Coscheduling, pod: PodInfo) -> CycleState:
    state = CycleState()
    assert p.pre_filter(state, pod, {}).code is not Code.ERROR
    return state


def test_permit_waits_wakes_the_siblings_then_allows_the_whole_group() -> None:
    async def go() -> None:
        idx = index(min_member=3, timeout=7)
        p = plugin(idx)
        handle = p.handle
        placed: list[PodInfo] = []
        for i in range(3):
            pod = member_pod(f"g-{i}")
            state = CycleState()
            assert p.pre_filter(state, pod, nodes_with(*placed)).is_success()
            st, timeout = p.permit(state, pod, NodeInfo(name="node-1"))
            if i < 2:
                assert (st.code, timeout) == (Code.WAIT, 7.0)
                assert state.get(PODS_TO_ACTIVATE) == {f"g-{j}" for j in range(3)} - {f"g-{i}"}
                handle.waiting_pods.add(pod, "node-1", {"Coscheduling": timeout})
                placed.append(member_pod(f"g-{i}", node="node-1"))
            else:
                assert st.is_success()
        for i in range(2):
            waiting = handle.waiting_pods.get(f"g-{i}")
            assert waiting is not None and (await waiting.wait()).is_success()

    asyncio.run(go())


def test_unreserve_rejects_every_waiting_sibling_and_tells_the_podgroup() -> None:
    async def go() -> list[Status]:
        idx = index(min_member=3)
        p = plugin(idx)
        for i in range(2):
            p.handle.waiting_pods.add(member_pod(f"g-{i}"), "node-1", {"Coscheduling": 30})
        p.handle.waiting_pods.add(member_pod("other", group="h"), "node-1", {"Coscheduling": 30})
        await p.unreserve(CycleState(), member_pod("g-2"), NodeInfo(name="node-1"))
        out = [await p.handle.waiting_pods.get(f"g-{i}").wait() for i in range(2)]  # type: ignore[union-attr]
        assert p.handle.waiting_pods.get("other")._outcome.done() is False  # type: ignore[union-attr]
        return out

    for st in asyncio.run(go()):
        assert (st.code, st.plugin, st.message) == (
            Code.UNSCHEDULABLE,
            "Coscheduling",
            "rejection in Unreserve",
        )


@pytest.mark.parametrize(
    ("timed_out", "reason"),
    [
        (frozenset({"Coscheduling"}), "Timeout"),
        (None, "Unschedulable"),
        (frozenset({"Other"}), "Unschedulable"),
    ],
    ids=["its-own-timeout", "given-back", "another-plugins-timeout"],
)
def test_unreserve_tells_the_podgroup_a_timeout_by_what_ended_the_wait(
    timed_out: frozenset[str] | None, reason: str
) -> None:
    async def go() -> list[tuple[str, str, str, str]]:
        idx = index(min_member=3)
        p = plugin(idx)
        log = EventLog()
        p.recorder = log
        pod = member_pod("g-0")
        state = CycleState()
        assert p.pre_filter(state, pod, nodes_with()).is_success()
        st, _ = p.permit(state, pod, NodeInfo(name="node-1"))
        assert st.code is Code.WAIT
        p.handle.waiting_pods.add(member_pod("g-1"), "node-1", {"Coscheduling": 30})
        if timed_out is not None:
            state.write(PERMIT_TIMED_OUT, timed_out)
        await p.unreserve(state, pod, NodeInfo(name="node-1"))
        return log.events

    events = asyncio.run(go())
    assert [(name, kind, why) for name, kind, why, _ in events] == [("g", "Warning", reason)]
    assert events[0][3].startswith("2 reserved pod(s) released: ")


@pytest.mark.parametrize(
    ("min_member", "waiting", "rejects"),
    [(4, 2, True), (4, 4, False), (20, 18, False)],
    ids=["far-from-min-rejects-siblings", "already-complete", "within-10-percent-keeps-them"],
)
def test_post_filter(min_member: int, waiting: int, rejects: bool) -> None:
    async def go() -> tuple[Status, int]:
        idx = index(min_member=min_member, members=min_member)
        p = plugin(idx)
        pods = [member_pod(f"g-{i}") for i in range(waiting)]
        for pod in pods:
            p.handle.waiting_pods.add(pod, "node-1", {"Coscheduling": 30})
        last = member_pod("g-last")
        state = CycleState()
        p.pre_filter(state, last, nodes_with(*(member_pod(f"g-{i}", node="node-1") for i in range(waiting))))
        _, st = await p.post_filter(state, last, {})
        done = sum(1 for w in p.handle.waiting_pods if w._outcome.done())
        return st, done

    st, done = asyncio.run(go())
    assert st.code is Code.UNSCHEDULABLE
    assert done == (waiting if rejects else 0)
    if rejects:
        assert "gets rejected due to Pod g-last is unschedulable even after PostFilter" in st.message


def qp(pod: PodInfo, t: float) -> QueuedPodInfo:
    return QueuedPodInfo(pod=pod, timestamp=t, initial_attempt_timestamp=t)


@pytest.mark.parametrize(
    ("a", "b", "less"),
    [
        (qp(pod_info("a", priority=10), 5), qp(pod_info("b"), 1), True),
        (qp(member_pod("g-1"), 9), qp(member_pod("x", group="h"), 1), True),
        (qp(member_pod("x", group="h"), 1), qp(member_pod("g-1"), 9), False),
        (qp(pod_info("a"), 1), qp(pod_info("b"), 2), True),
        (qp(member_pod("g-1"), 2), qp(member_pod("g-0"), 1), False),
    ],
    ids=[
        "priority-first",
        "group-created-earlier-first",
        "unknown-group-after-by-its-queue-time",
        "no-group-by-queue-time",
        "same-group-by-queue-time",
    ],
)
def test_less(a: QueuedPodInfo, b: QueuedPodInfo, less: bool) -> None:
    idx = index()
    idx.set_group(
        f"{NS}/h", PodGroupView(NS, "h", min_member=1, creation=T0 + datetime.timedelta(days=365000))
    )
    assert plugin(idx).less(a, b) is less


# -- minResources (upstream CheckClusterResource) ------------------------------------


def sized_node(name: str, cpu: str, memory: str, pods: int, *placed: PodInfo) -> NodeInfo:
    allocatable = {"cpu": parse_quantity(cpu), "memory": parse_quantity(memory), "pods": Decimal(pods)}
    return NodeInfo(name=name, allocatable=allocatable, pods=placed)


def using(name: str, cpu: str, memory: str = "0", group: str | None = None) -> PodInfo:
    labels = {POD_GROUP_LABEL: group} if group else {}
    requests = {"cpu": parse_quantity(cpu), "memory": parse_quantity(memory)}
    return pod_info(name, uid=name, namespace=NS, labels=labels, requests=requests, node_name="n")


def wants(min_member: int = 2, **resources: str) -> PodGroupView:
    return PodGroupView(
        NS, "g", min_member=min_member, min_resources={k: parse_quantity(v) for k, v in resources.items()}
    )


TWO = (sized_node("a", "2", "1Gi", 10), sized_node("b", "2", "1Gi", 10))


@pytest.mark.parametrize(
    ("group", "nodes", "gap"),
    [
        (
            wants(cpu="3", memory="2Gi"),
            [sized_node("a", "2", "1Gi", 10), sized_node("b", "2", "1Gi", 10)],
            {},
        ),
        (wants(cpu="5"), [sized_node("a", "2", "1Gi", 10), sized_node("b", "2", "1Gi", 10)], {"cpu": 1000}),
        (
            wants(cpu="3"),
            [sized_node("a", "2", "1Gi", 10, using("x", "1500m")), TWO[1]],
            {"cpu": 500},
        ),
        (
            wants(cpu="3"),
            [
                sized_node("a", "2", "1Gi", 10, using("x", "1500m", group="g")),
                sized_node("b", "2", "1Gi", 10),
            ],
            {},
        ),
        (wants(min_member=3), [sized_node("a", "2", "1Gi", 1), sized_node("b", "2", "1Gi", 1)], {"pods": 1}),
        (
            wants(cpu="1"),
            [sized_node("a", "1", "1Gi", 10, using("x", "3")), sized_node("b", "1", "1Gi", 10)],
            {},
        ),
        (
            wants(memory="3Gi", **{"nvidia.com/gpu": "2"}),
            [sized_node("a", "1", "1Gi", 10)],
            {
                "memory": 2 * 2**30,
                "nvidia.com/gpu": 2,
            },
        ),
    ],
    ids=[
        "summed-over-nodes",
        "short-of-cpu",
        "requests-count",
        "the-groups-own-pods-count-as-free",
        "room-for-min-member-pods",
        "an-overcommitted-node-offers-nothing-and-takes-nothing",
        "missing-resources",
    ],
)
def test_resource_gap(group: PodGroupView, nodes: list[NodeInfo], gap: dict[str, int]) -> None:
    assert resource_gap(group.key, group, {n.name: n for n in nodes}) == gap


@pytest.mark.parametrize(
    ("gap", "text"),
    [
        ({"cpu": 1500, "memory": 2**30}, "cpu 1500m, memory 1Gi"),
        ({"cpu": 2000, "pods": 1}, "cpu 2, pods 1"),
        ({"memory": 1000, "ephemeral-storage": 3 * 2**20}, "ephemeral-storage 3Mi, memory 1000"),
    ],
    ids=["millicores-and-binary", "whole-cores", "plain-bytes"],
)
def test_format_gap(gap: dict[str, int], text: str) -> None:
    assert format_gap(gap) == text


def test_pre_filter_checks_min_resources_once_per_schedule_timeout_and_again_after_post_filter() -> None:
    now = [100.0]
    idx = GroupIndex()
    group = PodGroupView(NS, "g", min_member=2, timeout=30, min_resources={"cpu": parse_quantity("3")})
    idx.set_group(group.key, group)
    for i in range(2):
        idx.set_member(f"g-{i}", Member(f"g-{i}", NS, f"g-{i}", group.key))
    p = Coscheduling(CoschedulingArgs(), Handle(), idx, clock=lambda: now[0])  # type: ignore[arg-type]
    small = {"a": sized_node("a", "2", "1Gi", 10)}
    big = {"a": sized_node("a", "4", "1Gi", 10)}
    st = p.pre_filter(CycleState(), member_pod("g-0"), small)
    assert (st.code, st.plugin, st.message) == (
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        "Coscheduling",
        "resource gap: cpu 1",
    )
    assert p.pre_filter(CycleState(), member_pod("g-0"), big).is_success()
    assert p.pre_filter(CycleState(), member_pod("g-1"), small).is_success(), "passed: not checked again"
    now[0] += 31
    assert not p.pre_filter(CycleState(), member_pod("g-1"), small).is_success(), "the pass expired"
    assert p.pre_filter(CycleState(), member_pod("g-0"), big).is_success()
    asyncio.run(p.post_filter(_state_of(p, member_pod("g-0")), member_pod("g-0"), {}))
    assert not p.pre_filter(CycleState(), member_pod("g-1"), small).is_success(), (
        "PostFilter dropped the pass"
    )
