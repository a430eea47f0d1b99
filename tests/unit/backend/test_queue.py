"""backend/queue.SchedulingQueue with a fake clock (no server, no sleeping): ordering, backoff,
flushing, and the queueing hints that decide which events move which parked pods."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from ipscheduler.backend.queue import QueueClosed, SchedulingQueue
from ipscheduler.framework import events
from ipscheduler.framework.interface import (
    WILDCARD_EVENT,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueuedPodInfo,
    QueueingHint,
)
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.plugins.queuesort import PrioritySort
from ipscheduler.underlayip import events as pool_events
from tests.builders import pod_info


class FakeClock:
    """Monotonic seconds that only move when a test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_queue(fake: FakeClock, **kw: Any) -> SchedulingQueue:
    return SchedulingQueue(PrioritySort(), clock=lambda: fake.now, **kw)


def pod(
    name: str, priority: int = 0, qos: str = "BestEffort", annotations: dict[str, str] | None = None
) -> PodInfo:
    return pod_info(name, priority=priority, qos_class=qos, annotations=annotations or {})


def drain(q: SchedulingQueue) -> list[str]:
    out = []
    while (qp := q.pop_nowait()) is not None:
        out.append(qp.pod.name)
    return out


def pop(q: SchedulingQueue) -> QueuedPodInfo:
    qp = q.pop_nowait()
    assert qp is not None
    return qp


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


# --------------------------------------------------------------------------- ordering

ORDER_CASES = [
    # pods in the order they are added (one second apart): (name, priority, qos); expected pop order
    ([("a", 0, "BestEffort"), ("b", 10, "BestEffort"), ("c", 5, "BestEffort")], ["b", "c", "a"]),
    (
        [("be", 0, "BestEffort"), ("bu", 0, "Burstable"), ("g", 0, "Guaranteed")],
        ["g", "bu", "be"],
    ),
    (
        [("first", 0, "Burstable"), ("second", 0, "Burstable"), ("third", 0, "Burstable")],
        ["first", "second", "third"],
    ),
    (
        [
            ("old-be", 1, "BestEffort"),
            ("new-g-low", 0, "Guaranteed"),
            ("new-be", 1, "BestEffort"),
            ("g", 1, "Guaranteed"),
        ],
        ["g", "old-be", "new-be", "new-g-low"],
    ),
    ([("neg", -10, "Guaranteed"), ("zero", 0, "BestEffort")], ["zero", "neg"]),
]


@pytest.mark.parametrize(
    ("pods", "expected"),
    ORDER_CASES,
    ids=["by-priority", "by-qos", "by-age", "priority-qos-age", "negative-priority"],
)
def test_pop_order(clock: FakeClock, pods: list[tuple[str, int, str]], expected: list[str]) -> None:
    q = make_queue(clock)
    for name, prio, qos in pods:
        q.add(pod(name, prio, qos))
        clock.advance(1)
    assert drain(q) == expected


def test_equal_pods_pop_in_insertion_order(clock: FakeClock) -> None:
    q = make_queue(clock)
    names = [f"p{i}" for i in range(20)]
    for name in names:
        q.add(pod(name))  # same timestamp: ties broken by insertion order
    assert drain(q) == names


def test_pop_sets_attempts_and_cycle(clock: FakeClock) -> None:
    q = make_queue(clock)
    q.add(pod("a"))
    q.add(pod("b"))
    assert q.scheduling_cycle == 0
    a = pop(q)
    b = pop(q)
    assert (a.attempts, a.cycle, b.attempts, b.cycle) == (1, 1, 1, 2)
    assert q.scheduling_cycle == 2
    assert a.timestamp == clock.now
    assert a.initial_attempt_timestamp == clock.now
    assert q.pop_nowait() is None
    assert q.scheduling_cycle == 2  # an empty pop is not a cycle


# --------------------------------------------------------------------------- add / delete


def test_add_known_uid_updates_in_place(clock: FakeClock) -> None:
    q = make_queue(clock)
    q.add(pod("a", annotations={"v": "1"}))
    clock.advance(5)
    q.add(pod("a", annotations={"v": "2"}))
    assert len(q) == 1
    assert q.depths()["active"] == 1
    qp = pop(q)
    assert qp.pod.annotations == {"v": "2"}
    assert qp.timestamp == 1000.0  # the queue position (age) is kept
    assert q.pop_nowait() is None


def test_add_updates_pod_in_backoff(clock: FakeClock) -> None:
    q = make_queue(clock)
    q.add(pod("a"))
    q.add_unschedulable(pop(q), error=True)
    q.add(pod("a", annotations={"v": "2"}))
    assert q.depths() == {"active": 0, "backoff": 1, "unschedulable": 0, "gated": 0, "in_flight": 0}
    clock.advance(1)
    assert pop(q).pod.annotations == {"v": "2"}


