"""scheduler/eventhandlers: informer events into the scheduler's cache and queue.

Node events: Scheduler.on_node_event and PoolController.on_node_event, both subscribed to the
node informer of cmd/wiring as there: which node watch events retry pending pods (once per
fact) or refresh pools, and what the cache keeps. kube-scheduler sends no NodeUpdate event for
an update that changes nothing a plugin reads; kwok and kubelets post heartbeats every few
seconds, so each one must not move unschedulable pods back to the active queue. An update
names the parts that changed (action flags), so only plugins that registered them are asked.

Pending pods that vanish without a DELETED event leave the queue: kopf's
pending-pod watch re-LISTs after a 410 Gone without reporting the pods that vanished
meanwhile. The scheduler runs here with the default profile over a real pool cache and
writer; only the API server is in memory.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.cmd.wiring import bound_pod_informer, node_informer
from ipscheduler.framework.interface import ActionType, ClusterEvent
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.kube.informer import ObjectStore, PendingPodEvents
from ipscheduler.scheduler import eventhandlers
from ipscheduler.scheduler.scheduler import Scheduler
from ipscheduler.underlayip.controller import PoolController
from ipscheduler.underlayip.informers import pool_informer
from tests.builders import pending_pod_body as pod_body
from tests.unit.fakes import SchedulerEnv, pool_cache, pool_controller


@pytest.fixture
def quick_lists(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A LIST burst ends after 10 ms without an event (2 s in production)."""
    monkeypatch.setattr(eventhandlers, "LIST_QUIET", 0.01)
    yield


# --------------------------------------------------------------------------- re-LIST of kopf's watch


async def test_pods_a_relist_does_not_report_are_checked_and_dropped_if_gone(quick_lists: None) -> None:
    env = SchedulerEnv()
    env.create("g0", nodeSelector={"none": "such"})  # unschedulable: parked in the queue
    live = env.create("g1", nodeSelector={"none": "such"})
    for _ in range(2):
        await env.schedule_next()
    assert len(env.sched.queue) == 2
    env.api.delete_pod("pod-g0")  # while the watch was away: no DELETED event
    env.sched.handlers.on_pod_event(None, PodInfo.from_obj(live))  # kopf's re-LIST reports g1 only
    await asyncio.sleep(0.05)
    await env.settle()
    assert "g0" not in env.sched.queue and "g1" in env.sched.queue
    assert env.api.reads == ["pod-g0"], "one live read, of the pod the LIST lacked"
    assert env.gone_count("relist") == 1
    # Its allocations, had it any, are the GC sweep's: the pool controller missed the same
    # DELETED event, and the scheduler calls nothing outside itself.


async def test_kopfs_first_list_checks_nothing(quick_lists: None) -> None:
    env = SchedulerEnv()
    for uid in ("a", "b"):
        body = pod_body(uid)
        env.api.put_pod(body)
        env.sched.handlers.on_pod_event(None, PodInfo.from_obj(body))
    await asyncio.sleep(0.05)
    await env.settle()
    assert len(env.sched.queue) == 2 and env.api.reads == [] and env.api.lists == 0


async def test_a_pod_updated_during_the_relist_is_not_a_suspect(quick_lists: None) -> None:
    """kopf coalesces a pod's events within its batch window: a listed pod may arrive as
    MODIFIED. Any event during the LIST shows the pod is there."""
    env = SchedulerEnv()
    a = env.create("a", nodeSelector={"none": "such"})
    b = env.create("b", nodeSelector={"none": "such"})
    env.sched.handlers.on_pod_event(None, PodInfo.from_obj(a))
    env.sched.handlers.on_pod_event("MODIFIED", PodInfo.from_obj(b))
    await asyncio.sleep(0.05)
    await env.settle()
    assert env.api.reads == [] and len(env.sched.queue) == 2


async def test_many_suspects_are_narrowed_by_one_fresh_list(quick_lists: None) -> None:
    env = SchedulerEnv()
    pods = [env.create(f"p{i}", nodeSelector={"none": "such"}) for i in range(30)]
    env.api.delete_pod("pod-p3")
    env.sched.handlers.on_pod_event(None, PodInfo.from_obj(pods[0]))  # a burst cut short: 29 suspects
    await asyncio.sleep(0.05)
    await env.settle()
    assert env.api.lists == 1 and env.api.reads == ["pod-p3"]
    assert "p3" not in env.sched.queue and len(env.sched.queue) == 29


# --------------------------------------------------------------------------- GC sweep and informer re-LIST


async def test_the_gc_sweeps_list_drops_queued_pods_it_lacks() -> None:
    env = SchedulerEnv()
    env.create("g0", nodeSelector={"none": "such"})
    env.create("g1", nodeSelector={"none": "such"})
    bound_body = env.create("b", nodeSelector={"none": "such"})
    env.api.delete_pod("pod-g0")
    bound_body["spec"]["nodeName"] = "node-1"  # bound by another replica; its event was lost too
    env.api.put_pod(bound_body)
    check = env.sched.handlers.queue_check("gc")
    listed = {b["metadata"]["uid"]: PodInfo.from_obj(b) for b in env.api.pods.values()}
    env.create("late")  # created after the sweep's LIST began: not a suspect
    check(listed)
    await env.settle()
    assert sorted(env.api.reads) == ["pod-b", "pod-g0"]
    assert "g0" not in env.sched.queue and "b" not in env.sched.queue
    assert "g1" in env.sched.queue and "late" in env.sched.queue
    assert env.gone_count("gc") == 1, "only the pod that no longer exists counts as gone"


