"""Wiring: the one place that builds the scheduler's objects and hands them their
informers.

:func:`build` makes the API client's users (PoolWriter, event recorder), the
cache, the framework, the queue, the scheduler, the pool controller and the
informers; each object is built here once and handed, built, to what uses it (the
pool controller gets its :class:`~ipscheduler.underlayip.reconciler.Reconciler`, and
through it the :class:`~ipscheduler.underlayip.releasing.ReleaseClock`, rather than the
settings to make them). Each consumer then subscribes itself to what it needs, and the flow
goes one way, from the informers to their subscribers:

- pending pods (kopf, :mod:`ipscheduler.cmd.kopf_handlers`, fanned out by
  :class:`~ipscheduler.kube.informer.PendingPodEvents`) → the scheduler (queue) and
  the pool controller (a pod that ended unbound: release);
- bound pods → the scheduler (cache, queue; a re-LIST reconciles the queue) and the
  pool controller (holds, adoption, release);
- nodes → the scheduler (cache, queue) and the pool controller (every pool's status
  when a node is added or deleted);
- PersistentVolumeClaims, PersistentVolumes, StorageClasses and CSINodes → the volume
  plugins' listers (:class:`StoreVolumeListers`, read through the profile's handle) and the
  scheduler (queue);
- NodeIPPools → the pool controller (pool cache, status, queue);
- namespaces (only their ``ipscheduler.io/default-pools``) → the pool cache (read by
  UnderlayIP) and the pool controller (pending pods retried when one changes);
- NetworkAttachmentDefinitions (only those naming our pools or families; once their API is
  served: :class:`~ipscheduler.kube.informer.OptionalResource`) → the pool cache (read by
  UnderlayIP and ``explain``) and the pool controller (pending pods retried when one changes).

The pool controller talks to the queue only through what it is given here: the
queue's move of unschedulable pods (``requeue``) and the scheduler's check
of the queue against each GC sweep's LIST (``queue_check``).

:meth:`Components.start` runs every informer and loop under the supervisor.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web
from kubernetes_asyncio import client

from ipscheduler.backend.cache import Cache
from ipscheduler.backend.health import HealthState
from ipscheduler.backend.metrics import Metrics
from ipscheduler.backend.queue import SchedulingQueue
from ipscheduler.backend.supervisor import Supervisor
from ipscheduler.cmd import election, gctuning
from ipscheduler.cmd import extender as extender_server
from ipscheduler.cmd.options import RunConfig
from ipscheduler.cmd.profiles import (
    build_profile,
    extender_profile,
    network_traffic_reader,
    scores_with_network_traffic,
)
from ipscheduler.cmd.serving import server_context
from ipscheduler.coscheduling.controller import PodGroupController
from ipscheduler.coscheduling.groups import GroupIndex
from ipscheduler.framework.config import SchedulerConfiguration
from ipscheduler.framework.interface import EventResource
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.framework.volumes import CSINodeInfo, PVCInfo, PVInfo, StorageClassInfo
from ipscheduler.kube.client import KubeApi, live_pod
from ipscheduler.kube.events import EventRecorder
from ipscheduler.kube.informer import (
    Endpoint,
    ObjectStore,
    OptionalResource,
    PendingPodEvents,
    namespaced_key,
    uid_key,
)
from ipscheduler.kube.prometheus import PrometheusReader
from ipscheduler.scheduler.extender import ExtenderVerbs
from ipscheduler.scheduler.scheduler import Scheduler
from ipscheduler.underlayip import plugin as underlay
from ipscheduler.underlayip.cache import PoolCache
from ipscheduler.underlayip.controller import PoolController
from ipscheduler.underlayip.informers import namespace_informer, network_informer, pool_informer
from ipscheduler.underlayip.interfaces import NetworkPools
from ipscheduler.underlayip.metrics import UnderlayIPMetrics
from ipscheduler.underlayip.models import ANNOTATION_PREFIX
from ipscheduler.underlayip.plugin import UnderlayIPDeps
from ipscheduler.underlayip.pool import PoolView
from ipscheduler.underlayip.publisher import ResourcePublisher
from ipscheduler.underlayip.reconciler import Reconciler, RepairTimings
from ipscheduler.underlayip.releasing import ReleaseClock
from ipscheduler.underlayip.selection import NamespaceDefaults
from ipscheduler.underlayip.writer import PoolWriter

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class Components:
    """Everything :func:`build` made, connected."""

    cfg: RunConfig
    api: KubeApi
    health: HealthState
    metrics: Metrics
    supervisor: Supervisor
    cache: Cache
    pool_cache: PoolCache
    writer: PoolWriter
    queue: SchedulingQueue
    scheduler: Scheduler
    controller: PoolController
    pending_pods: PendingPodEvents
    bound_pods: ObjectStore[PodInfo]
    nodes: ObjectStore[NodeInfo]
    pools: ObjectStore[PoolView]
    namespaces: ObjectStore[NamespaceDefaults]
    networks: OptionalResource[NetworkPools]
    """The NetworkAttachmentDefinition informer, run once its API is served."""
    volumes: StoreVolumeListers
    """The PersistentVolumeClaim, PersistentVolume, StorageClass and CSINode informers."""
    pod_groups: PodGroupController | None = None
    """Indexes the PodGroups and their pods for Coscheduling and writes their status."""
    publisher: ResourcePublisher | None = None
    """Keeps the extended resource on the nodes (extender mode, ``--publish-resource``)."""
    extender: ExtenderVerbs | None = None
    """The extender verbs (``ipscheduler extender``), served once the caches are ready."""
    traffic: PrometheusReader | None = None
    """NetworkTraffic's Prometheus reader, run when the profile scores with it."""
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _extender_runner: web.AppRunner | None = None

    def start(self) -> None:
        """Run the informers, the pool controller and the scheduling loop under the
        supervisor (restarted on any failure; /healthz fails when one ends or an informer
        has no working watch for ``watch_timeout``)."""
        timeout = self.cfg.watch_timeout
        for name, informer in (
            ("pods-by-node", self.bound_pods),
            ("nodes", self.nodes),
            ("nodeippools", self.pools),
            ("namespaces", self.namespaces),
            ("persistentvolumeclaims", self.volumes.pvcs),
            ("persistentvolumes", self.volumes.pvs),
            ("storageclasses", self.volumes.classes),
            ("csinodes", self.volumes.csi_nodes),
        ):
            self.supervisor.start(f"{name}-watch", functools.partial(informer.run, self.api.client))
            self.health.checks[f"{name}-watch"] = functools.partial(informer.health, timeout)
        self.supervisor.start(
            "network-attachment-definitions", functools.partial(self.networks.run, self.api)
        )
        self.health.checks["network-attachment-definitions-watch"] = functools.partial(
            self.networks.health, timeout
        )
        self.tasks.append(
            asyncio.get_running_loop().create_task(_ready_when_synced(self), name="cache-attach")
        )
        self.controller.start(self.supervisor)
        self.supervisor.start("scheduling-loop", self.scheduler.run)
        if self.pod_groups is not None:
            self.supervisor.start("podgroups", functools.partial(self.pod_groups.run, self.api.client))
        if self.traffic is not None and scores_with_network_traffic(self.scheduler.profile):
            self.supervisor.start("network-traffic", self.traffic.run)
        if self.publisher is not None:
            self.supervisor.start(
                "node-resources", functools.partial(self.publisher.run, self.controller.ready_to_schedule)
            )
        if self.extender is not None and self.cfg.extender_listen:
            self.tasks.append(asyncio.get_running_loop().create_task(self._serve_extender(), name="extender"))
        self.tasks.append(asyncio.get_running_loop().create_task(self._tune_gc(), name="gc-tuning"))

    async def _tune_gc(self) -> None:
        """Tune the garbage collector once the caches hold the cluster (:mod:`gctuning`)."""
        await self.controller.ready_to_schedule.wait()
        gctuning.tune()

    async def _serve_extender(self) -> None:
        """Answer kube-scheduler once the caches hold the cluster (before, every node would
        look poolless)."""
        assert self.extender is not None and self.cfg.extender_listen
        await self.controller.ready_to_schedule.wait()
        secure = self.cfg.secure
        ctx = (
            server_context(
                secure.tls_cert_file,
                secure.tls_private_key_file,
                secure.client_ca_file,
                require_client_cert=True,
            )
            if self.cfg.extender_https
            else None
        )
        self._extender_runner = await extender_server.serve(
            self.extender, self.cfg.extender_listen, self.metrics, ctx
        )

    async def stop(self) -> None:
        """Stop every task; write what the PoolWriter still holds; record the events still in
        flight (5 s at most); close the client."""
        await self.supervisor.stop()
        await self.scheduler.stop()
        await self.controller.stop()
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self._extender_runner is not None:
            await self._extender_runner.cleanup()
        await self.scheduler.recorder.flush(grace=5.0)
        await self.api.close()


