"""Scheduler.on_node_event and PoolController.on_node_event, both subscribed to the node
informer of cmd/wiring as there: which node watch events retry pending pods (once per
fact) or refresh pools, and what the cache keeps.

kube-scheduler sends no NodeUpdate event for an update that changes nothing a
plugin reads; kwok and kubelets post heartbeats every few seconds, so each
one must not move unschedulable pods back to the active queue. An update names
the parts that changed (action flags), so only plugins that registered them
are asked.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ipscheduler.cmd.wiring import bound_pod_informer, node_informer, pool_informer
from ipscheduler.framework.interface import ActionType, ClusterEvent
from ipscheduler.framework.types import NodeInfo
from ipscheduler.kube.informer import ObjectStore, PendingPodEvents
from ipscheduler.scheduler.scheduler import Scheduler
from ipscheduler.underlayip.controller import PoolController
from tests.unit.fakes import pool_cache

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
    return PoolController(
        scheduler_name="ip-scheduler",
        api=_NONE,
        cache=pool_cache(),
        writer=_NONE,
        recorder=_NONE,
        on_capacity_freed=queue.move_all_to_active_or_backoff,
    )


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
    sched.subscribe(pending_pods=pending, bound_pods=bound, nodes=store)
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
    assert ctrl._dirty_pools is None  # every pool (NodeNotFound may clear)
    assert ctrl._pools_dirty.is_set()
    assert "node-1" in sched.cache.snapshot()


def test_deleted_node_refreshes_every_pool_and_retries(
    sched: Scheduler, ctrl: PoolController, nodes: ObjectStore[NodeInfo]
) -> None:
    listed(nodes, node())
    ctrl._dirty_pools = set()
    nodes.apply("DELETED", node())
    assert moves(sched) == ["NodeDelete"]
    assert ctrl._dirty_pools is None
    assert sched.cache.node("node-1") is None and "node-1" not in sched.cache.snapshot()


def test_a_node_gone_from_a_relist_counts_as_deleted(
    sched: Scheduler, ctrl: PoolController, nodes: ObjectStore[NodeInfo]
) -> None:
    listed(nodes, node(), node("node-2"))
    ctrl._dirty_pools = set()
    nodes.replace_all([node()])
    assert moves(sched) == ["NodeDelete"]
    assert ctrl._dirty_pools is None
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
    ctrl._dirty_pools = set()
    ctrl.on_pool_event("pool-a")
    ctrl.on_pool_event("pool-b")
    assert ctrl._dirty_pools == {"pool-a", "pool-b"}
    assert moves(sched) == ["NodeIPPoolChange", "NodeIPPoolChange"]
    nodes.apply("ADDED", node())
    assert ctrl._dirty_pools is None
    ctrl.on_pool_event("pool-c")  # "every pool" absorbs a single one
    assert ctrl._dirty_pools is None
