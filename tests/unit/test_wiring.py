"""cmd/wiring.build: one object per role, and every subscription of the module doc in place."""

from __future__ import annotations

from typing import Any

from ipscheduler.cmd import wiring
from ipscheduler.cmd.options import RunConfig
from ipscheduler.framework.types import PodInfo
from ipscheduler.health import HealthState

_NO_API: Any = None  # build() makes no request


def pod(uid: str = "u1") -> PodInfo:
    return PodInfo.from_obj(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": uid},
            "spec": {"schedulerName": "ip-scheduler", "nodeName": "node-1", "containers": []},
            "status": {"phase": "Running"},
        }
    )


async def test_scheduler_controller_and_informers_share_one_bound_pods_index() -> None:
    """An empty NodePods is falsy (it has a length): the scheduler must still use the very
    index the informer fills, or it waits for a sync that never comes and schedules nothing."""
    health = HealthState()
    c = wiring.build(RunConfig(), _NO_API, health)
    assert c.scheduler.node_pods is c.node_pods
    assert c.controller.wait_for == (c.node_pods.synced,)
    assert c.scheduler.start_after is c.controller.started
    assert c.scheduler.health is health and c.controller.health is health
    assert c.scheduler.cache is c.cache is c.pool_cache.node_cache
    assert c.controller.cache is c.pool_cache
    assert c.controller.writer is c.writer


async def test_subscriptions_reach_the_scheduler_and_the_controller() -> None:
    c = wiring.build(RunConfig(), _NO_API, HealthState())
    moved: list[str] = []
    c.queue.move_all_to_active_or_backoff = moved.append  # type: ignore[method-assign]
    c.node_pods.on_change(pod())  # a bound pod left its node; it holds no allocation
    c.controller.on_pool_event("pool-a")  # capacity may have freed: the queue hears of it
    c.scheduler.on_node_set_change()  # wired to the controller: every pool's status
    assert moved == ["PodDeleted", "NodeIPPoolChange", "NodeIPPoolChange"]
    assert c.controller._dirty_pools is None
