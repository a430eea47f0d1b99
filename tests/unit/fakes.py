"""In-memory stand-ins for the unit tests (the API behaviour itself is tested e2e): the API
server's side of pool, pod and preemption requests, recorders of Events and of preemption's
metrics, a pool cache, a plugin factory's handle, the pool controller as the wiring builds
it, and the scheduler over them."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.backend.cache import Cache
from ipscheduler.backend.health import HealthState
from ipscheduler.backend.metrics import Metrics
from ipscheduler.backend.queue import SchedulingQueue
from ipscheduler.cmd.profiles import build_profile, extender_profile
from ipscheduler.framework.interface import Requeue
from ipscheduler.framework.runtime import Framework
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.framework.volumes import MapVolumeListers, VolumeListers
from ipscheduler.kube.client import Conflict, live_pod
from ipscheduler.plugins.queuesort import PrioritySort
from ipscheduler.scheduler.extender import ExtenderVerbs
from ipscheduler.scheduler.scheduler import Scheduler
from ipscheduler.underlayip.cache import IndexLike, PoolCache
from ipscheduler.underlayip.controller import PoolController
from ipscheduler.underlayip.plugin import UnderlayIPDeps
from ipscheduler.underlayip.pool import PoolView
from ipscheduler.underlayip.reconciler import Reconciler, RepairTimings
from ipscheduler.underlayip.releasing import ReleaseClock
from ipscheduler.underlayip.writer import PoolWriter
from tests.builders import SCHEDULER, alloc, container, pending_pod_body, pod_body, pool_body


class FakePoolApi:
    """The API server's side of NodeIPPool status writes, in memory: resourceVersion CAS."""

    def __init__(self, bodies: list[dict[str, Any]]) -> None:
        self.bodies = {b["metadata"]["name"]: copy.deepcopy(b) for b in bodies}
        self.puts: list[str] = []
        self.finalizer_patches: list[str] = []
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.pod_error: Exception | None = None

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A pod by namespace/name (None: not found); raises ``pod_error`` when set."""
        if self.pod_error is not None:
            raise self.pod_error
        body = self.pods.get((namespace, name))
        return copy.deepcopy(body) if body is not None else None

    async def get_cluster_object(self, res: Any, name: str) -> dict[str, Any] | None:
        body = self.bodies.get(name)
        return copy.deepcopy(body) if body is not None else None

    async def replace_cluster_status(
        self, res: Any, name: str, rv: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        body = self.bodies.get(name)
        if body is None:
            raise ApiException(status=404, reason="Not Found")
        if body["metadata"]["resourceVersion"] != rv:
            raise Conflict(name)
        body["status"] = copy.deepcopy(status)
        body["metadata"]["resourceVersion"] = str(int(rv) + 1)
        self.puts.append(name)
        return copy.deepcopy(body)

    async def set_cluster_finalizers(
        self, res: Any, name: str, rv: str, finalizers: list[str]
    ) -> dict[str, Any] | None:
        body = self.bodies.get(name)
        if body is None:
            return None
        if body["metadata"]["resourceVersion"] != rv:
            raise Conflict(name)
        body["metadata"]["finalizers"] = list(finalizers)
        body["metadata"]["resourceVersion"] = str(int(rv) + 1)
        self.finalizer_patches.append(name)
        return copy.deepcopy(body)

    def racing_write(self, name: str, allocations: dict[str, Any]) -> None:
        """Another writer (replica) adds allocations: the cache does not know yet."""
        body = self.bodies[name]
        body["status"]["allocations"] = {**body["status"].get("allocations", {}), **allocations}
        body["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)


def pool_cache(nodes: IndexLike | None = None, pools: IndexLike | None = None) -> PoolCache:
    """A PoolCache over a node Cache, holding these nodes (name → [NodeInfo]) and attached
    to this pool index (name → [PoolView]), both ready, as cmd/wiring leaves them once the
    informers have synced."""
    node_cache = Cache()
    for values in (nodes or {}).values():
        for node in values:
            assert isinstance(node, NodeInfo)
            node_cache.add_node(node)
    node_cache.ready.set()
    cache = PoolCache(node_cache)
    cache.attach(pools if pools is not None else {})
    return cache


def handle(client: Any = None, volumes: VolumeListers | None = None, recorder: Any = None) -> Framework:
    """The handle a plugin factory gets, as :func:`~ipscheduler.framework.building.new_framework`
    makes it: a profile's framework, here with no plugins but a QueueSort, over ``client``,
    ``volumes`` (None: empty listers) and the event ``recorder``."""
    return Framework(
        scheduler_name=SCHEDULER,
        queue_sort=PrioritySort(),
        client=client,
        recorder=recorder,
        volumes=volumes if volumes is not None else MapVolumeListers(),
    )


def pool_controller(
    cache: PoolCache,
    api: Any = None,
    writer: Any = None,
    recorder: Any = None,
    *,
    scheduler_name: str = SCHEDULER,
    timings: RepairTimings | None = None,
    health: HealthState | None = None,
    requeue: Requeue = lambda event, old, new: None,
) -> PoolController:
    """The pool controller over ``cache`` as cmd/wiring builds it: a release clock, the
    Reconciler over it (with ``timings``, None: the defaults, and ``health``) and the controller holding that
    Reconciler; ``api``, ``writer`` and ``recorder`` are what the test stands in for them
    (None: a test that never reaches them)."""
    clock = ReleaseClock(cache, writer, requeue=requeue)
    repairs = Reconciler(
        scheduler_name=scheduler_name,
        api=api,
        cache=cache,
        writer=writer,
        recorder=recorder,
        clock=clock,
        timings=timings if timings is not None else RepairTimings(),
        requeue=requeue,
        health=health,
    )
    return PoolController(
        scheduler_name=scheduler_name,
        api=api,
        cache=cache,
        writer=writer,
        recorder=recorder,
        repairs=repairs,
        metrics=repairs.metrics,
        requeue=requeue,
    )


class PodApi(FakePoolApi):
    """Pools, and pods by namespace/name as the API server has them now: GET, LIST and
    Binding (404 for a pod that is not there, 409 for another UID, as kube-apiserver)."""

    def __init__(self, bodies: list[dict[str, Any]]) -> None:
        super().__init__(bodies)
        self.reads: list[str] = []
        self.lists = 0
        self.bindings: list[str] = []
        self.bind_error: Exception | None = None
        self.nominations: list[tuple[str, str]] = []
        self.preempted: list[str] = []

    def put_pod(self, body: dict[str, Any]) -> None:
        self.pods[(body["metadata"]["namespace"], body["metadata"]["name"])] = copy.deepcopy(body)

    def delete_pod(self, name: str) -> None:
        del self.pods[("ns", name)]

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads.append(name)
        return await super().get_pod(namespace, name)

    async def pod_pages(self, field_selector: str) -> AsyncIterator[list[dict[str, Any]]]:
        self.lists += 1
        yield [copy.deepcopy(b) for b in self.pods.values() if not b["spec"].get("nodeName")]

    async def bind(self, pod: PodInfo, node: str, annotations: dict[str, str]) -> None:
        self.bindings.append(pod.name)
        if self.bind_error is not None:
            raise self.bind_error
        live = self.pods.get((pod.namespace, pod.name))
        if live is None:
            raise Conflict(f"{pod.key}: Not Found")
        if live["metadata"]["uid"] != pod.uid:
            raise Conflict(f"{pod.key}: Conflict")
        live["spec"]["nodeName"] = node
        live["metadata"].setdefault("annotations", {}).update(annotations)

    async def set_unschedulable(
        self, pod: PodInfo, message: str, nominated_node_name: str | None = None
    ) -> None:
        if nominated_node_name is not None:
            self.nominations.append((pod.name, nominated_node_name))

    async def set_nominated_node_name(self, pod: PodInfo, node: str) -> None:
        self.nominations.append((pod.name, node))

    async def list_pod_disruption_budgets(self) -> list[dict[str, Any]]:
        return []

    async def preempt_pod(self, victim: PodInfo, message: str) -> bool:
        """Delete the victim (UID-checked, as the precondition does)."""
        live = self.pods.get((victim.namespace, victim.name))
        if live is None or live["metadata"]["uid"] != victim.uid:
            return False
        self.preempted.append(victim.name)
        del self.pods[(victim.namespace, victim.name)]
        return True


@dataclass
class PreemptionApi:
    """The API server's side of preemption's calls (the handle's ``framework/interface.Client``),
    in memory: the PodDisruptionBudgets it lists (``lists``: how many LISTs), the victims it
    deleted with the message, the pods whose nomination it cleared; ``errors``: method name
    → the exception every call of it raises."""

    budgets: list[dict[str, Any]] = field(default_factory=list)
    errors: dict[str, Exception] = field(default_factory=dict)
    lists: int = 0
    preempted: list[tuple[str, str]] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)

    def _maybe_fail(self, method: str) -> None:
        if method in self.errors:
            raise self.errors[method]

    async def list_pod_disruption_budgets(self) -> list[dict[str, Any]]:
        self.lists += 1
        self._maybe_fail("list_pod_disruption_budgets")
        return self.budgets

    async def preempt_pod(self, victim: PodInfo, message: str) -> bool:
        self._maybe_fail("preempt_pod")
        self.preempted.append((victim.name, message))
        return True

    async def set_nominated_node_name(self, pod: PodInfo, node: str) -> None:
        self._maybe_fail("set_nominated_node_name")
        self.cleared.append(pod.name)


@dataclass
class EventLog:
    """An EventRecorder that keeps ``(object name, type, reason, message)`` of each Event."""

    events: list[tuple[str, str, str, str]] = field(default_factory=list)

    def emit(
        self, obj: dict[str, str], event_type: str, reason: str, message: str, namespace: str | None = None
    ) -> None:
        self.events.append((obj["name"], event_type, reason, message))


@dataclass
class PreemptionCounts:
    """The framework's MetricsRecorder keeping only preemption's: its attempts and the
    victims of each preemption (timings are dropped)."""

    attempts: int = 0
    victims: list[int] = field(default_factory=list)

    def observe_extension_point(self, point: str, status: str, seconds: float) -> None:
        pass

    def observe_plugin(self, plugin: str, point: str, status: str, seconds: float) -> None:
        pass

    def observe_preemption_attempt(self) -> None:
        self.attempts += 1

    def observe_preemption_victims(self, victims: int) -> None:
        self.victims.append(victims)


class NullRecorder:
    """An EventRecorder that records nothing."""

    def emit(self, *args: Any) -> None:
        pass

    def forget(self, uid: str) -> None:
        pass


class SchedulerEnv:
    """The scheduler with the default profile over a real pool cache and writer, one node
    (``node-1``) and its pool ``p``; only the API server is in memory (:class:`PodApi`)."""

    def __init__(self) -> None:
        pool = pool_body("p", "node-1", addresses=["10.0.0.1-10.0.0.4"], rv="10", allocations={})
        self.cache = pool_cache(
            {"node-1": [NodeInfo(name="node-1", ready=True, allocatable={"pods": Decimal(110)})]},
            {"p": [PoolView.from_obj(pool)]},
        )
        self.api = PodApi([pool])
        self.writer = PoolWriter(self.api, self.cache)  # type: ignore[arg-type]
        profile = build_profile(UnderlayIPDeps(self.cache, self.writer), api=self.api)  # type: ignore[arg-type]
        self.metrics = Metrics()
        self.sched = Scheduler(
            name=SCHEDULER,
            api=self.api,  # type: ignore[arg-type]
            cache=self.cache.node_cache,
            profile=profile,
            queue=SchedulingQueue(profile.queue_sort),
            recorder=NullRecorder(),  # type: ignore[arg-type]
            metrics=self.metrics,
        )

    def create(self, uid: str, name: str | None = None, **spec: Any) -> dict[str, Any]:
        """A pending pod created: in the API server, and its ADDED event through kopf."""
        body = pending_pod_body(uid, name, **spec)
        self.api.put_pod(body)
        self.sched.handlers.on_pod_event("ADDED", PodInfo.from_obj(body))
        return body

    def gone_count(self, found_by: str) -> float:
        return self.metrics.pods_gone.labels(found_by)._value.get()

    def allocations(self) -> dict[str, Any]:
        return dict(self.api.bodies["p"]["status"].get("allocations") or {})

    async def settle(self) -> None:
        for _ in range(10):
            tasks = [*self.sched._tasks, *self.sched.handlers._tasks]  # binding cycles, live checks
            await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.sleep(0)

    async def schedule_next(self) -> None:
        qp = self.sched.queue.pop_nowait()
        assert qp is not None
        await self.sched.schedule_one(qp)
        await self.settle()


EXTENDER_NODES = ("node-1", "node-2", "node-3")


class ExtenderEnv:
    """The extender verbs over the UnderlayIP profile, a real pool cache and writer: node-1
    has pool p1 with two free addresses, node-2 no pool, node-3 pool p3, full."""

    def __init__(self) -> None:
        self.p1 = pool_body("p1", "node-1", addresses=["10.0.1.1-10.0.1.2"], rv="5", allocations={})
        self.p3 = pool_body(
            "p3",
            "node-3",
            addresses=["10.0.3.1"],
            rv="7",
            allocations={"holder": alloc("10.0.3.1", phase="Bound")},
        )
        nodes = {
            n: [NodeInfo(name=n, ready=True, allocatable={"pods": Decimal(110)})] for n in EXTENDER_NODES
        }
        self.cache = pool_cache(
            nodes, {"p1": [PoolView.from_obj(self.p1)], "p3": [PoolView.from_obj(self.p3)]}
        )
        self.api = PodApi([self.p1, self.p3])
        writer = PoolWriter(self.api, self.cache)  # type: ignore[arg-type]
        deps = UnderlayIPDeps(self.cache, writer)
        profile = extender_profile(deps, self.api)  # type: ignore[arg-type]

        async def read(uid: str, key: str) -> PodInfo | None:
            return await live_pod(self.api, uid, key)  # type: ignore[arg-type]

        self.verbs = ExtenderVerbs(profile, self.cache.node_cache, read)

    def pod(self, name: str = "web", uid: str = "u-web") -> dict[str, Any]:
        body = pod_body(
            container(name="c"), uid=uid, name=name, scheduler="default-scheduler", phase="Pending"
        )
        self.api.put_pod(body)
        return body

    def allocations(self, pool: str = "p1") -> dict[str, Any]:
        return dict(self.api.bodies[pool]["status"].get("allocations") or {})
