"""cmd/wiring.build: one object per role, and every subscription of the module doc in place."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from ipscheduler.backend.health import HealthState
from ipscheduler.cmd import wiring
from ipscheduler.cmd.options import RunConfig
from ipscheduler.cmd.profiles import load_config, scores_with_network_traffic
from ipscheduler.framework.interface import ClusterEvent
from ipscheduler.framework.types import PodInfo
from ipscheduler.underlayip.interfaces import NetworkPools
from ipscheduler.underlayip.pool import PoolView
from tests.builders import (
    config_file,
    csi_node_body,
    pod_body,
    pool_body,
    pv_body,
    pvc_body,
    storage_class_body,
)

_NO_API: Any = None  # build() makes no request


def body(uid: str = "u1") -> dict[str, Any]:
    return pod_body(uid=uid, name="p", node="node-1", scheduler="ip-scheduler", phase="Running")


async def test_scheduler_controller_and_informers_share_one_cache() -> None:
    health = HealthState()
    c = wiring.build(RunConfig(), _NO_API, health)
    assert c.controller.wait_for == (c.cache.ready,)
    assert c.scheduler.start_after is c.controller.ready_to_schedule
    assert c.scheduler.health is health and c.controller.repairs.health is health
    assert c.scheduler.cache is c.cache is c.pool_cache.node_cache
    assert c.controller.cache is c.pool_cache
    assert c.controller.writer is c.writer


async def test_subscriptions_reach_the_scheduler_and_the_controller() -> None:
    """Each informer tells both of its subscribers; each fact moves the queue once."""
    c = wiring.build(RunConfig(), _NO_API, HealthState())
    moved: list[str] = []

    def move(event: ClusterEvent, old: object = None, new: object = None) -> int:
        moved.append(event.label)
        return 0

    c.queue.move_all_to_active_or_backoff = move  # type: ignore[method-assign]
    c.controller.requeue = move
    running = body()
    running["metadata"]["annotations"] = {"ipscheduler.io/pool": "pool-a", "ipscheduler.io/ip": "10.0.0.1"}
    c.bound_pods.apply("ADDED", running)
    assert c.cache.pods_on("node-1") == (PodInfo.from_obj(running).lean("ipscheduler.io/"),)
    assert c.pool_cache.carried() == {"u1": ("pool-a", "10.0.0.1")}, "what the pod carries"
    c.bound_pods.apply("DELETED", running)  # a bound pod left its node; it holds no allocation
    assert c.cache.pods_on("node-1") == () and c.pool_cache.carried() == {}
    c.nodes.synced.set()
    c.controller.status_queue.take()
    c.nodes.apply("ADDED", {"metadata": {"name": "node-9"}, "status": {}})
    assert c.cache.node("node-9") is not None, "the scheduler's cache has it"
    assert c.controller.status_queue.pending() is None, "the controller recomputes every pool's status"
    c.pools.apply("ADDED", {"metadata": {"name": "pool-a"}, "spec": {"nodeName": "node-9", "count": 2}})
    pending = body("u2")
    pending["spec"]["nodeName"] = ""
    c.pending_pods.on_event("ADDED", pending)
    assert "u2" in c.queue
    assert moved == ["AssignedPodAdd", "AssignedPodDelete", "NodeAdd", "NodeIPPoolChange"]


async def test_the_bound_mark_delay_reaches_the_gc_sweep() -> None:
    c = wiring.build(RunConfig(bound_mark_delay=7.0), _NO_API, HealthState())
    assert c.controller.repairs.timings.bound_mark_delay == 7.0


def pool_a(rv: str) -> dict[str, Any]:
    return pool_body(node="node-1", addresses=["10.0.0.1-10.0.0.4"], rv=rv, status={})


async def test_the_echo_of_our_own_status_write_moves_nothing() -> None:
    """The pool informer's echo of our own write is recognised (PoolCache.is_own_write):
    no status recompute, no NodeIPPoolChange; a later version written by someone else is
    not an echo, nor is a version we only read."""
    c = wiring.build(RunConfig(), _NO_API, HealthState())
    moved: list[str] = []
    c.controller.requeue = lambda event, old, new: moved.append(event.label)
    c.pools.apply("ADDED", pool_a("1"))
    moved.clear()
    c.pool_cache.store_fresh(PoolView.from_obj(pool_a("2")), own_write=True)
    c.controller.status_queue.take()
    c.pools.apply("MODIFIED", pool_a("2"))
    assert moved == [] and c.controller.status_queue.pending() == set()
    c.pools.apply("MODIFIED", pool_a("3"))  # someone else's edit
    assert moved == ["NodeIPPoolChange"] and c.controller.status_queue.pending() == {"pool-a"}
    c.pool_cache.store_fresh(PoolView.from_obj(pool_a("4")))  # read by us, not written
    c.pools.apply("MODIFIED", pool_a("4"))
    assert moved == ["NodeIPPoolChange", "NodeIPPoolChange"]


async def test_a_namespaces_default_pools_reach_the_pool_cache_and_retry_pending_pods() -> None:
    c = wiring.build(RunConfig(), _NO_API, HealthState())
    moved: list[str] = []
    c.controller.requeue = lambda event, old, new: moved.append(event.label)
    team = {"metadata": {"name": "team", "annotations": {"ipscheduler.io/default-pools": "fast"}}}
    plain = {"metadata": {"name": "plain"}}
    c.namespaces.replace_all([team, plain])
    c.namespaces.synced.set()
    assert (c.pool_cache.default_pools("team"), c.pool_cache.default_pools("plain")) == ("fast", None)
    assert moved == [], "the first LIST moves nothing"
    team["metadata"]["annotations"]["ipscheduler.io/default-pools"] = "fast, slow"
    c.namespaces.apply("MODIFIED", team)
    c.namespaces.apply("MODIFIED", {"metadata": {"name": "plain", "labels": {"x": "y"}}})  # not ours
    assert c.pool_cache.default_pools("team") == "fast, slow"
    assert moved == ["NamespaceDefaultPoolsChange"]


@pytest.mark.parametrize(
    ("cfg", "extender", "publisher", "list_all"),
    [
        (RunConfig(), False, False, False),
        (RunConfig(publish_resource="ipscheduler.io/underlay-ip"), False, True, False),
        (
            RunConfig(extender_listen="127.0.0.1:0", publish_resource="ipscheduler.io/underlay-ip"),
            True,
            True,
            True,
        ),
    ],
    ids=["scheduler", "publish-resource", "extender"],
)
async def test_extender_mode_wires_the_verbs_the_publisher_and_the_wide_sweep(
    cfg: RunConfig, extender: bool, publisher: bool, list_all: bool
) -> None:
    c = wiring.build(cfg, _NO_API, HealthState())
    assert (c.extender is not None, c.publisher is not None, c.controller.repairs.list_all_pods) == (
        extender,
        publisher,
        list_all,
    )
    if c.extender is not None:
        assert c.extender.cache is c.cache  # the same caches as scheduler mode
        assert [p.name for p in c.extender.profile.filter] == ["UnderlayIP"]


async def test_network_traffic_failures_reach_the_metric_only_when_enabled(tmp_path: Path) -> None:
    assert wiring.build(RunConfig(), _NO_API, HealthState()).traffic is None
    text = """
