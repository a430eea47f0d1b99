"""framework/interface: CycleState and QueuedPodInfo."""

from __future__ import annotations

import pytest

from ipscheduler.framework.interface import CycleState, QueuedPodInfo
from ipscheduler.framework.types import PodInfo


@pytest.mark.parametrize("value", [None, 0, "x"], ids=["none", "zero", "str"])
def test_cycle_state_memo_computes_once_per_cycle(value: object) -> None:
    state = CycleState()
    calls: list[int] = []

    def compute() -> object:
        calls.append(1)
        return value

    assert state.memo("P/k", compute) == value
    assert state.memo("P/k", compute) == value
    assert len(calls) == 1, "a memo (even None) is computed once per CycleState"
    assert state.read("P/k") == value
    assert CycleState().memo("P/k", lambda: "fresh") == "fresh", "a new cycle starts empty"


def test_queued_pod_info_starts_without_rejectors() -> None:
    pod = PodInfo(uid="u", namespace="ns", name="p")
    assert QueuedPodInfo(pod=pod, timestamp=0).unschedulable_plugins == set()
