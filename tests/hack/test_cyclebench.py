"""hack/cyclebench.py builds a working world: the cycle it times finds and scores nodes."""

from __future__ import annotations

import pytest

import cyclebench
from ipscheduler.framework.types import PodInfo


@pytest.mark.parametrize(
    ("nodes", "bound", "feasible"),
    [
        pytest.param(50, 0, 50, id="under-100-nodes-all-are-searched"),
        pytest.param(300, 600, 144, id="adaptive-percentage-48"),
    ],
)
def test_the_cycle_benchmark_schedules_its_pod(nodes: int, bound: int, feasible: int) -> None:
    fw, snapshot = cyclebench.world(nodes, capacity=3, bound=bound)
    pod = PodInfo.from_obj(cyclebench.pod_body("incoming"))
    assert cyclebench.cycle(fw, pod, snapshot) == feasible
    assert sum(len(n.pods) for n in snapshot.values()) == bound