profiles:
  - plugins: {score: {enabled: [{name: NetworkTraffic, weight: 5}]}}
    pluginConfig: [{name: NetworkTraffic, args: {prometheusAddress: "http://127.0.0.1:1"}}]
"""
    c = wiring.build(RunConfig(config=load_config(config_file(tmp_path, text))), _NO_API, HealthState())
    reader = c.traffic
    assert reader is not None and scores_with_network_traffic(c.scheduler.profile)
    reader.on_failure()
    assert c.metrics.network_traffic_failures._value.get() == 1


@pytest.mark.parametrize(
    ("parse", "body"),
    [
        pytest.param(wiring.pvc_parse, {"metadata": {"name": "c"}}, id="pvc-without-namespace"),
        pytest.param(wiring.pv_parse, {"metadata": {}}, id="pv-without-name"),
        pytest.param(wiring.storage_class_parse, {"metadata": {"name": 3}}, id="class-name-not-a-string"),
        pytest.param(wiring.csi_node_parse, {"spec": {"drivers": []}}, id="csinode-without-metadata"),
    ],
)
def test_the_storage_informers_leave_malformed_objects_out(parse: Any, body: dict[str, Any]) -> None:
    assert parse(body) is None


async def test_storage_informers_feed_the_listers_and_the_queue() -> None:
    """The volume plugins read what the informers hold; each change after the first LIST moves
    the queue once, a re-LIST's unchanged object not at all."""
    c = wiring.build(RunConfig(), _NO_API, HealthState())
    moved: list[str] = []

    def move(event: ClusterEvent, old: object = None, new: object = None) -> int:
        moved.append(event.label)
        return 0

    c.queue.move_all_to_active_or_backoff = move  # type: ignore[method-assign]
    c.volumes.pvcs.replace_all([pvc_body("data", "team")])
    c.volumes.pvcs.synced.set()
    assert moved == [], "the first LIST moves nothing"
    assert c.volumes.pvc("team", "data") is not None and c.volumes.pvc("other", "data") is None
    c.volumes.pvcs.apply("MODIFIED", pvc_body("data", "team"))
    c.volumes.pvcs.apply("MODIFIED", pvc_body("data", "team", volume="pv-1"))
    c.volumes.pvs.synced.set()
    c.volumes.pvs.apply("ADDED", pv_body("pv-1"))
    c.volumes.classes.apply("ADDED", storage_class_body("fast"))
    c.volumes.csi_nodes.apply("ADDED", csi_node_body("node-1", d_example=2))
    c.volumes.csi_nodes.apply("DELETED", csi_node_body("node-1"))
    assert c.volumes.pv("pv-1") is not None and c.volumes.storage_class("fast") is not None
    assert c.volumes.csi_node("node-1") is None
    assert [v.name for v in c.volumes.list_pvs()] == ["pv-1"]
    assert moved == [
        "PersistentVolumeClaimUpdate",
        "PersistentVolumeAdd",
        "StorageClassAdd",
        "CSINodeAdd",
        "CSINodeDelete",
    ]
    zone = next(p for p in c.scheduler.profile.filter if p.name == "VolumeZone")
    assert zone.volumes is c.volumes, "the plugins read the informers' listers"


