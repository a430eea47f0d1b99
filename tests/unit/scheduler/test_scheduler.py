"""scheduler/scheduler: the binding cycle's failure handler. A pod whose Binding is refused
because it no longer exists is forgotten and unreserved, never requeued; the
scheduler runs with the default profile over a real pool cache and writer, only the API
server is in memory."""

from __future__ import annotations

import asyncio
import functools

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.coscheduling.groups import Member
from ipscheduler.coscheduling.models import POD_GROUP_LABEL, PodGroupView
from ipscheduler.framework.types import PodInfo
from ipscheduler.kube.client import Conflict
from ipscheduler.underlayip import allocator
from tests.builders import pending_pod_body as pod_body
from tests.unit.fakes import SchedulerEnv

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
    env = SchedulerEnv()
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
    env = SchedulerEnv()
    env.create("u1")
    env.api.bind_error = ConnectionResetError("Connection reset by peer")
    await env.schedule_next()
    assert "u1" in env.sched.queue
    assert not [r for r in caplog.records if r.exc_info], "an expected transient error has no traceback"
    assert any("binding ns/pod-u1 to node-1 failed" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- Permit: waiting


def _group_env(min_member: int, timeout: float | None = None) -> SchedulerEnv:
    """A SchedulerEnv whose Coscheduling knows PodGroup ``ns/g`` and ``min_member`` members."""
    env = SchedulerEnv()
    index = env.sched.profile.queue_sort.index  # type: ignore[attr-defined]
    index.set_group("ns/g", PodGroupView("ns", "g", min_member=min_member, timeout=timeout))
    for i in range(min_member):
        index.set_member(f"u{i}", Member(f"u{i}", "ns", f"w-{i}", "ns/g"))
    for i in range(min_member):
        env.create(f"u{i}", f"w-{i}", labels={POD_GROUP_LABEL: "g"})
    return env


async def _schedule_held(env: SchedulerEnv) -> None:
    """One scheduling cycle whose pod is held at Permit: its reservation written, its
    binding cycle left waiting (``settle`` would wait for it)."""
    qp = env.sched.queue.pop_nowait()
    assert qp is not None
    await env.sched.schedule_one(qp)
    await env.writer.flush()


async def test_a_pod_held_at_permit_binds_once_its_group_is_placed_and_holds_no_bind_slot() -> None:
    env = _group_env(2)
    env.sched._bind_slots = asyncio.Semaphore(1)
    await _schedule_held(env)
    assert env.api.bindings == []
    assert [a["phase"] for a in env.allocations().values()] == ["Reserved"]
    assert len(env.sched.profile.waiting_pods) == 1
    await env.schedule_next()
    assert sorted(env.api.bindings) == ["w-0", "w-1"]
    assert len(env.sched.profile.waiting_pods) == 0
    assert env.metrics.permit_wait_duration.labels("Success")._sum.get() > 0


async def test_a_pod_timing_out_at_permit_is_unreserved_and_unschedulable() -> None:
    env = _group_env(3, timeout=0.05)
    await _schedule_held(env)
    assert len(env.allocations()) == 1
    await asyncio.sleep(0.1)
    await env.settle()
    await env.writer.flush()
    assert env.api.bindings == []
    assert env.allocations() == {}, "the reservation was released (Unreserve)"
    assert env.sched.cache.pod("u0") is None, "the assumed pod was forgotten"
    assert "u0" in env.sched.queue and env.sched.queue.depths()["in_flight"] == 0
    # Recorded under its result (not compared with the timeout: the timer and the
    # histogram read the clock at different moments).
    assert env.metrics.permit_wait_duration.labels("Unschedulable")._sum.get() > 0
    assert env.metrics.permit_wait_duration.labels("Success")._sum.get() == 0


async def test_a_permit_plugin_that_raises_unreserves_and_forgets_like_any_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its exception becomes an Error status naming it (upstream's AsStatus): the assumed pod
    is forgotten, the address reserved for it released, the pod sent to backoffQ."""
    env = SchedulerEnv()
    env.create("u1")
    (plugin,) = env.sched.profile.permit

    def broken(*_: object) -> object:
        raise RuntimeError("permit exploded")

    monkeypatch.setattr(plugin, "permit", broken)
    qp = env.sched.queue.pop_nowait()
    assert qp is not None
    result = await env.sched.schedule_one(qp)
    await env.writer.flush()
    assert result.error and "running Permit plugin" in result.message and "permit exploded" in result.message
    assert env.allocations() == {}, "the reservation was released (Unreserve)"
    assert env.sched.cache.pod("u1") is None, "the assumed pod was forgotten"
    assert env.sched.queue.depths()["backoff"] == 1 and env.api.bindings == []


async def test_a_pod_deleted_while_held_at_permit_is_unreserved_and_dropped() -> None:
    env = _group_env(3)
    await _schedule_held(env)
    env.api.delete_pod("w-0")
    env.sched.handlers.on_pod_event(
        "DELETED", PodInfo.from_obj(pod_body("u0", "w-0", labels={POD_GROUP_LABEL: "g"}))
    )
    await env.settle()
    await env.writer.flush()
    assert env.allocations() == {}
    assert "u0" not in env.sched.queue


async def test_two_groups_arriving_interleaved_never_hold_each_others_addresses() -> None:
    """Pool p has 4 addresses; groups a and b need 3 each and their pods arrive one by one,
    alternating. b's second pod finds no room: PostFilter releases b's waiting pod, so a
    completes, and b holds nothing (upstream coscheduling's PostFilter; no deadlock)."""
    env = SchedulerEnv()
    index = env.sched.profile.queue_sort.index  # type: ignore[attr-defined]
    for g in ("a", "b"):
        index.set_group(f"ns/{g}", PodGroupView("ns", g, min_member=3))
        for i in range(3):
            index.set_member(f"{g}{i}", Member(f"{g}{i}", "ns", f"{g}-{i}", f"ns/{g}"))

    async def arrive(uid: str) -> None:
        env.create(uid, f"{uid[0]}-{uid[1]}", labels={POD_GROUP_LABEL: uid[0]})
        qp = env.sched.queue.pop_nowait()
        assert qp is not None and qp.pod.uid == uid
        await env.sched.schedule_one(qp)
        for _ in range(5):
            await asyncio.sleep(0)

    for uid in ("a0", "b0", "a1", "b1"):
        await arrive(uid)
    assert {w.pod.uid for w in env.sched.profile.waiting_pods} == {"a0", "a1"}, "b0 was released"
    await arrive("a2")
    await env.settle()
    await env.writer.flush()
    assert sorted(env.api.bindings) == ["a-0", "a-1", "a-2"]
    assert set(env.allocations()) == {"a0", "a1", "a2"}, "b holds no address"


# -- IP-aware preemption: a pool whose every address is held by pods of lower priority --


async def fill(env: SchedulerEnv, n: int = 4, priority: int = 0) -> None:
    """``n`` pods of ``priority`` scheduled (node-1's pool p has 4 addresses)."""
    for i in range(n):
        env.create(f"low-{i}", priority=priority)
        await env.schedule_next()
    assert len(env.allocations()) == n


async def test_a_pod_of_higher_priority_preempts_one_holder_of_an_address() -> None:
    env = SchedulerEnv()
    await fill(env)
    env.create("high", priority=1000)
    await env.schedule_next()
    assert len(env.api.preempted) == 1, "one address is all the pod needs"
    assert env.api.nominations == [("pod-high", "node-1")]
    assert [p.name for p in env.sched.queue.nominated_pods_for_node("node-1")] == ["pod-high"]


async def test_no_preemption_among_equals() -> None:
    env = SchedulerEnv()
    await fill(env, priority=1000)
    env.create("high", priority=1000)
    await env.schedule_next()
    assert env.api.preempted == [] and env.api.nominations == []


async def test_preemption_policy_never_waits() -> None:
    env = SchedulerEnv()
    await fill(env)
    env.create("high", priority=1000, preemptionPolicy="Never")
    await env.schedule_next()
    assert env.api.preempted == []


async def test_a_sticky_address_is_not_freed_by_evicting_its_pod() -> None:
    """A victim whose address outlives it (release policy Never: Retained for its identity)
    frees nothing: preemption finds no victims and says why."""
    env = SchedulerEnv()
    for i in range(4):
        env.create(f"low-{i}", annotations={"ipscheduler.io/release-policy": "Never"})
        await env.schedule_next()
    env.create("high", priority=1000)
    await env.schedule_next()
    assert env.api.preempted == []
    assert env.sched._unschedulable_msg.values() and all(
        "preemption: 0/1 nodes are available" in m for m in env.sched._unschedulable_msg.values()
    )


async def test_the_place_a_victim_frees_is_held_for_the_preemptor() -> None:
    """Better than upstream: the preemptor gets a Nominated place in the pool at once; when
    the victim's address is released, a pod of lower priority finds no room, and the
    preemptor's Reserve turns the place into its reservation of that very address."""
    env = SchedulerEnv()
    await fill(env)
    env.create("high", priority=1000)
    await env.schedule_next()
    (victim,) = env.api.preempted
    victim_uid = victim.removeprefix("pod-")
    held = env.allocations()["high"]
    assert (held["phase"], held.get("ip")) == ("Nominated", None)
    freed = env.allocations()[victim_uid]["ip"]
    await env.writer.submit("p", functools.partial(allocator.release, uid=victim_uid))
    env.create("late", priority=0)
    await env.schedule_next()
    assert "late" not in env.allocations(), "the held place is not for a pod of lower priority"
    env.sched.queue.activate({"high"})
    await env.schedule_next()
    mine = env.allocations()["high"]
    assert (mine["phase"] in ("Reserved", "Bound"), mine["ip"]) == (True, freed)
    assert "pod-high" in env.api.bindings
