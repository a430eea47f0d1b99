"""underlayip/releasing: the clock of Releasing allocations over a pool cache and writer (no
server): node states from node events, a timer per allocation, the settle write."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest

from ipscheduler.framework.types import NodeInfo
from ipscheduler.underlayip.pool import PoolView, utc_now
from ipscheduler.underlayip.releasing import ReleaseClock
from ipscheduler.underlayip.teardown import SIMULATED_NODE_ANNOTATION, NodeState
from ipscheduler.underlayip.writer import PoolWriter
from tests.builders import alloc, pool_body
from tests.unit.fakes import FakePoolApi, pool_cache

DELAY = 0.3


def node_body(ready: bool, since: datetime.datetime, **annotations: str) -> dict[str, Any]:
    condition = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "lastTransitionTime": since.isoformat(),
    }
    return {"metadata": {"name": "node-1", "annotations": annotations}, "status": {"conditions": [condition]}}


def setup(since: datetime.datetime) -> tuple[ReleaseClock, FakePoolApi, list[str]]:
    """Pool ``p`` of node-1 with u1's address Releasing since ``since``; the clock over it."""
    a = {**alloc("10.0.0.1", phase="Releasing"), "releasingSince": since.strftime("%Y-%m-%dT%H:%M:%SZ")}
    body = pool_body("p", "node-1", addresses=["10.0.0.1-10.0.0.2"], rv="10", allocations={"u1": a})
    body["status"]["releasing"] = 1
    cache = pool_cache({"node-1": [NodeInfo(name="node-1", ready=True)]}, {"p": [PoolView.from_obj(body)]})
    api = FakePoolApi([body])
    told: list[str] = []
    clock = ReleaseClock(
        cache,
        PoolWriter(api, cache),  # type: ignore[arg-type]
        requeue=lambda event, old, new: told.append(str(event)),
        delay=DELAY,
    )
    return clock, api, told


def allocations(api: FakePoolApi) -> dict[str, Any]:
    return dict(api.bodies["p"]["status"]["allocations"])


async def until(what: str, check: Any, within: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not check():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.02)


async def test_a_releasing_address_goes_once_its_ready_node_had_the_delay() -> None:
    clock, api, told = setup(utc_now())
    old_ready = utc_now() - datetime.timedelta(hours=1)
    clock.on_node_event("node-1", node_body(True, old_ready), None, NodeInfo(name="node-1", ready=True))
    assert clock.nodes["node-1"] == NodeState(True, old_ready)
    clock.arm(clock.cache.pool("p"))  # type: ignore[arg-type]
    assert "u1" in allocations(api), "not before the delay"
    # The write lands in the API before the settle task, resumed later, tells the queue.
    await until("settled and said", lambda: "u1" not in allocations(api) and told)
    assert api.bodies["p"]["status"]["releasing"] == 0
    assert "AddressReleased" in told[-1]


async def test_a_node_not_ready_keeps_it_until_it_is_ready_again() -> None:
    clock, api, _ = setup(utc_now() - datetime.timedelta(hours=1))
    down = NodeInfo(name="node-1", ready=False)
    clock.on_node_event("node-1", node_body(False, utc_now()), None, down)
    clock.arm(clock.cache.pool("p"))  # type: ignore[arg-type]
    await asyncio.sleep(2 * DELAY)
    assert "u1" in allocations(api), "held while the node is not Ready, however old"
    back = utc_now()
    clock.on_node_event("node-1", node_body(True, back), down, NodeInfo(name="node-1", ready=True))
    await asyncio.sleep(DELAY / 3)
    assert "u1" in allocations(api), "the delay runs from the node's turning Ready"
    await until("settled after the node turned Ready", lambda: "u1" not in allocations(api))


@pytest.mark.parametrize("how", ["deleted", "kwok"])
async def test_a_deleted_or_simulated_node_lets_it_go_at_once(how: str) -> None:
    clock, api, _ = setup(utc_now())
    down = NodeInfo(name="node-1", ready=False)
    clock.on_node_event("node-1", node_body(False, utc_now()), None, down)
    if how == "deleted":
        clock.on_node_event("node-1", {}, down, None)
        assert "node-1" not in clock.nodes and clock.confirmed("node-1", kubelet=False)
    else:
        body = node_body(True, utc_now(), **{SIMULATED_NODE_ANNOTATION: "fake"})
        clock.on_node_event("node-1", body, down, NodeInfo(name="node-1", ready=True))
        assert clock.confirmed("node-1", kubelet=False)
    await until("settled at once", lambda: "u1" not in allocations(api), within=DELAY)


async def test_a_heartbeat_is_not_read_again() -> None:
    """Only a node that appears or changes readiness is parsed: kwok's heartbeats at scale
    (hundreds per second) cost a comparison."""
    clock, _, _ = setup(utc_now())
    node = NodeInfo(name="node-1", ready=True)
    clock.on_node_event("node-1", node_body(True, utc_now()), None, node)
    before = clock.nodes["node-1"]
    clock.on_node_event("node-1", {"garbage": True}, node, NodeInfo(name="node-1", ready=True))
    assert clock.nodes["node-1"] is before
    assert not clock.confirmed("node-1", kubelet=False) and clock.confirmed("node-1", kubelet=True)


async def test_before_the_caches_are_ready_a_node_not_listed_yet_is_not_taken_for_a_deleted_one() -> None:
    """At start the NodeIPPool informer may deliver a pool before the node informer has listed
    its node: nothing is armed and only the kubelet's report confirms a teardown until the
    pool cache is attached (after the node informer synced)."""
    clock, api, _ = setup(utc_now() - datetime.timedelta(hours=1))
    clock.cache.ready.clear()
    assert not clock.confirmed("node-1", kubelet=False) and clock.confirmed("node-1", kubelet=True)
    clock.arm(clock.cache.pool("p"))  # type: ignore[arg-type]
    await asyncio.sleep(DELAY)
    assert "u1" in allocations(api), "node-1 is not in clock.nodes yet: not a deleted node"
    clock.cache.ready.set()
    assert clock.confirmed("node-1", kubelet=False), "ready: a node the informer does not list is gone"
    clock.arm(clock.cache.pool("p"))  # type: ignore[arg-type]
    await until("settled once ready", lambda: "u1" not in allocations(api))


async def test_stop_cancels_the_timers_so_nothing_is_settled_after_it() -> None:
    """The controller's stop stops the clock: an armed timer no longer fires, and the address
    stays Releasing for the GC sweep (of this or another replica) to settle."""
    clock, api, told = setup(utc_now())
    old_ready = utc_now() - datetime.timedelta(hours=1)
    clock.on_node_event("node-1", node_body(True, old_ready), None, NodeInfo(name="node-1", ready=True))
    clock.arm(clock.cache.pool("p"))  # type: ignore[arg-type]
    await clock.stop()
    await asyncio.sleep(2 * DELAY)
    assert "u1" in allocations(api) and not told and not len(clock.tasks)
