"""backend/cache.Cache: nodes, bound pods and assumed pods, and the snapshot built from them."""

from __future__ import annotations

import dataclasses
import random
from decimal import Decimal

import pytest

from ipscheduler.backend.cache import Cache
from ipscheduler.framework.types import NodeInfo, PodInfo
from tests import builders


def node(name: str, zone: str = "a") -> NodeInfo:
    return builders.node(name, {"zone": zone}, allocatable={"cpu": Decimal(8)})


def pod(uid: str, node_name: str, cpu: str = "0.1", rv: str = "1") -> PodInfo:
    return builders.pod_info(
        uid, uid=uid, node_name=node_name, requests={"cpu": Decimal(cpu)}, resource_version=rv
    )


def uids(info: NodeInfo) -> list[str]:
    return [p.uid for p in info.pods]


def test_nodes_add_update_remove_and_the_node_set_version() -> None:
    c = Cache()
    c.add_node(node("n1"))
    c.add_node(node("n2"))
    assert c.node_set_version == 2 and set(c.snapshot()) == {"n1", "n2"}
    assert c.update_node(node("n1"), node("n1", zone="b")) is True
    assert c.node_set_version == 2  # a change is not a set change
    assert c.snapshot()["n1"].labels == {"zone": "b"}
    c.remove_node("n2")
    c.remove_node("n2")  # twice: nothing more
    assert c.node_set_version == 3 and set(c.snapshot()) == {"n1"} and c.node("n2") is None
    assert c.update_node(None, node("n3")) is True  # unknown: added
    assert c.node_set_version == 4


def test_pods_follow_their_node_and_sum_into_requested() -> None:
    c = Cache()
    c.add_node(node("n1"))
    c.add_node(node("n2"))
    c.add_pod(pod("a", "n1", cpu="0.25"))
    c.add_pod(pod("b", "n1", cpu="1"))
    assert uids(c.snapshot()["n1"]) == ["a", "b"]
    assert c.snapshot()["n1"].requested == {"pods": Decimal(2), "cpu": Decimal("1.25")}
    c.update_pod(pod("a", "n1", cpu="0.25"), pod("a", "n2", cpu="0.25"))
    assert uids(c.snapshot()["n1"]) == ["b"] and uids(c.snapshot()["n2"]) == ["a"]
    c.remove_pod(pod("b", "n1"))
    assert uids(c.snapshot()["n1"]) == [] and c.pod("b") is None and c.pod_count() == 1


def test_pods_of_an_unknown_node_count_once_it_appears() -> None:
    c = Cache()
    c.add_pod(pod("a", "later"))
    assert "later" not in c.snapshot()
    c.add_node(node("later"))
    assert uids(c.snapshot()["later"]) == ["a"]
    c.remove_node("later")
    c.add_node(node("later"))  # a node deleted and re-created: its pods still count
    assert uids(c.snapshot()["later"]) == ["a"]


def test_an_assumed_pod_counts_until_forgotten() -> None:
    c = Cache()
    c.add_node(node("n1"))
    c.add_pod(pod("bound", "n1"))
    c.assume_pod(pod("mine", "n1"))
    assert uids(c.snapshot()["n1"]) == ["bound", "mine"] and c.is_assumed("mine")
    c.forget_pod("mine")
    assert uids(c.snapshot()["n1"]) == ["bound"] and not c.is_assumed("mine")
    c.forget_pod("bound")  # only assumed pods are forgotten
    assert uids(c.snapshot()["n1"]) == ["bound"]


@pytest.mark.parametrize("same_node", [True, False], ids=["same-node", "bound-elsewhere"])
def test_the_informer_adding_an_assumed_pod_confirms_it(same_node: bool) -> None:
    c = Cache()
    c.add_node(node("n1"))
    c.add_node(node("n2"))
    c.assume_pod(pod("mine", "n1"))
    c.add_pod(pod("mine", "n1" if same_node else "n2", rv="2"))
    assert not c.is_assumed("mine")
    counted = [n for n, info in c.snapshot().items() for _ in info.pods]
    assert counted == (["n1"] if same_node else ["n2"])  # once, where it was bound