async def test_the_gc_sweeps_list_queues_a_pending_pod_whose_watch_event_never_came() -> None:
    """A pending pod of ours that kopf's watch never delivered (seen after a restart: no
    event at all) is found in the sweep's LIST, read live (the LIST's lean form lacks the
    spec) and queued; one of another scheduler, a bound one, and one already queued are not."""
    env = SchedulerEnv()
    env.create("known", nodeSelector={"none": "such"})
    missed = pod_body("missed", "pod-missed")
    other = pod_body("other", "pod-other")
    other["spec"]["schedulerName"] = "default-scheduler"
    bound = pod_body("bound", "pod-bound", node="node-1")
    for body in (missed, other, bound):
        env.api.put_pod(body)
    check = env.sched.handlers.queue_check("gc")
    listed = {b["metadata"]["uid"]: PodInfo.from_obj(b).lean() for b in env.api.pods.values()}
    check(listed)
    await env.settle()
    assert env.api.reads == ["pod-missed"]
    assert env.sched.queue.knows("missed") and not env.sched.queue.knows("other")
    assert not env.sched.queue.knows("bound") and env.sched.queue.knows("known")
    # Queued with its whole spec (the live read's), not the LIST's lean form.
    queued = {qp.pod.uid: qp.pod for qp in env.sched.queue.queued()}
    assert "missed" not in queued or queued["missed"] == PodInfo.from_obj(missed)


async def test_an_informer_relist_reconciles_the_queue_with_a_fresh_list() -> None:
    """kopf's re-LIST of no pod at all sends no event: our informers' re-LIST triggers the
    check (after a freeze or an API server restart every watch was away)."""
    env = SchedulerEnv()
    env.create("g0", nodeSelector={"none": "such"})
    env.api.delete_pod("pod-g0")
    env.sched.handlers.on_informer_relisted()
    await env.settle()
    assert env.api.lists == 1 and env.api.reads == ["pod-g0"]
    assert len(env.sched.queue) == 0 and env.gone_count("relist") == 1


async def test_a_failed_live_read_keeps_the_pod() -> None:
    env = SchedulerEnv()
    env.create("g0", nodeSelector={"none": "such"})
    env.api.delete_pod("pod-g0")
    env.api.pod_error = ApiException(status=503, reason="Service Unavailable")
    env.sched.handlers.queue_check("gc")({})
    await env.settle()
    assert "g0" in env.sched.queue and env.gone_count("gc") == 0


# --------------------------------------------------------------------------- node events

_NONE: Any = None


class RecordingQueue:
    """Only what on_cluster_event touches."""

    def __init__(self) -> None:
        self.moves: list[str] = []
        self.events: list[tuple[ClusterEvent, Any, Any]] = []

    def move_all_to_active_or_backoff(self, event: ClusterEvent, old: Any = None, new: Any = None) -> None:
        self.moves.append(event.label)
        self.events.append((event, old, new))


def node(name: str = "node-1", **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": {"zone": "a"}},
        "spec": {},
        "status": {
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:00Z"}],
        },
    }
    for path, value in changes.items():
        target = body
        *parents, leaf = path.split("__")
        for p in parents:
            target = target[p]
        target[leaf] = value
    return body


