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


def test_placing_cycles_assume_each_pod_on_a_feasible_node() -> None:
    """``--place``: each cycle's pod is assumed on the node it scored best on, so that node
    is rebuilt with the pod in the next snapshot, as in the scheduler."""
    fw, cache = cyclebench.world_and_cache(20, capacity=3, bound=0)
    chosen = cyclebench.placing_cycles(fw, cache, 5)
    snapshot = cache.snapshot()
    assert set(chosen) <= set(snapshot)
    assert sum(len(n.pods) for n in snapshot.values()) == 5
    assert {p.name for p in snapshot[chosen[-1]].pods} >= {"incoming-4"}