def test_removing_a_pod_also_forgets_it() -> None:
    """Bound and deleted before the informer added it: no phantom left on the node."""
    c = Cache()
    c.add_node(node("n1"))
    c.assume_pod(pod("mine", "n1"))
    c.remove_pod(pod("mine", "n1"))
    assert c.snapshot()["n1"].pods == () and not c.is_assumed("mine")


def test_the_snapshot_reuses_every_unchanged_node_info() -> None:
    """The documented facility: NodeInfo objects (and their memos) survive unchanged cycles."""
    c = Cache()
    for n in ("n1", "n2", "n3"):
        c.add_node(node(n))
    c.add_pod(pod("a", "n1"))
    first = dict(c.snapshot())
    assert first["n1"].requested["pods"] == 1  # memoized on the object
    c.add_pod(pod("b", "n2"))
    c.update_node(node("n3"), node("n3"))  # equal: a heartbeat
    c.update_pod(pod("a", "n1"), pod("a", "n1"))  # equal: nothing changed
    second = c.snapshot()
    assert second["n1"] is first["n1"] and second["n3"] is first["n3"]
    assert second["n2"] is not first["n2"] and uids(second["n2"]) == ["b"]
    assert c.snapshot()["n2"] is second["n2"]  # no change since: the same again


@pytest.mark.parametrize("seed", range(8), ids=lambda s: f"seed{s}")
def test_the_incremental_snapshot_equals_one_built_from_scratch(seed: int) -> None:
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(4)]
    c = Cache()
    nodes: dict[str, NodeInfo] = {}
    bound: dict[str, PodInfo] = {}
    assumed: dict[str, PodInfo] = {}
    for step in range(200):
        action = rng.choice(["node", "node-del", "pod", "pod-del", "assume", "forget"])
        name, uid = rng.choice(names), f"u{rng.randrange(10)}"
        if action == "node":
            new = node(name, zone=rng.choice("ab"))
            c.update_node(nodes.get(name), new)
            nodes[name] = new
        elif action == "node-del" and name in nodes:
            c.remove_node(name)
            del nodes[name]
        elif action == "pod":
            new_pod = pod(uid, name, rv=str(step))
            if uid in bound:
                c.update_pod(bound[uid], new_pod)
            else:
                c.add_pod(new_pod)
            bound[uid] = new_pod
            assumed.pop(uid, None)
        elif action == "pod-del" and uid in bound:
            c.remove_pod(bound.pop(uid))
            assumed.pop(uid, None)
        elif action == "assume" and uid not in bound:
            assumed[uid] = pod(uid, name)
            c.assume_pod(assumed[uid])
        elif action == "forget":
            c.forget_pod(uid)
            assumed.pop(uid, None)
        if rng.random() < 0.3:
            continue  # several changes between two snapshots
        want = {
            n: sorted([u for u, p in bound.items() if p.node_name == n])
            + sorted([u for u, p in assumed.items() if p.node_name == n])
            for n in nodes
        }
        snap = c.snapshot()
        assert {n: uids(info) for n, info in snap.items()} == want
        assert {n: dataclasses.replace(info, pods=()) for n, info in snap.items()} == nodes


def test_node_info_unit_views_round_up_like_quantity_values() -> None:
    """``allocatable_units`` / ``requested_units``: millicores for cpu, others rounded up
    (``Quantity.MilliValue()`` / ``Value()``), computed once per NodeInfo object."""
    c = Cache()
    c.add_node(NodeInfo(name="n1", allocatable={"cpu": Decimal("7.5"), "memory": Decimal("1000.5")}))
    c.add_pod(pod("a", "n1", cpu="0.0001"))
    c.add_pod(pod("b", "n1", cpu="0.25"))
    info = c.snapshot()["n1"]
    assert info.allocatable_units == {"cpu": 7500, "memory": 1001}
    assert info.requested_units == {"pods": 2, "cpu": 251}
    assert info.requested_units is info.requested_units
