"""Pending pods that vanish without a DELETED event leave the queue (issue 22).

kopf's pending-pod watch re-LISTs after a 410 Gone without reporting the pods that
vanished meanwhile. The scheduler runs here with the default profile over a real pool
cache and writer; only the API server is in memory (:class:`Api`).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Iterator
from decimal import Decimal
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.backend.queue import SchedulingQueue
from ipscheduler.cmd.profiles import build_profile
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.kube.client import Conflict
from ipscheduler.metrics import Metrics
from ipscheduler.scheduler import eventhandlers
from ipscheduler.scheduler.scheduler import Scheduler
from ipscheduler.underlayip.pool import PoolView
from ipscheduler.underlayip.writer import PoolWriter
from tests.unit.fakes import FakePoolApi, pool_cache

POOL = {
    "metadata": {"name": "p", "uid": "uid-p", "resourceVersion": "10"},
    "spec": {"nodeName": "node-1", "addresses": ["10.0.0.1-10.0.0.4"]},
    "status": {"allocations": {}},
}


def pod_body(uid: str, name: str | None = None, node: str = "", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "namespace": "ns", "name": name or f"pod-{uid}"},
        "spec": {"schedulerName": "ip-scheduler", "nodeName": node, "containers": [{"name": "c"}], **spec},
        "status": {"phase": "Pending"},
    }


class Api(FakePoolApi):
    """Pools, and pods by namespace/name as the API server has them now: GET, LIST and
    Binding (404 for a pod that is not there, 409 for another UID, as kube-apiserver)."""

    def __init__(self) -> None:
        super().__init__([POOL])
        self.reads: list[str] = []
        self.lists = 0
        self.bindings: list[str] = []
        self.bind_error: Exception | None = None

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

    async def set_unschedulable(self, pod: PodInfo, message: str) -> None:
        pass


class Recorder:
    def emit(self, *args: Any) -> None:
        pass

    def forget(self, uid: str) -> None:
        pass


class Env:
    def __init__(self) -> None:
        self.cache = pool_cache(
            {"node-1": [NodeInfo(name="node-1", ready=True, allocatable={"pods": Decimal(110)})]},
            {"p": [PoolView.from_obj(POOL)]},
        )
        self.api = Api()
        self.writer = PoolWriter(self.api, self.cache)  # type: ignore[arg-type]
        profile = build_profile(self.cache, self.api, self.writer)  # type: ignore[arg-type]
        self.metrics = Metrics()
        self.sched = Scheduler(
            name="ip-scheduler",
            api=self.api,  # type: ignore[arg-type]
            cache=self.cache.node_cache,
            profile=profile,
            queue=SchedulingQueue(profile.queue_sort),
            recorder=Recorder(),  # type: ignore[arg-type]
            metrics=self.metrics,
        )

    def create(self, uid: str, name: str | None = None, **spec: Any) -> dict[str, Any]:
        """A pending pod created: in the API server, and its ADDED event through kopf."""
        body = pod_body(uid, name, **spec)
        self.api.put_pod(body)
        self.sched.on_pod_event("ADDED", PodInfo.from_obj(body))
        return body

    def gone_count(self, found_by: str) -> float:
        return self.metrics.pods_gone.labels(found_by)._value.get()

    def allocations(self) -> dict[str, Any]:
        return dict(self.api.bodies["p"]["status"].get("allocations") or {})

    async def settle(self) -> None:
        for _ in range(10):
            await asyncio.gather(*self.sched._tasks, return_exceptions=True)
            await asyncio.sleep(0)

    async def schedule_next(self) -> None:
        qp = self.sched.queue.pop_nowait()
        assert qp is not None
        await self.sched.schedule_one(qp)
        await self.settle()


@pytest.fixture
def quick_lists(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A LIST burst ends after 10 ms without an event (2 s in production)."""
    monkeypatch.setattr(eventhandlers, "LIST_QUIET", 0.01)
    yield


# --------------------------------------------------------------------------- Binding refused


@pytest.mark.parametrize(
    ("change", "requeued", "gone"),
    [
        pytest.param("delete", False, 1, id="deleted-binding-404"),
        pytest.param("recreate", False, 1, id="same-name-other-uid-binding-409"),
        pytest.param("server-error", True, 0, id="still-there-refused-for-another-reason"),
        pytest.param("bound-elsewhere", False, 0, id="bound-meanwhile-by-someone-else"),
    ],
)
async def test_a_binding_refused_for_a_pod_that_no_longer_exists_is_not_retried(
    change: str, requeued: bool, gone: int
) -> None:
    """kube-scheduler's failure handler looks the pod up before putting it back
    (``handleSchedulingFailure``): a pod that is gone is forgotten and unreserved, never
    requeued; one refused for another reason goes to backoffQ."""
    env = Env()
    env.create("u1", "web-0")
    if change == "delete":
        env.api.delete_pod("web-0")
    elif change == "recreate":
        env.api.put_pod(pod_body("u2", "web-0"))
    elif change == "server-error":
        env.api.bind_error = ApiException(status=500, reason="Internal Server Error")
    else:
        other = pod_body("u1", "web-0", node="node-9")
        other["metadata"]["annotations"] = {"ipscheduler.io/pool": "pool-of-node-9"}
        env.api.put_pod(other)
        env.api.bind_error = Conflict("ns/web-0: Conflict")
    await env.schedule_next()
    assert env.api.bindings == ["web-0"]
    assert env.allocations() == {}, "the reservation was released (Unreserve)"
    assert ("u1" in env.sched.queue) is requeued
    assert env.sched.queue.depths()["in_flight"] == 0
    assert env.gone_count("binding") == gone
    assert env.sched.cache.pod("u1") is None, "the assumed pod was forgotten"
    if requeued:
        assert env.sched.queue.depths()["backoff"] == 1