def test_add_of_unschedulable_pod_requeues_it(clock: FakeClock) -> None:
    q = make_queue(clock)
    q.add(pod("a"))
    q.add_unschedulable(pop(q))
    assert q.depths()["unschedulable"] == 1
    clock.advance(2)  # backoff (1 s) expired
    q.add(pod("a", annotations={"v": "2"}))
    assert q.depths() == {"active": 1, "backoff": 0, "unschedulable": 0, "gated": 0, "in_flight": 0}
    assert pop(q).pod.annotations == {"v": "2"}


def test_status_only_update_keeps_pod_parked(clock: FakeClock) -> None:
    q = make_queue(clock)
    q.add(dataclasses.replace(pod("a"), resource_version="1"))
    q.add_unschedulable(pop(q))
    clock.advance(30)
    q.add(dataclasses.replace(pod("a"), resource_version="2"))  # same spec, new resourceVersion
    assert q.depths() == {"active": 0, "backoff": 0, "unschedulable": 1, "gated": 0, "in_flight": 0}


@pytest.mark.parametrize(
    "where", ["active", "backoff", "unschedulable"], ids=["active", "backoff", "unschedulable"]
)
def test_delete_removes_from_every_sub_queue(clock: FakeClock, where: str) -> None:
    q = make_queue(clock)
    q.add(pod("a"))
    q.add(pod("b", priority=-1))
    if where != "active":
        qp = pop(q)
        q.add_unschedulable(qp, error=where == "backoff")
    before = q.depths()[where]
    assert "uid-a" in q
    q.delete("uid-a")
    assert "uid-a" not in q
    assert q.depths()[where] == before - 1
    assert len(q) == 1
    clock.advance(10_000)  # past any backoff and the unschedulable flush
    assert drain(q) == ["b"]
    q.delete("uid-a")  # idempotent
    q.delete("never-seen")


def test_deleted_then_re_added_pod_pops_once(clock: FakeClock) -> None:
    q = make_queue(clock)
    q.add(pod("a"))
    q.delete("uid-a")
    q.add(pod("a", annotations={"v": "2"}))
    got = [(qp.pod.name, dict(qp.pod.annotations)) for qp in iter(q.pop_nowait, None)]
    assert got == [("a", {"v": "2"})]


def test_pod_deleted_while_in_flight_is_not_requeued(clock: FakeClock) -> None:
    q = make_queue(clock)
    q.add(pod("a"))
    qp = pop(q)
    q.delete("uid-a")  # the watch saw it deleted while it was being bound
    q.add_unschedulable(qp, error=True)  # the bind then failed
    clock.advance(10_000)
    assert "uid-a" not in q
    assert q.pop_nowait() is None


# --------------------------------------------------------------------------- unschedulable / backoff


def test_add_unschedulable_parks_the_pod(clock: FakeClock) -> None:
    q = make_queue(clock)
    q.add(pod("a"))
    qp = pop(q)
    q.add_unschedulable(qp)
    assert q.depths() == {"active": 0, "backoff": 0, "unschedulable": 1, "gated": 0, "in_flight": 0}
    assert "uid-a" in q
    assert len(q) == 1
    clock.advance(60)  # backoff long over, but nothing happened in the cluster
    assert q.pop_nowait() is None
    assert q.next_wakeup() is None


MOVE_CASES = [
    # (attempts before the failure, seconds after the failure when the event comes, expected sub-queue)
    (1, 0.0, "backoff"),
    (1, 0.5, "backoff"),
    (1, 1.0, "active"),
    (1, 3.0, "active"),
    (3, 3.9, "backoff"),
    (3, 4.0, "active"),
    (7, 9.9, "backoff"),
    (7, 10.0, "active"),
]


@pytest.mark.parametrize(
    ("attempts", "after", "expected"),
    MOVE_CASES,
    ids=[f"attempt{a}-after{t}s-{e}" for a, t, e in MOVE_CASES],
)
def test_move_all_to_active_or_backoff(clock: FakeClock, attempts: int, after: float, expected: str) -> None:
    q = make_queue(clock)
    q.add(pod("a"))
    for _ in range(attempts - 1):
        q.add_unschedulable(pop(q), error=True)
        clock.advance(100)
    qp = pop(q)
    assert qp.attempts == attempts
    q.add(pod("other"))
    pop(q)  # another cycle passes, so the move below is not "during a's cycle"
    q.add_unschedulable(qp)
    assert q.depths()["unschedulable"] == 1
    clock.advance(after)
    assert q.move_all_to_active_or_backoff(pool_events.NODE_IP_POOL_CHANGE) == 1
    depths = q.depths()
    assert depths["unschedulable"] == 0
    assert depths[expected] == 1
    assert depths["active"] + depths["backoff"] == 1
    assert q.move_all_to_active_or_backoff() == 0