async def test_the_cache_waits_for_the_storage_informers() -> None:
    c = wiring.build(RunConfig(), _NO_API, HealthState())
    for store in (c.nodes, c.bound_pods, c.namespaces, c.pools):
        store.synced.set()
    c.networks.settled.set()
    task = asyncio.create_task(wiring._ready_when_synced(c))
    await asyncio.sleep(0)
    assert not c.cache.ready.is_set()
    for store in c.volumes.by_resource().values():
        store.synced.set()
    await asyncio.wait_for(task, 1)
    assert c.cache.ready.is_set()


async def test_the_cache_waits_for_the_network_attachment_definitions_to_settle() -> None:
    """Listed, or found not served (OptionalResource.settled): a pod naming a NAD is never
    placed before the NAD's pools are known."""
    c = wiring.build(RunConfig(), _NO_API, HealthState())
    for store in (c.nodes, c.bound_pods, c.namespaces, c.pools, *c.volumes.by_resource().values()):
        store.synced.set()
    task = asyncio.create_task(wiring._ready_when_synced(c))
    await asyncio.sleep(0)
    assert not c.cache.ready.is_set()
    c.networks.settled.set()
    await asyncio.wait_for(task, 1)
    assert c.cache.ready.is_set()


def nad(namespace: str, name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "annotations": annotations}}


async def test_a_network_attachment_definitions_pools_reach_the_pool_cache_and_retry_pending_pods(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Only the NADs naming our annotations are kept; the first LIST moves the queue too (the
    API may be served only after scheduling started), a change that is not ours does not;
    each change is logged at info."""
    caplog.set_level("INFO", logger="ipscheduler.underlayip.controller")
    c = wiring.build(RunConfig(), _NO_API, HealthState())
    moved: list[str] = []
    c.controller.requeue = lambda event, old, new: moved.append(event.label)
    rdma = nad("team", "rdma", {"ipscheduler.io/pools": "rdma-a"})
    c.networks.store.replace_all([rdma, nad("team", "plain", {"x": "y"})])
    assert dict(c.pool_cache.networks) == {"team/rdma": NetworkPools("rdma-a")}
    assert moved == ["NetworkAttachmentDefinitionPoolsChange"]
    c.networks.store.apply("MODIFIED", nad("team", "plain", {"x": "z"}))  # not ours
    c.networks.store.apply("MODIFIED", rdma)  # unchanged
    assert len(moved) == 1
    c.networks.store.apply("DELETED", rdma)
    assert dict(c.pool_cache.networks) == {} and len(moved) == 2
    assert [r.getMessage() for r in caplog.records] == [
        "NetworkAttachmentDefinition team/rdma names pools 'rdma-a', families any",
        "NetworkAttachmentDefinition team/rdma names no pools or families now",
    ]
