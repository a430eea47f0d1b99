"""backend/nominator: the pods nominated to nodes, as upstream's nominator keeps them."""

from __future__ import annotations

import dataclasses

import pytest

from ipscheduler.backend.nominator import Nominator
from ipscheduler.backend.queue import SchedulingQueue
from ipscheduler.plugins.queuesort import PrioritySort
from tests.builders import pod_info

POD = pod_info("p", priority=10)


def names(n: Nominator, node: str) -> list[str]:
    return [p.name for p in n.nominated_pods_for_node(node)]


@pytest.mark.parametrize(
    ("old_nnn", "new_nnn", "held", "want"),
    [
        pytest.param("", "a", "", "a", id="an update nominates"),
        pytest.param("a", "b", "a", "b", id="an update moves the nomination"),
        pytest.param("a", "", "a", "", id="an update that removes it drops it"),
        pytest.param("", "", "a", "a", id="a stale update keeps the scheduler's own"),
    ],
)
def test_update(old_nnn: str, new_nnn: str, held: str, want: str) -> None:
    n = Nominator()
    if held:
        n.add(POD, held)
    n.update(
        dataclasses.replace(POD, nominated_node_name=old_nnn),
        dataclasses.replace(POD, nominated_node_name=new_nnn),
    )
    assert n.node_of(POD.uid) == want
    assert names(n, want) == (["p"] if want else [])


def test_an_override_with_no_node_clears_and_delete_forgets() -> None:
    n = Nominator()
    n.add(POD, "a")
    n.add(POD, "")
    assert not n and names(n, "a") == []
    n.add(POD, "a")
    n.delete(POD.uid)
    assert not n


def test_the_queue_keeps_nominations_and_a_status_write_leaves_a_parked_pod_parked() -> None:
    q = SchedulingQueue(PrioritySort())
    q.add(POD)
    qp = q.pop_nowait()
    assert qp is not None
    q.add_unschedulable(qp)
    q.add(dataclasses.replace(POD, nominated_node_name="a", resource_version="2"))
    assert q.depths()["unschedulable"] == 1, "a status-only update does not move the pod"
    assert [p.name for p in q.nominated_pods_for_node("a")] == ["p"]
    q.delete(POD.uid)
    assert q.nominated_pods_for_node("a") == []