def test_backoff_pod_pops_only_when_expired(clock: FakeClock) -> None:
    q = make_queue(clock)
    q.add(pod("a"))
    q.add_unschedulable(pop(q), error=True)  # attempts=1: 1 s
    assert q.next_wakeup() == 1.0
    clock.advance(0.75)
    assert q.next_wakeup() == 0.25
    assert q.pop_nowait() is None
    clock.advance(0.25)
    qp = pop(q)
    assert (qp.pod.name, qp.attempts) == ("a", 2)
    assert q.next_wakeup() is None


BACKOFF_CASES = [(0, 0.0), (1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (6, 10.0), (30, 10.0)]


@pytest.mark.parametrize(
    ("attempts", "seconds"), BACKOFF_CASES, ids=[f"attempts-{a}" for a, _ in BACKOFF_CASES]
)
def test_backoff_duration(clock: FakeClock, attempts: int, seconds: float) -> None:
    q = make_queue(clock)
    qp = QueuedPodInfo(pod=pod("a"), timestamp=0.0, attempts=attempts)
    assert q.backoff_duration(qp) == seconds


def test_backoff_grows_exponentially_and_is_capped(clock: FakeClock) -> None:
    q = make_queue(clock)
    q.add(pod("a"))
    waits = []
    for _ in range(6):
        q.add_unschedulable(pop(q), error=True)
        wait = q.next_wakeup()
        assert wait is not None
        waits.append(wait)
        clock.advance(wait - 0.001)
        assert q.pop_nowait() is None  # not a moment early
        clock.advance(0.001)
    assert waits == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_custom_backoff_settings(clock: FakeClock) -> None:
    q = make_queue(clock, initial_backoff=0.5, max_backoff=3.0)
    durations = [
        q.backoff_duration(QueuedPodInfo(pod=pod("a"), timestamp=0, attempts=n)) for n in range(1, 6)
    ]
    assert durations == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_error_goes_to_backoff(clock: FakeClock) -> None:
    q = make_queue(clock)
    q.add(pod("a"))
    q.add_unschedulable(pop(q), error=True)
    assert q.depths() == {"active": 0, "backoff": 1, "unschedulable": 0, "gated": 0, "in_flight": 0}


def test_move_request_during_cycle_sends_fit_failure_to_backoff(clock: FakeClock) -> None:
    q = make_queue(clock)
    q.add(pod("a"))
    qp = pop(q)
    q.move_all_to_active_or_backoff(
        pool_events.ADDRESS_RELEASED
    )  # e.g. an address freed while "a" was filtered
    q.add_unschedulable(qp)
    assert q.depths() == {"active": 0, "backoff": 1, "unschedulable": 0, "gated": 0, "in_flight": 0}
    clock.advance(1)
    assert pop(q).pod.name == "a"


def test_move_request_before_cycle_does_not_count(clock: FakeClock) -> None:
    q = make_queue(clock)
    q.move_all_to_active_or_backoff(events.NODE_ADD)
    q.add(pod("a"))
    q.add(pod("b"))
    a = pop(q)
    q.move_all_to_active_or_backoff(events.NODE_ADD)  # during a's cycle (1), before b's (2)
    b = pop(q)
    q.add_unschedulable(b)
    q.add_unschedulable(a)
    assert q.depths() == {"active": 0, "backoff": 1, "unschedulable": 1, "gated": 0, "in_flight": 0}
    clock.advance(1)
    assert drain(q) == ["a"]  # a was in backoff, b stays parked
    assert q.depths()["unschedulable"] == 1


def test_flush_moves_long_parked_pods(clock: FakeClock) -> None:
    q = make_queue(clock, max_unschedulable=300.0)
    q.add(pod("a"))
    q.add_unschedulable(pop(q))
    clock.advance(299.9)
    q.flush()
    assert q.depths()["unschedulable"] == 1
    assert q.pop_nowait() is None
    clock.advance(0.1)
    q.flush()
    assert q.depths() == {"active": 1, "backoff": 0, "unschedulable": 0, "gated": 0, "in_flight": 0}
    assert pop(q).pod.name == "a"


def test_flush_moves_expired_backoff_to_active(clock: FakeClock) -> None:
    q = make_queue(clock)
    q.add(pod("a"))
    q.add_unschedulable(pop(q), error=True)
    q.flush()
    assert q.depths()["backoff"] == 1
    clock.advance(1)
    q.flush()
    assert q.depths()["active"] == 1


# --------------------------------------------------------------------------- in flight


def test_in_flight_pod_is_updated_not_re_added(clock: FakeClock) -> None:
    q = make_queue(clock)
    q.add(pod("a"))
    qp = pop(q)
    assert q.depths() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0, "in_flight": 1}
    assert "uid-a" not in q
    q.add(pod("a", annotations={"v": "2"}))
    assert q.depths() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0, "in_flight": 1}
    assert q.pop_nowait() is None
    assert qp.pod.annotations == {"v": "2"}
    q.add_unschedulable(qp, error=True)
    assert q.depths() == {"active": 0, "backoff": 1, "unschedulable": 0, "gated": 0, "in_flight": 0}
    clock.advance(1)
    assert pop(q).pod.annotations == {"v": "2"}


