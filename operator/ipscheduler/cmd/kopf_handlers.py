"""Wiring: kopf handlers for our pending pods, informers for nodes and pools, login, start-up.

Thin by design. kopf watches the pending pods of our schedulerName (an index
and an event handler). Nodes and NodeIPPools come from list+watch informers
(:mod:`ipscheduler.kube.informer`, which says why they are not kopf indexes).
Only ``@kopf.index`` and ``@kopf.on.event`` are used on pods, and they return
None, so kopf never writes annotations, finalizers or status onto a pod
(``on.create``/``on.update`` would store ``last-handled-configuration``).
The pod watch is narrowed server-side to ``spec.schedulerName=<ours>``.
All handlers are ``async``: kopf runs sync handlers in a thread pool, and the
queue and caches belong to the event loop.
Posting of kopf's own log messages as Events is disabled: the scheduler
posts its own, kube-scheduler style.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import kopf
from kubernetes_asyncio import client

from ipscheduler.backend.cache import ClusterCache
from ipscheduler.backend.nodepods import NodePods
from ipscheduler.backend.queue import SchedulingQueue
from ipscheduler.backend.supervisor import Supervisor
from ipscheduler.cmd.election import ElectionSettings, identity
from ipscheduler.cmd.registry import build_profile
from ipscheduler.framework.config import SchedulerConfiguration
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.health import HealthState
from ipscheduler.kube.client import KubeApi, load_client_config
from ipscheduler.kube.events import EventRecorder
from ipscheduler.kube.informer import Endpoint, ObjectStore
from ipscheduler.metrics import Metrics
from ipscheduler.scheduler.scheduler import Scheduler
from ipscheduler.underlayip.allocator import PoolView
from ipscheduler.underlayip.models import GROUP, PLURAL, VERSION
from ipscheduler.underlayip.plugin import Strategy
from ipscheduler.underlayip.writer import PoolWriter

log = logging.getLogger(__name__)


@dataclass
class RunConfig:
    """Options of ``ipscheduler run``."""

    kubeconfig: str | None = None
    scheduler_name: str = "ip-scheduler"
    ip_strategy: Strategy = "spread"
    bind_concurrency: int = 16
    gc_interval: float = 30.0
    reserved_ttl: float = 60.0
    multus_network: str | None = None
    health_addr: str = "0.0.0.0:8080"
    leader_elect: bool = False
    election: ElectionSettings = field(default_factory=ElectionSettings)
    config: SchedulerConfiguration | None = None
    watch_timeout: float = 90.0
    """Seconds an informer may be without a working LIST+WATCH before /healthz fails."""
    identity: str = field(default_factory=identity)
    """This replica: the Lease holder identity and the reservedBy prefix of its reservations."""


class RetryForever:
    """kopf's default backoffs (1, 1, 2, 3, 5, 8, 13, 21 s), then every 30 s without end.

    Re-iterable (kopf iterates it afresh for each request) and unsized (kopf then
    retries until a request succeeds instead of raising after the last backoff).
    """

    def __iter__(self) -> Iterator[float]:
        yield from (1, 1, 2, 3, 5, 8, 13, 21)
        yield from itertools.repeat(30.0)


class NoDiffBaseStorage(kopf.DiffBaseStorage):
    """A diff base that is never kept.

    kopf computes the "essence" of every object on every event (a deep copy
    of the body) to diff it against the last handled state, which only
    on.create/on.update/on.delete/on.field handlers use. The scheduler has
    none (only on.event and indexes), so the copy is pure overhead on the
    pod and pool watches.
    """

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


@kopf.on.login()
async def login(memo: Any, **_: Any) -> kopf.ConnectionInfo:
    """Credentials for kopf from the same kubeconfig/in-cluster config as our client."""
    cfg: RunConfig = memo.config
    conf = await load_client_config(cfg.kubeconfig)
    memo.client_config = conf
    header: Any = conf.get_api_key_with_prefix("BearerToken")
    if asyncio.iscoroutine(header):  # async since kubernetes-asyncio 33.3
        header = await header
    scheme, token = None, None
    if header:
        parts = str(header).split(" ", 1)
        scheme, token = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])
    if not conf.host:
        raise kopf.LoginError("no API server address in the client configuration")
    return kopf.ConnectionInfo(
        server=conf.host,
        ca_path=conf.ssl_ca_cert,
        insecure=not conf.verify_ssl,
        scheme=scheme,
        token=token,
        certificate_path=conf.cert_file,
        private_key_path=conf.key_file,
    )


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    """Configure kopf, build the scheduler, start its loop (it waits for the indexes)."""
    cfg: RunConfig = memo.config
    # Only our pending pods: once bound a pod leaves this watch (kopf sees DELETED) and the
    # pods-by-node watch follows it until it is deleted or terminal (then it is released).
    settings.watching.field_selectors["v1", "pods"] = (
        f"spec.schedulerName={cfg.scheduler_name},spec.nodeName="
    )
    settings.scanning.disabled = True  # no CRD/namespace watches: less RBAC, CRD must exist at start
    settings.posting.enabled = False
    settings.persistence.diffbase_storage = NoDiffBaseStorage()
    settings.peering.standalone = True
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    settings.watching.inactivity_timeout = 90
    settings.networking.request_timeout = 30
    settings.networking.connect_timeout = 10
    # kopf retries connection errors, 5xx and timeouts with these backoffs and then lets
    # the error end its watcher; the pending-pod watch must outlive any API server outage.
    settings.networking.error_backoffs = RetryForever()

    conf = getattr(memo, "client_config", None) or await load_client_config(cfg.kubeconfig)
    api = KubeApi(client.ApiClient(conf))
    cache = ClusterCache()
    writer = PoolWriter(api, cache)
    profile = build_profile(
        cache,
        api,
        writer,
        cfg.config,
        cfg.ip_strategy,
        identity=cfg.identity,
        reserved_ttl=cfg.reserved_ttl,
        multus_network=cfg.multus_network,
    )
    queue = SchedulingQueue(profile.queue_sort)
    metrics = Metrics(cfg.scheduler_name)
    health: HealthState = memo.health
    supervisor = Supervisor(health, metrics)
    scheduler = Scheduler(
        name=cfg.scheduler_name,
        api=api,
        cache=cache,
        writer=writer,
        profile=profile,
        queue=queue,
        recorder=EventRecorder(api),
        bind_concurrency=cfg.bind_concurrency,
        gc_interval=cfg.gc_interval,
        reserved_ttl=cfg.reserved_ttl,
        health=health,
        node_pods=NodePods(),
        metrics=metrics,
        supervisor=supervisor,
    )
    scheduler.watch_timeout = cfg.watch_timeout
    writer.on_conflict = scheduler.metrics.cas_conflicts.inc

    def count_write(mutations: int) -> None:
        scheduler.metrics.pool_writes.inc()
        scheduler.metrics.pool_mutations.inc(mutations)

    writer.on_write = count_write
    scheduler.metrics.scrape_from(queue.depths, cache.pools, scheduler.pool_counts)
    memo.health.metrics = scheduler.metrics
    node_pods = scheduler.node_pods
    node_pods.on_change = scheduler.on_bound_pod_gone
    node_pods.on_bound = scheduler.on_bound_pod
    nodes, pools = _node_store(scheduler), _pool_store(scheduler)
    # Every informer and loop runs under the supervisor: restarted on any failure, and
    # /healthz fails when one ends or an informer has no working watch for watch_timeout.
    for name, informer in (("pods-by-node", node_pods), ("nodes", nodes), ("nodeippools", pools)):
        supervisor.start(f"{name}-watch", functools.partial(informer.run, api.client))
        health.checks[f"{name}-watch"] = functools.partial(informer.health, cfg.watch_timeout)
    memo.informer_tasks = [
        asyncio.get_running_loop().create_task(_attach_when_synced(cache, nodes, pools), name="cache-attach")
    ]
    memo.api = api
    memo.scheduler = scheduler
    supervisor.start("scheduling-loop", scheduler.run)
    log.info(
        "ip-scheduler %r starting (strategy %s, identity %s)",
        cfg.scheduler_name,
        cfg.ip_strategy,
        cfg.identity,
    )


@kopf.on.cleanup()
async def cleanup(memo: Any, **_: Any) -> None:
    scheduler: Scheduler | None = getattr(memo, "scheduler", None)
    if scheduler is not None:
        await scheduler.stop()
    tasks = list(getattr(memo, "informer_tasks", []))
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    api: KubeApi | None = getattr(memo, "api", None)
    if api is not None:
        await api.close()


# -- informers: nodes and pools -------------------------------------------------------


def _node_store(scheduler: Scheduler) -> ObjectStore[NodeInfo]:
    """Node name → NodeInfo; any node change may make pending pods schedulable."""

    def parse(body: dict[str, Any]) -> NodeInfo | None:
        try:
            return NodeInfo.from_obj(body)
        except ValueError:
            return None

    def on_event(kind: str | None, name: str, body: dict[str, Any], info: NodeInfo | None) -> None:
        scheduler.on_node_event(kind, body, info)

    def endpoint(api_client: client.ApiClient) -> Endpoint:
        return client.CoreV1Api(api_client).list_node, (), {}

    return ObjectStore("node", endpoint, parse, on_event)


def _pool_store(scheduler: Scheduler) -> ObjectStore[PoolView]:
    """Pool name → PoolView. The echo of our own write reuses the view we built then, and
    does not recompute the pool's status or retry pending pods: that write already set a
    complete status, and frees capacity only on release, which retries pending pods
    itself. A deleting pool is always looked at (it may be ready to finalize)."""
    cache, writer = scheduler.cache, scheduler.writer

    def parse(body: dict[str, Any]) -> PoolView | None:
        meta = body.get("metadata") or {}
        own = cache.fresh(str(meta.get("name", "")), str(meta.get("resourceVersion", "")))
        if own is not None:
            return own
        try:
            return PoolView.from_obj(body)
        except ValueError:
            return None

    def on_event(kind: str | None, name: str, body: dict[str, Any], view: PoolView | None) -> None:
        cache.invalidate(name)
        meta = body.get("metadata") or {}
        echo = kind != "DELETED" and writer.is_own_write(name, str(meta.get("resourceVersion", "")))
        if not echo or meta.get("deletionTimestamp"):
            scheduler.on_pool_event(name)

    def endpoint(api_client: client.ApiClient) -> Endpoint:
        return client.CustomObjectsApi(api_client).list_cluster_custom_object, (GROUP, VERSION, PLURAL), {}

    return ObjectStore("NodeIPPool", endpoint, parse, on_event)


async def _attach_when_synced(
    cache: ClusterCache, nodes: ObjectStore[NodeInfo], pools: ObjectStore[PoolView]
) -> None:
    """The scheduler starts (``cache.ready``) once both informers hold a full LIST."""
    await nodes.synced.wait()
    await pools.synced.wait()
    cache.attach(nodes.index, pools.index)


# -- kopf: our pending pods ---------------------------------------------------------


@kopf.index("v1", "pods")
async def ipscheduler_pods(body: kopf.Body, uid: str, **_: Any) -> dict[str, PodInfo] | None:
    """Pod UID → PodInfo, for our pods only (the watch is field-selected)."""
    try:
        return {uid: PodInfo.from_obj(body)}
    except ValueError:
        return None


# -- events ---------------------------------------------------------------------


@kopf.on.event("v1", "pods")
async def pod_event(*, event: kopf.RawEvent, body: kopf.Body, uid: str, memo: Any, **kwargs: Any) -> None:
    """Queue, dequeue or release; returns None so kopf writes nothing to the pod.

    The PodInfo the index handler just parsed from this very event is reused
    (indexers run before event handlers); a deleted pod is parsed again.
    """
    scheduler: Scheduler | None = getattr(memo, "scheduler", None)
    if scheduler is not None:
        indexed = None
        if event.get("type") != "DELETED":
            indexed = next(iter(kwargs["ipscheduler_pods"].get(uid, ())), None)
        try:
            scheduler.on_pod_event(event.get("type"), body, indexed if isinstance(indexed, PodInfo) else None)
        except Exception:  # never let one pod's event break kopf's pending-pod path
            log.exception("handling the %s event of pod %s failed", event.get("type"), uid)


async def run_operator(cfg: RunConfig, health: HealthState | None = None) -> None:
    """Run kopf with our handlers until stopped (SIGINT/SIGTERM, or cancelled)."""
    await kopf.operator(
        clusterwide=True,
        standalone=True,
        memo=kopf.Memo(config=cfg, health=health or HealthState()),
    )
