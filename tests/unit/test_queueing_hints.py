"""Queueing hints: an event moves only the unschedulable pods whose rejecting plugins
registered it and whose hint says it may help (upstream ``isPodWorthRequeuing``,
``pkg/scheduler/backend/queue/scheduling_queue.go``), the framework's collection of
registrations, and each in-tree plugin's hint functions."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any

import pytest

from ipscheduler.backend.queue import SchedulingQueue
from ipscheduler.framework import events
from ipscheduler.framework.interface import (
    WILDCARD_EVENT,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EventResource,
    QueuedPodInfo,
    QueueingHint,
    Status,
)
from ipscheduler.framework.runtime import Framework
from ipscheduler.framework.types import HostPort, NodeInfo, PodInfo, Taint, Toleration
from ipscheduler.plugins import (
    interpodaffinity,
    nodeaffinity,
    nodename,
    nodeports,
    nodeready,
    noderesources,
    nodeunschedulable,
    podtopologyspread,
    tainttoleration,
)
from ipscheduler.plugins.queuesort import PrioritySort
from ipscheduler.plugins.registry import new_in_tree_registry
from ipscheduler.underlayip import events as pool_events
from tests.unit.test_queue import FakeClock, pod, pop

NODE_LABEL = ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_LABEL, "NodeUpdate")
NODE_TAINT = ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_TAINT, "NodeUpdate")


def hint(value: QueueingHint, calls: list[tuple[str, Any, Any]] | None = None) -> Any:
    def fn(p: PodInfo, old: Any, new: Any) -> QueueingHint:
        if calls is not None:
            calls.append((p.name, old, new))
        return value

    return fn


def boom(p: PodInfo, old: Any, new: Any) -> QueueingHint:
    raise RuntimeError("hint failed")


def parked(
    clock: FakeClock, hints: list[tuple[str, ClusterEventWithHint]], **rejected: set[str]
) -> SchedulingQueue:
    """A queue with ``hints``, holding one unschedulable pod per keyword (pod name → the
    plugins that rejected it), each past its backoff."""
    q = SchedulingQueue(PrioritySort(), clock=lambda: clock.now, hints=hints)
    for name in rejected:
        q.add(pod(name))
    for _ in rejected:
        qp = pop(q)
        qp.unschedulable_plugins = set(rejected[qp.pod.name])
        q.add_unschedulable(qp)
    clock.advance(100)
    assert q.depths()["unschedulable"] == len(rejected)
    return q


def active(q: SchedulingQueue) -> list[str]:
    out = []
    while (qp := q.pop_nowait()) is not None:
        out.append(qp.pod.name)
    return sorted(out)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_an_event_moves_only_pods_a_registering_plugin_rejected(clock: FakeClock) -> None:
    hints = [
        ("TaintToleration", ClusterEventWithHint(NODE_TAINT)),
        ("NodeAffinity", ClusterEventWithHint(NODE_LABEL)),
    ]
    q = parked(
        clock,
        hints,
        tainted={"TaintToleration"},
        affine={"NodeAffinity"},
        both={"TaintToleration", "NodeAffinity"},
    )
    assert q.move_all_to_active_or_backoff(NODE_LABEL) == 2
    assert active(q) == ["affine", "both"]
    assert q.depths()["unschedulable"] == 1
    assert q.move_all_to_active_or_backoff(NODE_TAINT) == 1
    assert active(q) == ["tainted"]


def test_an_update_naming_several_parts_matches_each_registration(clock: FakeClock) -> None:
    q = parked(clock, [("NodeAffinity", ClusterEventWithHint(NODE_LABEL))], a={"NodeAffinity"})
    both = ClusterEvent(
        EventResource.NODE, ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_TAINT, "NodeUpdate"
    )
    assert q.move_all_to_active_or_backoff(both) == 1


@pytest.mark.parametrize(
    ("fn", "moved"),
    [(None, 1), (hint(QueueingHint.QUEUE), 1), (hint(QueueingHint.SKIP), 0), (boom, 1)],
    ids=["no-hint-fn", "queue", "skip", "raises-counts-as-queue"],
)
def test_the_hint_function_decides(clock: FakeClock, fn: Any, moved: int) -> None:
    q = parked(clock, [("P", ClusterEventWithHint(events.NODE_ADD, fn))], a={"P"})
    assert q.move_all_to_active_or_backoff(events.NODE_ADD, None, NodeInfo(name="n")) == moved
    assert q.depths()["unschedulable"] == 1 - moved


def test_the_hint_gets_the_pod_and_the_objects(clock: FakeClock) -> None:
    calls: list[tuple[str, Any, Any]] = []
    q = parked(clock, [("P", ClusterEventWithHint(NODE_LABEL, hint(QueueingHint.SKIP, calls)))], a={"P"})
    old, new = NodeInfo(name="n"), NodeInfo(name="n", labels={"zone": "b"})
    q.move_all_to_active_or_backoff(NODE_LABEL, old, new)
    assert calls == [("a", old, new)]


def test_one_queueing_plugin_of_several_suffices(clock: FakeClock) -> None:
    hints = [
        ("A", ClusterEventWithHint(events.NODE_ADD, hint(QueueingHint.SKIP))),
        ("B", ClusterEventWithHint(events.NODE_ADD, hint(QueueingHint.QUEUE))),
    ]
    q = parked(clock, hints, x={"A", "B"}, y={"A"})
    assert q.move_all_to_active_or_backoff(events.NODE_ADD) == 1
    assert active(q) == ["x"]


def test_a_hint_of_a_plugin_that_did_not_reject_the_pod_is_not_asked(clock: FakeClock) -> None:
    calls: list[tuple[str, Any, Any]] = []
    q = parked(
        clock, [("B", ClusterEventWithHint(events.NODE_ADD, hint(QueueingHint.QUEUE, calls)))], a={"A"}
    )
    assert q.move_all_to_active_or_backoff(events.NODE_ADD) == 0
    assert calls == []


def test_a_pod_no_plugin_rejected_moves_on_any_event(clock: FakeClock) -> None:
    q = parked(clock, [("A", ClusterEventWithHint(NODE_LABEL))], a=set())
    assert q.move_all_to_active_or_backoff(pool_events.ADDRESS_RELEASED) == 1


def test_a_wildcard_registration_moves_its_pods_on_any_event(clock: FakeClock) -> None:
    q = parked(
        clock,
        [("Old", ClusterEventWithHint(WILDCARD_EVENT)), ("A", ClusterEventWithHint(NODE_LABEL))],
        a={"Old"},
        b={"A"},
    )
    assert q.move_all_to_active_or_backoff(events.ASSIGNED_POD_ADD) == 1
    assert active(q) == ["a"]


def test_the_wildcard_event_moves_every_pod(clock: FakeClock) -> None:
    q = parked(clock, [("A", ClusterEventWithHint(NODE_LABEL, hint(QueueingHint.SKIP)))], a={"A"}, b={"B"})
    assert q.move_all_to_active_or_backoff(WILDCARD_EVENT) == 2


def test_without_hints_every_event_moves_every_pod(clock: FakeClock) -> None:
    q = SchedulingQueue(PrioritySort(), clock=lambda: clock.now)
    q.add(pod("a"))
    qp = pop(q)
    qp.unschedulable_plugins = {"UnderlayIP"}
    q.add_unschedulable(qp)
    assert q.move_all_to_active_or_backoff(events.NODE_ADD) == 1


def test_a_deleted_or_updated_pod_leaves_the_plugin_index(clock: FakeClock) -> None:
    calls: list[tuple[str, Any, Any]] = []
    q = parked(
        clock,
        [("A", ClusterEventWithHint(events.NODE_ADD, hint(QueueingHint.SKIP, calls)))],
        a={"A"},
        b={"A"},
    )
    q.delete("uid-a")
    q.add(pod("b", priority=5))  # a spec change moves it back by itself
    assert active(q) == ["b"]
    assert q.move_all_to_active_or_backoff(events.NODE_ADD) == 0
    assert calls == []


def test_pop_clears_the_previous_rejectors(clock: FakeClock) -> None:
    q = parked(clock, [("A", ClusterEventWithHint(events.NODE_ADD))], a={"A"})
    q.move_all_to_active_or_backoff(events.NODE_ADD)
    assert pop(q).unschedulable_plugins == set()


@pytest.mark.parametrize(
    ("value", "expected"),
    [(QueueingHint.QUEUE, "backoff"), (QueueingHint.SKIP, "unschedulable")],
    ids=["helps-backoff", "does-not-help-parked"],
)
def test_an_event_during_the_cycle_is_judged_by_the_hints(
    clock: FakeClock, value: QueueingHint, expected: str
) -> None:
    q = SchedulingQueue(
        PrioritySort(),
        clock=lambda: clock.now,
        hints=[("A", ClusterEventWithHint(events.NODE_ADD, hint(value)))],
    )
    q.add(pod("a"))
    qp = pop(q)
    q.move_all_to_active_or_backoff(events.NODE_ADD, None, NodeInfo(name="n"))  # while "a" was filtered
    qp.unschedulable_plugins = {"A"}
    q.add_unschedulable(qp)
    assert q.depths()[expected] == 1


def test_events_are_kept_only_while_pods_are_in_flight(clock: FakeClock) -> None:
    q = SchedulingQueue(
        PrioritySort(), clock=lambda: clock.now, hints=[("A", ClusterEventWithHint(events.NODE_ADD))]
    )
    q.move_all_to_active_or_backoff(events.NODE_ADD)  # nobody in flight: not kept
    q.add(pod("a"))
    q.add(pod("b"))
    a = pop(q)
    q.move_all_to_active_or_backoff(events.NODE_ADD)  # during a's cycle
    q.done(a.pod.uid)  # a bound: the event is dropped
    b = pop(q)
    b.unschedulable_plugins = {"A"}
    q.add_unschedulable(b)
    assert q.depths()["unschedulable"] == 1
    assert not q._in_flight_events


# --------------------------------------------------------------------------- the framework


class Rejecting:
    def __init__(self, name: str, registrations: list[ClusterEventWithHint] | None = None) -> None:
        self.name = name
        self._registrations = registrations

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return Status.unschedulable("no", plugin=self.name)

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: Any) -> Status:
        return Status.success()


class Registering(Rejecting):
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return list(self._registrations or [])


def test_framework_collects_registrations_once_per_plugin() -> None:
    reg = ClusterEventWithHint(events.NODE_ADD)
    with_ext, without = Registering("With", [reg]), Rejecting("Without")
    fw = Framework(
        scheduler_name="s", queue_sort=PrioritySort(), pre_filter=[with_ext], filter=[with_ext, without]
    )
    assert fw.queueing_hints() == [("With", reg), ("Without", ClusterEventWithHint(WILDCARD_EVENT))]


def test_diagnosis_names_every_rejecting_filter() -> None:
    a, b = Rejecting("A"), Rejecting("B")
    fw = Framework(scheduler_name="s", queue_sort=PrioritySort(), filter=[a])
    _, diagnosis = fw.find_feasible(CycleState(), pod("p"), {"n1": NodeInfo(name="n1")})
    assert diagnosis.unschedulable_plugins == {"A"}
    fw = Framework(scheduler_name="s", queue_sort=PrioritySort(), filter=[b, a])
    _, diagnosis = fw.find_feasible(CycleState(), pod("p"), {"n1": NodeInfo(name="n1")})
    assert diagnosis.unschedulable_plugins == {"B"}  # the first failing filter of each node


# --------------------------------------------------------------------------- plugin hints


def ask(plugin: Any, event: ClusterEvent, p: PodInfo, old: Any, new: Any) -> QueueingHint:
    """What ``plugin`` says about ``event``; SKIP when it did not register the event."""
    for reg in plugin.events_to_register():
        if event.matches(reg.event):
            if reg.queueing_hint_fn is None:
                return QueueingHint.QUEUE
            got = reg.queueing_hint_fn(p, old, new)
            if got is QueueingHint.QUEUE:
                return got
    return QueueingHint.SKIP


def node_update(old: NodeInfo, new: NodeInfo) -> ClusterEvent:
    event = events.node_update_event(old, new)
    assert event is not None
    return event


N = NodeInfo(
    name="n1", labels={"zone": "a"}, ready=True, allocatable={"cpu": Decimal(4), "pods": Decimal(110)}
)
NOSCHED = Taint(key="dedicated", value="gpu", effect="NoSchedule")
GPU_TOL = Toleration(key="dedicated", operator="Equal", value="gpu", effect="NoSchedule")
P = PodInfo(uid="u", namespace="ns", name="p")
P_ZONE_B = PodInfo(uid="u", namespace="ns", name="p", node_selector={"zone": "b"})
P_CPU8 = PodInfo(uid="u", namespace="ns", name="p", requests={"cpu": Decimal(8)})
P_PORT = PodInfo(
    uid="u", namespace="ns", name="p", host_ports=(HostPort(host_ip="", protocol="TCP", port=80),)
)
P_GPU = PodInfo(uid="u", namespace="ns", name="p", tolerations=(GPU_TOL,))
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


def _replace(obj: Any, **kw: Any) -> Any:
    return dataclasses.replace(obj, **kw)


PLUGIN_CASES: list[tuple[str, Any, Any, PodInfo, Any, Any, QueueingHint]] = [
    # id, plugin, event (None: node update from old/new), pod, old, new, expected
    (
        "unschedulable-uncordoned",
        nodeunschedulable.NodeUnschedulable(),
        None,
        P,
        _replace(N, unschedulable=True),
        N,
        QueueingHint.QUEUE,
    ),
    (
        "unschedulable-cordoned",
        nodeunschedulable.NodeUnschedulable(),
        None,
        P,
        N,
        _replace(N, unschedulable=True),
        QueueingHint.SKIP,
    ),
    (
        "unschedulable-label-change",
        nodeunschedulable.NodeUnschedulable(),
        None,
        P,
        N,
        _replace(N, labels={}),
        QueueingHint.SKIP,
    ),
    ("ready-became-ready", nodeready.NodeReady(), None, P, _replace(N, ready=False), N, QueueingHint.QUEUE),
    (
        "ready-new-not-ready",
        nodeready.NodeReady(),
        events.NODE_ADD,
        P,
        None,
        _replace(N, ready=False),
        QueueingHint.SKIP,
    ),
    (
        "nodename-the-named-node",
        nodename.NodeName(),
        events.NODE_ADD,
        P_ON_N2,
        None,
        _replace(N, name="n2"),
        QueueingHint.QUEUE,
    ),
    ("nodename-another-node", nodename.NodeName(), events.NODE_ADD, P_ON_N2, None, N, QueueingHint.SKIP),
    (
        "taint-removed",
        tainttoleration.TaintToleration(),
        None,
        P,
        _replace(N, taints=(NOSCHED,)),
        N,
        QueueingHint.QUEUE,
    ),
    (
        "taint-added",
        tainttoleration.TaintToleration(),
        None,
        P,
        N,
        _replace(N, taints=(NOSCHED,)),
        QueueingHint.SKIP,
    ),
    (
        "taint-tolerated-new-node",
        tainttoleration.TaintToleration(),
        events.NODE_ADD,
        P_GPU,
        None,
        _replace(N, taints=(NOSCHED,)),
        QueueingHint.QUEUE,
    ),
    (
        "taint-untolerated-new-node",
        tainttoleration.TaintToleration(),
        events.NODE_ADD,
        P,
        None,
        _replace(N, taints=(NOSCHED,)),
        QueueingHint.SKIP,
    ),
    (
        "affinity-label-now-matches",
        nodeaffinity.NodeAffinity(),
        None,
        P_ZONE_B,
        N,
        _replace(N, labels={"zone": "b"}),
        QueueingHint.QUEUE,
    ),
    (
        "affinity-label-still-not",
        nodeaffinity.NodeAffinity(),
        None,
        P_ZONE_B,
        N,
        _replace(N, labels={"zone": "c"}),
        QueueingHint.SKIP,
    ),
    (
        "affinity-taint-change-not-registered",
        nodeaffinity.NodeAffinity(),
        None,
        P_ZONE_B,
        N,
        _replace(N, taints=(NOSCHED,)),
        QueueingHint.SKIP,
    ),
    (
        "resources-node-big-enough",
        noderesources.NodeResourcesFit(),
        events.NODE_ADD,
        P_CPU8,
        None,
        _replace(N, allocatable={"cpu": Decimal(16), "pods": Decimal(110)}),
        QueueingHint.QUEUE,
    ),
    (
        "resources-node-too-small",
        noderesources.NodeResourcesFit(),
        events.NODE_ADD,
        P_CPU8,
        None,
        N,
        QueueingHint.SKIP,
    ),
    (
        "resources-allocatable-grew",
        noderesources.NodeResourcesFit(),
        None,
        P_CPU8,
        N,
        _replace(N, allocatable={"cpu": Decimal(8), "pods": Decimal(110)}),
        QueueingHint.QUEUE,
    ),
    (
        "resources-cpu-pod-deleted",
        noderesources.NodeResourcesFit(),
        events.ASSIGNED_POD_DELETE,
        P_CPU8,
        P_CPU8,
        None,
        QueueingHint.QUEUE,
    ),
    (
        "resources-any-pod-deleted-frees-a-slot",
        noderesources.NodeResourcesFit(),
        events.ASSIGNED_POD_DELETE,
        P_CPU8,
        P,
        None,
        QueueingHint.QUEUE,
    ),
    (
        "resources-pod-added",
        noderesources.NodeResourcesFit(),
        events.ASSIGNED_POD_ADD,
        P_CPU8,
        None,
        P,
        QueueingHint.SKIP,
    ),
    (
        "ports-holder-deleted",
        nodeports.NodePorts(),
        events.ASSIGNED_POD_DELETE,
        P_PORT,
        P_PORT,
        None,
        QueueingHint.QUEUE,
    ),
    (
        "ports-other-pod-deleted",
        nodeports.NodePorts(),
        events.ASSIGNED_POD_DELETE,
        P_PORT,
        P,
        None,
        QueueingHint.SKIP,
    ),
    ("ports-node-added", nodeports.NodePorts(), events.NODE_ADD, P_PORT, None, N, QueueingHint.QUEUE),
    (
        "interpod-pod-added",
        interpodaffinity.InterPodAffinity(),
        events.ASSIGNED_POD_ADD,
        P,
        None,
        P,
        QueueingHint.QUEUE,
    ),
    ("interpod-taint-change", interpodaffinity.InterPodAffinity(), NODE_TAINT, P, N, N, QueueingHint.SKIP),
    (
        "spread-node-deleted",
        podtopologyspread.PodTopologySpread(),
        events.NODE_DELETE,
        P,
        N,
        None,
        QueueingHint.QUEUE,
    ),
    (
        "spread-pool-change",
        podtopologyspread.PodTopologySpread(),
        pool_events.ADDRESS_RELEASED,
        P,
        None,
        None,
        QueueingHint.SKIP,
    ),
]


@pytest.mark.parametrize(
    ("plugin", "event", "p", "old", "new", "expected"),
    [c[1:] for c in PLUGIN_CASES],
    ids=[c[0] for c in PLUGIN_CASES],
)
def test_plugin_hints(
    plugin: Any, event: ClusterEvent | None, p: PodInfo, old: Any, new: Any, expected: QueueingHint
) -> None:
    if event is None:
        event = node_update(old, new)
    assert ask(plugin, event, p, old, new) is expected


def test_every_in_tree_filter_plugin_registers_events() -> None:
    """A plugin without registrations would fall back to the wildcard: every event."""
    registry = new_in_tree_registry()
    for name in (
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "InterPodAffinity",
        "PodTopologySpread",
        "NodeReady",
    ):
        plugin = registry.new_plugin(name, None, None)  # type: ignore[arg-type]
        assert plugin.events_to_register(), name  # type: ignore[attr-defined]


def test_an_unchanged_node_sends_no_update_event() -> None:
    assert events.node_update_event(N, _replace(N)) is None


@pytest.mark.parametrize(
    ("old", "new", "action"),
    [
        (P, PodInfo(uid="u", namespace="ns", name="p", labels={"app": "x"}), ActionType.UPDATE_POD_LABEL),
        (P_CPU8, P, ActionType.UPDATE_POD_SCALE_DOWN),
        (P, _replace(P, resource_version="2"), ActionType.UPDATE_OTHER),
        (P, P, None),
    ],
    ids=["labels", "scale-down", "other", "unchanged"],
)
def test_assigned_pod_update_event(old: PodInfo, new: PodInfo, action: ActionType | None) -> None:
    event = events.assigned_pod_update_event(old, new)
    assert (event.action_type if event else None) == action


def test_queued_pod_info_starts_without_rejectors() -> None:
    assert QueuedPodInfo(pod=P, timestamp=0).unschedulable_plugins == set()