async def test_a_binding_cut_by_a_connection_reset_is_retried_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = Env()
    env.create("u1")
    env.api.bind_error = ConnectionResetError("Connection reset by peer")
    await env.schedule_next()
    assert "u1" in env.sched.queue
    assert not [r for r in caplog.records if r.exc_info], "an expected transient error has no traceback"
    assert any("binding ns/pod-u1 to node-1 failed" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- re-LIST of kopf's watch


async def test_pods_a_relist_does_not_report_are_checked_and_dropped_if_gone(quick_lists: None) -> None:
    env = Env()
    env.create("g0", nodeSelector={"none": "such"})  # unschedulable: parked in the queue
    live = env.create("g1", nodeSelector={"none": "such"})
    for _ in range(2):
        await env.schedule_next()
    assert len(env.sched.queue) == 2
    env.api.delete_pod("pod-g0")  # while the watch was away: no DELETED event
    env.sched.on_pod_event(None, PodInfo.from_obj(live))  # kopf's re-LIST reports g1 only
    await asyncio.sleep(0.05)
    await env.settle()
    assert "g0" not in env.sched.queue and "g1" in env.sched.queue
    assert env.api.reads == ["pod-g0"], "one live read, of the pod the LIST lacked"
    assert env.gone_count("relist") == 1
    # Its allocations, had it any, are the GC sweep's: the pool controller missed the same
    # DELETED event, and the scheduler calls nothing outside itself.


async def test_kopfs_first_list_checks_nothing(quick_lists: None) -> None:
    env = Env()
    for uid in ("a", "b"):
        body = pod_body(uid)
        env.api.put_pod(body)
        env.sched.on_pod_event(None, PodInfo.from_obj(body))
    await asyncio.sleep(0.05)
    await env.settle()
    assert len(env.sched.queue) == 2 and env.api.reads == [] and env.api.lists == 0


async def test_a_pod_updated_during_the_relist_is_not_a_suspect(quick_lists: None) -> None:
    """kopf coalesces a pod's events within its batch window: a listed pod may arrive as
    MODIFIED. Any event during the LIST shows the pod is there."""
    env = Env()
    a = env.create("a", nodeSelector={"none": "such"})
    b = env.create("b", nodeSelector={"none": "such"})
    env.sched.on_pod_event(None, PodInfo.from_obj(a))
    env.sched.on_pod_event("MODIFIED", PodInfo.from_obj(b))
    await asyncio.sleep(0.05)
    await env.settle()
    assert env.api.reads == [] and len(env.sched.queue) == 2


async def test_many_suspects_are_narrowed_by_one_fresh_list(quick_lists: None) -> None:
    env = Env()
    pods = [env.create(f"p{i}", nodeSelector={"none": "such"}) for i in range(30)]
    env.api.delete_pod("pod-p3")
    env.sched.on_pod_event(None, PodInfo.from_obj(pods[0]))  # a burst cut short: 29 suspects
    await asyncio.sleep(0.05)
    await env.settle()
    assert env.api.lists == 1 and env.api.reads == ["pod-p3"]
    assert "p3" not in env.sched.queue and len(env.sched.queue) == 29


# --------------------------------------------------------------------------- GC sweep and informer re-LIST


async def test_the_gc_sweeps_list_drops_queued_pods_it_lacks() -> None:
    env = Env()
    env.create("g0", nodeSelector={"none": "such"})
    env.create("g1", nodeSelector={"none": "such"})
    bound_body = env.create("b", nodeSelector={"none": "such"})
    env.api.delete_pod("pod-g0")
    bound_body["spec"]["nodeName"] = "node-1"  # bound by another replica; its event was lost too
    env.api.put_pod(bound_body)
    check = env.sched.queue_check("gc")
    listed = {b["metadata"]["uid"]: PodInfo.from_obj(b) for b in env.api.pods.values()}
    env.create("late")  # created after the sweep's LIST began: not a suspect
    check(listed)
    await env.settle()
    assert sorted(env.api.reads) == ["pod-b", "pod-g0"]
    assert "g0" not in env.sched.queue and "b" not in env.sched.queue
    assert "g1" in env.sched.queue and "late" in env.sched.queue
    assert env.gone_count("gc") == 1, "only the pod that no longer exists counts as gone"


async def test_an_informer_relist_reconciles_the_queue_with_a_fresh_list() -> None:
    """kopf's re-LIST of no pod at all sends no event: our informers' re-LIST triggers the
    check (after a freeze or an API server restart every watch was away)."""
    env = Env()
    env.create("g0", nodeSelector={"none": "such"})
    env.api.delete_pod("pod-g0")
    env.sched.on_informer_relisted()
    await env.settle()
    assert env.api.lists == 1 and env.api.reads == ["pod-g0"]
    assert len(env.sched.queue) == 0 and env.gone_count("relist") == 1


async def test_a_failed_live_read_keeps_the_pod() -> None:
    env = Env()
    env.create("g0", nodeSelector={"none": "such"})
    env.api.delete_pod("pod-g0")
    env.api.pod_error = ApiException(status=503, reason="Service Unavailable")
    env.sched.queue_check("gc")({})
    await env.settle()
    assert "g0" in env.sched.queue and env.gone_count("gc") == 0