def build(cfg: RunConfig, api: KubeApi, health: HealthState) -> Components:
    """Build and connect the scheduler's objects for ``cfg`` (nothing runs yet).

    Raises ValueError when the configuration's profile is invalid.
    """
    cache = Cache()
    pool_cache = PoolCache(cache)
    recorder = EventRecorder(api)
    # The runner made the registry before the election (HealthState serves it); tests may not.
    metrics = health.metrics if health.metrics is not None else Metrics(cfg.scheduler_name)
    pool_metrics = UnderlayIPMetrics.on(metrics.registry)
    writer = PoolWriter(
        api,
        pool_cache,
        on_conflict=pool_metrics.cas_conflicts.inc,
        on_write=pool_metrics.count_write,
    )

    identity = cfg.identity or election.identity()  # one for the reservations and the GC
    deps = UnderlayIPDeps(
        pool_cache,
        writer,
        identity=identity,
        reserved_ttl=cfg.reserved_ttl,
        # build() runs once this replica holds the Lease (cmd/runner: the operator starts
        # under it): reservations another replica made before now are the last leader's.
        takeover_before=datetime.datetime.now(datetime.UTC) if cfg.leader_elect else None,
        rehomed=pool_metrics.pods_rehomed.inc,
    )
    groups = GroupIndex()
    volumes = StoreVolumeListers()
    config = cfg.config or SchedulerConfiguration.defaults(cfg.scheduler_name)
    traffic = network_traffic_reader(config, on_failure=metrics.network_traffic_failures.inc)
    profile = build_profile(
        deps,
        config,
        api=api,
        strategy=cfg.ip_strategy,
        multus_network=cfg.multus_network,
        groups=groups,
        events=recorder,
        metrics=metrics,
        traffic=traffic,
        volumes=volumes,
    )
    queue = SchedulingQueue(
        profile.queue_sort, hints=profile.queueing_hints(), on_incoming=metrics.observe_incoming
    )
    profile.set_pod_activator(queue)
    profile.set_pod_nominator(queue)
    ready_to_schedule = asyncio.Event()
    scheduler = Scheduler(
        name=cfg.scheduler_name,
        api=api,
        cache=cache,
        profile=profile,
        queue=queue,
        recorder=recorder,
        bind_concurrency=cfg.bind_concurrency,
        health=health,
        metrics=metrics,
        start_after=ready_to_schedule,
    )
    requeue = queue.move_all_to_active_or_backoff
    clock = ReleaseClock(pool_cache, writer, requeue=requeue, delay=cfg.release_delay)
    repairs = Reconciler(
        scheduler_name=cfg.scheduler_name,
        api=api,
        cache=pool_cache,
        writer=writer,
        recorder=recorder,
        clock=clock,
        timings=RepairTimings(
            gc_interval=cfg.gc_interval,
            reserved_ttl=cfg.reserved_ttl,
            bound_mark_delay=cfg.bound_mark_delay,
            watch_timeout=cfg.watch_timeout,
        ),
        requeue=requeue,
        queue_check=scheduler.handlers.queue_check,
        health=health,
        metrics=pool_metrics,
        list_all_pods=bool(cfg.extender_listen),
        identity=identity,
    )
    controller = PoolController(
        scheduler_name=cfg.scheduler_name,
        api=api,
        cache=pool_cache,
        writer=writer,
        recorder=recorder,
        repairs=repairs,
        metrics=pool_metrics,
        requeue=requeue,
        wait_for=(cache.ready,),
        ready_to_schedule=ready_to_schedule,
    )
    pod_groups = PodGroupController(
        api,
        groups,
        recorder,
        requeue=requeue,
        health=health,
        watch_timeout=cfg.watch_timeout,
    )
    pending_pods = PendingPodEvents(cfg.scheduler_name)
    bound_pods = bound_pod_informer()
    nodes = node_informer()
    pools = pool_informer(pool_cache)
    namespaces = namespace_informer()
    pool_cache.attach_namespaces(namespaces.index)
    networks = network_informer()
    pool_cache.attach_networks(networks.store.index)
    scheduler.handlers.subscribe(
        pending_pods=pending_pods, bound_pods=bound_pods, nodes=nodes, volumes=volumes.by_resource()
    )
    controller.subscribe(
        pending_pods=pending_pods,
        bound_pods=bound_pods,
        nodes=nodes,
        pools=pools,
        namespaces=namespaces,
        networks=networks.store,
    )
    publisher = None
    if cfg.publish_resource:
        publisher = ResourcePublisher(api, pool_cache, cfg.publish_resource)
        publisher.subscribe(nodes, pools)
    extender = None
    if cfg.extender_listen:

        async def read_pod(uid: str, key: str) -> PodInfo | None:
            return await live_pod(api, uid, key)

        extender = ExtenderVerbs(
            extender_profile(deps, api, cfg.ip_strategy, cfg.multus_network, cfg.scheduler_name, recorder),
            cache,
            read_pod,
        )
    metrics.scrape_from(queue.depths, queue.unschedulable_by_plugin)

    def waiting_for_address() -> int:
        return queue.unschedulable_by_plugin().get(underlay.NAME, 0)

    pool_metrics.scrape_from(waiting_for_address, pool_cache.pools, controller.pool_counts)
    return Components(
        cfg=cfg,
        api=api,
        health=health,
        metrics=metrics,
        supervisor=Supervisor(health, metrics),
        cache=cache,
        pool_cache=pool_cache,
        writer=writer,
        queue=queue,
        scheduler=scheduler,
        controller=controller,
        pending_pods=pending_pods,
        bound_pods=bound_pods,
        nodes=nodes,
        pools=pools,
        namespaces=namespaces,
        networks=networks,
        volumes=volumes,
        extender=extender,
        publisher=publisher,
        pod_groups=pod_groups,
        traffic=traffic,
    )


