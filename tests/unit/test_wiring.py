"""cmd/wiring.build: one object per role, and every subscription of the module doc in place."""

from __future__ import annotations

from typing import Any

from ipscheduler.cmd import wiring
from ipscheduler.cmd.options import RunConfig
from ipscheduler.framework.interface import ClusterEvent
from ipscheduler.framework.types import PodInfo
from ipscheduler.health import HealthState

_NO_API: Any = None  # build() makes no request


def body(uid: str = "u1") -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": uid},
        "spec": {"schedulerName": "ip-scheduler", "nodeName": "node-1", "containers": []},
        "status": {"phase": "Running"},
    }


def pod(uid: str = "u1") -> PodInfo:
    return PodInfo.from_obj(body(uid))


async def test_scheduler_controller_and_informers_share_one_cache() -> None:
    health = HealthState()
    c = wiring.build(RunConfig(), _NO_API, health)
    assert c.controller.wait_for == (c.cache.ready,)
    assert c.scheduler.start_after is c.controller.ready_to_schedule
    assert c.scheduler.health is health and c.controller.health is health
    assert c.scheduler.cache is c.cache is c.pool_cache.node_cache
    assert c.controller.cache is c.pool_cache
    assert c.controller.writer is c.writer


async def test_subscriptions_reach_the_scheduler_and_the_controller() -> None:
    c = wiring.build(RunConfig(), _NO_API, HealthState())
    moved: list[str] = []

    def move(event: ClusterEvent, old: object = None, new: object = None) -> int:
        moved.append(event.label)
        return 0

    c.queue.move_all_to_active_or_backoff = move  # type: ignore[method-assign]
    c.bound_pods.apply("ADDED", body())
    assert c.cache.pods_on("node-1") == (pod(),)
    c.bound_pods.apply("DELETED", body())  # a bound pod left its node; it holds no allocation
    assert c.cache.pods_on("node-1") == ()
    c.controller.on_pool_event("pool-a")  # capacity may have freed: the queue hears of it
    c.scheduler.on_node_set_change()  # wired to the controller: every pool's status
    assert moved == ["AssignedPodAdd", "AssignedPodDelete", "NodeIPPoolChange", "NodeIPPoolChange"]
    assert c.controller._dirty_pools is None


async def test_the_bound_mark_delay_reaches_the_pool_writer() -> None:
    c = wiring.build(RunConfig(bound_mark_delay=7.0), _NO_API, HealthState())
    assert c.writer.defer_delay == 7.0