def test_done_stops_tracking(clock: FakeClock) -> None:
    q = make_queue(clock)
    q.add(pod("a"))
    pop(q)
    q.done("uid-a")
    assert q.depths() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0, "in_flight": 0}
    q.add(pod("a"))  # a later event for the same UID is a new pod again
    assert q.depths()["active"] == 1


def test_depths_and_len(clock: FakeClock) -> None:
    q = make_queue(clock)
    for name in "abcde":
        q.add(pod(name))
    assert q.depths() == {"active": 5, "backoff": 0, "unschedulable": 0, "gated": 0, "in_flight": 0}
    q.add_unschedulable(pop(q), error=True)
    q.add_unschedulable(pop(q))
    pop(q)
    assert q.depths() == {"active": 2, "backoff": 1, "unschedulable": 1, "gated": 0, "in_flight": 1}
    assert len(q) == 4


def test_gated_pods_are_counted_until_added_without_gates_or_deleted(clock: FakeClock) -> None:
    q = make_queue(clock)
    q.add(pod("a"))
    q.gate(pod("a").uid)  # a gate added while queued: out of activeQ, counted as gated
    q.gate(pod("b").uid)
    assert (q.depths()["active"], q.depths()["gated"], len(q)) == (0, 2, 0)
    q.add(pod("a"))  # the gate removed
    q.delete(pod("b").uid)
    assert (q.depths()["active"], q.depths()["gated"]) == (1, 0)


def test_incoming_pods_by_queue_and_event(clock: FakeClock) -> None:
    seen: list[tuple[str, str]] = []
    q = make_queue(clock, on_incoming=lambda queue, event: seen.append((queue, event)))
    for name in "abc":
        q.add(pod(name))
    q.add_unschedulable(pop(q), error=True)
    qp = pop(q)
    qp.unschedulable_plugins = {"UnderlayIP"}
    q.add_unschedulable(qp)
    clock.advance(30)
    q.flush()
    q.move_all_to_active_or_backoff(pool_events.NODE_IP_POOL_CHANGE)
    assert seen == [
        ("active", "PodAdd"),
        ("active", "PodAdd"),
        ("active", "PodAdd"),
        ("backoff", "ScheduleAttemptFailure"),
        ("unschedulable", "ScheduleAttemptFailure"),
        ("active", "BackoffComplete"),
        ("active", pool_events.NODE_IP_POOL_CHANGE.label),
    ]


def test_unschedulable_by_plugin_counts_a_pod_per_plugin(clock: FakeClock) -> None:
    q = make_queue(clock)
    for name, plugins in (("a", {"UnderlayIP"}), ("b", {"UnderlayIP", "NodeResourcesFit"}), ("c", set())):
        q.add(pod(name))
        qp = pop(q)
        qp.unschedulable_plugins = plugins
        q.add_unschedulable(qp)
    assert q.unschedulable_by_plugin() == {"UnderlayIP": 2, "NodeResourcesFit": 1}
    q.delete(pod("b").uid)
    assert q.unschedulable_by_plugin() == {"UnderlayIP": 1}


# --------------------------------------------------------------------------- async pop


async def test_pop_wakes_up_when_a_pod_is_added(clock: FakeClock) -> None:
    q = make_queue(clock)
    popper = asyncio.create_task(q.pop())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not popper.done()  # nothing to pop: it waits

    async def adder() -> None:
        q.add(pod("late"))

    await asyncio.create_task(adder())
    # Woken by the add, not by the 1 s poll: done within a few loop iterations.
    for _ in range(50):
        if popper.done():
            break
        await asyncio.sleep(0)
    assert popper.done()
    qp = popper.result()
    assert qp.pod.name == "late"
    assert q.depths()["in_flight"] == 1


async def test_pop_raises_after_close(clock: FakeClock) -> None:
    q = make_queue(clock)
    popper = asyncio.create_task(q.pop())
    await asyncio.sleep(0)
    q.close()
    for _ in range(50):
        if popper.done():
            break
        await asyncio.sleep(0)
    assert popper.done()
    with pytest.raises(QueueClosed):
        popper.result()


# --------------------------------------------------------------------------- queueing hints
# An event moves only the unschedulable pods whose rejecting plugins registered it and whose
# hint says it may help (upstream ``isPodWorthRequeuing``,
# ``pkg/scheduler/backend/queue/scheduling_queue.go``).

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
    return sorted(drain(q))


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