def node_informer() -> ObjectStore[NodeInfo]:
    """Node name → NodeInfo."""

    def parse(body: dict[str, Any]) -> NodeInfo | None:
        try:
            return NodeInfo.from_obj(body)
        except ValueError:
            return None

    def endpoint(api_client: client.ApiClient) -> Endpoint:
        return client.CoreV1Api(api_client).list_node, (), {}

    return ObjectStore("node", endpoint, parse)


BOUND_PODS_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
"""Bound, non-terminal pods (narrowed server-side): a pod that turns terminal leaves the
selection and arrives as DELETED."""


def bound_pod_parse(body: dict[str, Any]) -> PodInfo | None:
    """A pod as the cache keeps it (:meth:`PodInfo.lean`): None unless it parses, is bound
    and is not terminal."""
    try:
        pod = PodInfo.from_obj(body)
    except ValueError:
        return None
    return pod.lean(ANNOTATION_PREFIX) if pod.node_name and not pod.terminal else None


def bound_pod_informer() -> ObjectStore[PodInfo]:
    """Every bound, non-terminal pod of the cluster, whichever scheduler placed it, by UID.

    NodeResourcesFit, NodePorts, InterPodAffinity and PodTopologySpread need the
    pods already on each node. kopf watches pods once, narrowed to our pending
    pods, so this is a second, independent list+watch (:data:`BOUND_PODS_SELECTOR`).
    Memory: one lean PodInfo per pod (no raw bodies are kept), shared with the cache.
    """

    def endpoint(api_client: client.ApiClient) -> Endpoint:
        core = client.CoreV1Api(api_client)
        return core.list_pod_for_all_namespaces, (), {"field_selector": BOUND_PODS_SELECTOR}

    return ObjectStore("pods-by-node", endpoint, bound_pod_parse, key=uid_key)


