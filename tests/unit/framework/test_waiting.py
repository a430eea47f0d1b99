"""framework/waiting: pods held at Permit are allowed by every plugin that held them, or
rejected by one (or its timeout) with upstream's message; run_permit and wait_on_permit."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from ipscheduler.framework.interface import PERMIT_TIMED_OUT, Code, CycleState, Status
from ipscheduler.framework.runtime import Framework
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.framework.waiting import WaitingPods
from ipscheduler.plugins.queuesort import PrioritySort
from tests.builders import pod_info


def test_allowed_by_every_plugin_that_held_it() -> None:
    async def go() -> None:
        pods = WaitingPods()
        w = pods.add(pod_info("a", uid="a"), "node-1", {"P1": 5.0, "P2": 5.0})
        w.allow("P1")
        assert w.pending_plugins == ["P2"]
        w.allow("P2")
        assert (await w.wait()).is_success()

    asyncio.run(go())


def test_the_timeout_rejects_with_upstreams_message() -> None:
    async def go() -> Status:
        pods = WaitingPods()
        w = pods.add(pod_info("a", uid="a"), "node-1", {"Coscheduling": 0.05})
        return await w.wait()

    st = asyncio.run(go())
    assert st.code is Code.UNSCHEDULABLE
    assert st.plugin == "Coscheduling"
    assert st.message == "rejected due to timeout after waiting 50ms at plugin Coscheduling"


def test_a_rejection_wins_over_later_allows_and_is_by_uid() -> None:
    async def go() -> Status:
        pods = WaitingPods()
        w = pods.add(pod_info("a", uid="a"), "node-1", {"P": 5.0})
        assert pods.reject("a", "P", "no")
        assert not pods.reject("missing", "P", "no")
        w.allow("P")
        return await w.wait()

    st = asyncio.run(go())
    assert (st.code, st.message, st.plugin) == (Code.UNSCHEDULABLE, "no", "P")


@dataclass
class Permit:
    name: str
    answer: Status
    timeout: float = 0.0

    def permit(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> tuple[Status, float]:
        return self.answer, self.timeout


@pytest.mark.parametrize(
    ("answers", "code", "held"),
    [
        ([Status.success()], Code.SUCCESS, False),
        ([Status.wait(), Status.success()], Code.WAIT, True),
        ([Status.wait(), Status.unschedulable("no")], Code.UNSCHEDULABLE, False),
    ],
    ids=["success", "wait", "a-rejection-beats-a-wait"],
)
def test_run_permit(answers: list[Status], code: Code, held: bool) -> None:
    async def go() -> tuple[Status, bool]:
        fw = Framework(
            scheduler_name="s",
            queue_sort=PrioritySort(),
            permit=[Permit(f"P{i}", a, 5.0) for i, a in enumerate(answers)],
        )
        pod = pod_info("a", uid="a")
        st = fw.run_permit(CycleState(), pod, NodeInfo(name="node-1"))
        waiting = fw.waiting_pods.get("a") is not None
        if waiting:
            fw.waiting_pods.get("a").allow("P0")  # type: ignore[union-attr]
            assert (await fw.wait_on_permit(pod)).is_success()
            assert fw.waiting_pods.get("a") is None
        return st, waiting

    st, waiting = asyncio.run(go())
    assert st.code is code
    assert waiting is held


def test_wait_on_permit_of_a_pod_not_held_succeeds_at_once() -> None:
    fw = Framework(scheduler_name="s", queue_sort=PrioritySort())
    assert asyncio.run(fw.wait_on_permit(pod_info("a", uid="a"))).is_success()


@pytest.mark.parametrize(
    ("ending", "timed_out"),
    [("timeout", frozenset({"P0"})), ("reject", None), ("allow", None)],
    ids=["a-timeout-is-written-for-unreserve", "a-rejection-is-not", "an-allow-is-not"],
)
def test_wait_on_permit_tells_unreserve_a_timeout_ended_the_wait(
    ending: str, timed_out: frozenset[str] | None
) -> None:
    async def go() -> CycleState:
        fw = Framework(
            scheduler_name="s",
            queue_sort=PrioritySort(),
            permit=[Permit("P0", Status.wait(), 0.05 if ending == "timeout" else 5.0)],
        )
        pod = pod_info("a", uid="a")
        state = CycleState()
        fw.run_permit(state, pod, NodeInfo(name="node-1"))
        waiting = fw.waiting_pods.get("a")
        assert waiting is not None
        if ending == "reject":
            waiting.reject("P0", "no")
        elif ending == "allow":
            waiting.allow("P0")
        await fw.wait_on_permit(pod, state)
        return state

    assert asyncio.run(go()).get(PERMIT_TIMED_OUT) == timed_out