def heartbeat(body: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(body)
    out["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-01-01T00:00:40Z"
    out["metadata"]["resourceVersion"] = "99"
    return out


@pytest.fixture
def queue() -> RecordingQueue:
    return RecordingQueue()


@pytest.fixture
def ctrl(queue: RecordingQueue) -> PoolController:
    return pool_controller(pool_cache(), requeue=queue.move_all_to_active_or_backoff)


@pytest.fixture
def sched(ctrl: PoolController, queue: RecordingQueue) -> Scheduler:
    return Scheduler(
        name="ip-scheduler",
        api=_NONE,
        cache=ctrl.cache.node_cache,
        profile=_NONE,
        queue=queue,  # type: ignore[arg-type]
        recorder=_NONE,
    )


@pytest.fixture
def nodes(sched: Scheduler, ctrl: PoolController) -> ObjectStore[NodeInfo]:
    """The node informer, with both subscribers as cmd/wiring subscribes them."""
    store = node_informer()
    pending, bound = PendingPodEvents("ip-scheduler"), bound_pod_informer()
    sched.handlers.subscribe(pending_pods=pending, bound_pods=bound, nodes=store)
    ctrl.subscribe(pending_pods=pending, bound_pods=bound, nodes=store, pools=pool_informer(ctrl.cache))
    return store


def listed(nodes: ObjectStore[NodeInfo], *bodies: dict[str, Any]) -> None:
    """The informer's first LIST."""
    nodes.replace_all(list(bodies))
    nodes.synced.set()


def moves(s: Scheduler) -> list[str]:
    q = s.queue
    assert isinstance(q, RecordingQueue)
    return q.moves


def test_initial_listing_retries_nothing(sched: Scheduler, nodes: ObjectStore[NodeInfo]) -> None:
    listed(nodes, node())
    assert moves(sched) == []
    assert sched.cache.node("node-1") == NodeInfo.from_obj(node())


def test_added_node_refreshes_every_pool_and_retries(
    sched: Scheduler, ctrl: PoolController, nodes: ObjectStore[NodeInfo]
) -> None:
    listed(nodes)
    nodes.apply("ADDED", node())
    assert moves(sched) == ["NodeAdd"], "one fact moves the queue once"
    assert ctrl.status_queue.pending() is None  # every pool (NodeNotFound may clear)
    assert ctrl.status_queue.dirty
    assert "node-1" in sched.cache.snapshot()


def test_deleted_node_refreshes_every_pool_and_retries(
    sched: Scheduler, ctrl: PoolController, nodes: ObjectStore[NodeInfo]
) -> None:
    listed(nodes, node())
    ctrl.status_queue.take()
    nodes.apply("DELETED", node())
    assert moves(sched) == ["NodeDelete"]
    assert ctrl.status_queue.pending() is None
    assert sched.cache.node("node-1") is None and "node-1" not in sched.cache.snapshot()


def test_a_node_gone_from_a_relist_counts_as_deleted(
    sched: Scheduler, ctrl: PoolController, nodes: ObjectStore[NodeInfo]
) -> None:
    listed(nodes, node(), node("node-2"))
    ctrl.status_queue.take()
    nodes.replace_all([node()])
    assert moves(sched) == ["NodeDelete"]
    assert ctrl.status_queue.pending() is None
    assert list(sched.cache.snapshot()) == ["node-1"]


def test_heartbeat_is_ignored_and_keeps_the_cached_node(
    sched: Scheduler, nodes: ObjectStore[NodeInfo]
) -> None:
    first = node()
    listed(nodes, first)
    before = sched.cache.snapshot()["node-1"]
    nodes.apply("MODIFIED", heartbeat(first))
    nodes.apply("MODIFIED", heartbeat(heartbeat(first)))
    assert moves(sched) == []
    assert sched.cache.snapshot()["node-1"] is before  # memos on it survive


@pytest.mark.parametrize(
    ("changed", "action"),
    [
        (node(metadata__labels={"zone": "b"}), ActionType.UPDATE_NODE_LABEL),
        (node(spec__unschedulable=True), ActionType.UPDATE_NODE_TAINT),
        (
            node(spec__taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]),
            ActionType.UPDATE_NODE_TAINT,
        ),
        (
            node(status__allocatable={"cpu": "4", "memory": "32Gi", "pods": "110"}),
            ActionType.UPDATE_NODE_ALLOCATABLE,
        ),
        (node(status__conditions=[{"type": "Ready", "status": "False"}]), ActionType.UPDATE_NODE_CONDITION),
        (
            node(metadata__labels={"zone": "b"}, spec__unschedulable=True),
            ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_TAINT,
        ),
    ],
    ids=["labels", "unschedulable", "taint", "allocatable", "not-ready", "labels-and-cordon"],
)
def test_a_change_filters_read_sends_a_node_update_naming_it(
    sched: Scheduler, nodes: ObjectStore[NodeInfo], changed: dict[str, Any], action: ActionType
) -> None:
    listed(nodes, node())
    nodes.apply("MODIFIED", changed)
    assert moves(sched) == ["NodeUpdate"]
    q = sched.queue
    assert isinstance(q, RecordingQueue)
    event, old, new = q.events[0]
    assert event.action_type == action
    assert old == NodeInfo.from_obj(node()) and new == NodeInfo.from_obj(changed)
    assert sched.cache.snapshot()["node-1"] == NodeInfo.from_obj(changed)


def test_modified_node_not_seen_before_counts_as_new(sched: Scheduler, nodes: ObjectStore[NodeInfo]) -> None:
    listed(nodes)
    nodes.apply("MODIFIED", node("node-9"))
    assert moves(sched) == ["NodeAdd"]


def test_pool_event_marks_only_that_pool(
    sched: Scheduler, ctrl: PoolController, nodes: ObjectStore[NodeInfo]
) -> None:
    listed(nodes)
    ctrl.status_queue.take()
    ctrl.on_pool_event("pool-a")
    ctrl.on_pool_event("pool-b")
    assert ctrl.status_queue.pending() == {"pool-a", "pool-b"}
    assert moves(sched) == ["NodeIPPoolChange", "NodeIPPoolChange"]
    nodes.apply("ADDED", node())
    assert ctrl.status_queue.pending() is None
    ctrl.on_pool_event("pool-c")  # "every pool" absorbs a single one
    assert ctrl.status_queue.pending() is None