def _parsed(parse: Callable[[dict[str, Any]], T]) -> Callable[[dict[str, Any]], T | None]:
    """``parse`` as an :class:`ObjectStore` parse function: None (left out) for an object
    ``parse`` refuses with ValueError."""

    def parse_or_none(body: dict[str, Any]) -> T | None:
        try:
            return parse(body)
        except ValueError:
            return None

    return parse_or_none


pvc_parse = _parsed(PVCInfo.from_obj)
pv_parse = _parsed(PVInfo.from_obj)
storage_class_parse = _parsed(StorageClassInfo.from_obj)
csi_node_parse = _parsed(CSINodeInfo.from_obj)


class StoreVolumeListers:
    """The volume plugins' listers (:class:`~ipscheduler.framework.volumes.VolumeListers`)
    over four informers: claims by ``namespace/name``, volumes, StorageClasses and CSINodes
    by name. Memory: one small view per object (no raw bodies)."""

    def __init__(self) -> None:
        def core(method: str) -> Callable[[client.ApiClient], Endpoint]:
            return lambda api_client: (getattr(client.CoreV1Api(api_client), method), (), {})

        def storage(method: str) -> Callable[[client.ApiClient], Endpoint]:
            return lambda api_client: (getattr(client.StorageV1Api(api_client), method), (), {})

        self.pvcs: ObjectStore[PVCInfo] = ObjectStore(
            "PersistentVolumeClaim",
            core("list_persistent_volume_claim_for_all_namespaces"),
            pvc_parse,
            key=namespaced_key,
        )
        self.pvs: ObjectStore[PVInfo] = ObjectStore(
            "PersistentVolume", core("list_persistent_volume"), pv_parse
        )
        self.classes: ObjectStore[StorageClassInfo] = ObjectStore(
            "StorageClass", storage("list_storage_class"), storage_class_parse
        )
        self.csi_nodes: ObjectStore[CSINodeInfo] = ObjectStore(
            "CSINode", storage("list_csi_node"), csi_node_parse
        )

    def by_resource(self) -> dict[EventResource, ObjectStore[Any]]:
        """Each informer by the cluster-event resource its changes are."""
        return {
            EventResource.PERSISTENT_VOLUME_CLAIM: self.pvcs,
            EventResource.PERSISTENT_VOLUME: self.pvs,
            EventResource.STORAGE_CLASS: self.classes,
            EventResource.CSI_NODE: self.csi_nodes,
        }

    def pvc(self, namespace: str, name: str) -> PVCInfo | None:
        return self.pvcs.get(f"{namespace}/{name}")

    def pv(self, name: str) -> PVInfo | None:
        return self.pvs.get(name)

    def list_pvs(self) -> list[PVInfo]:
        return [entry[0] for entry in self.pvs.index.values()]

    def storage_class(self, name: str) -> StorageClassInfo | None:
        return self.classes.get(name)

    def csi_node(self, name: str) -> CSINodeInfo | None:
        return self.csi_nodes.get(name)


async def _ready_when_synced(c: Components) -> None:
    """The cache is ready once the node, bound-pod, namespace and storage informers hold a
    full LIST, and the NetworkAttachmentDefinition one too unless its API is not served
    (``settled``); the pool cache (and so the pool controller) once the NodeIPPool informer
    does too."""
    await c.nodes.synced.wait()
    await c.bound_pods.synced.wait()
    await c.namespaces.synced.wait()
    await c.networks.settled.wait()
    for store in c.volumes.by_resource().values():
        await store.synced.wait()
    c.cache.ready.set()
    await c.pools.synced.wait()
    c.pool_cache.attach(c.pools.index)
    log.info(
        "informers synced: %d nodes, %d NodeIPPools, %d bound pods",
        len(c.nodes.index),
        len(c.pools.index),
        len(c.bound_pods.index),
    )
