"""Node-local memos: what they keep, and that a profile with them schedules exactly as one
without them while nodes and pods change between cycles."""

from __future__ import annotations

import dataclasses
import ipaddress
from decimal import Decimal
from typing import Any

import pytest

from ipscheduler.backend.cache import Cache
from ipscheduler.cmd.profiles import build_profile
from ipscheduler.framework.interface import CycleState, Status
from ipscheduler.framework.nodememo import MAX_SHAPES, MAX_SHAPES_PER_NODE, NodeMemo, freeze, node_local_key
from ipscheduler.framework.runtime import Framework
from ipscheduler.framework.types import NodeInfo, PodInfo, Taint
from ipscheduler.plugins.interpodaffinity import InterPodAffinity
from ipscheduler.plugins.noderesources import NodeResourcesFit
from ipscheduler.underlayip.cache import PoolCache
from ipscheduler.underlayip.plugin import UnderlayIPDeps
from ipscheduler.underlayip.pool import PoolView


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        pytest.param({"x": 1, "y": [1, 2]}, {"y": [1, 2], "x": 1}, True, id="mapping-order-does-not-count"),
        pytest.param({"x": [1, 2]}, {"x": [2, 1]}, False, id="list-order-counts"),
        pytest.param({"x": {"y": "1"}}, {"x": {"y": 1}}, False, id="types-count"),
        pytest.param(Decimal("1"), Decimal("1.0"), True, id="equal-decimals"),
        pytest.param(None, {}, False, id="none-is-not-empty"),
    ],
)
def test_freeze_is_equal_for_equal_content(a: Any, b: Any, equal: bool) -> None:
    assert (freeze(a) == freeze(b)) is equal
    hash(freeze(a))


def test_a_result_is_kept_for_the_very_node_object_and_shape() -> None:
    memo: NodeMemo[str] = NodeMemo()
    node = NodeInfo(name="n1", ready=True)
    shape = memo.shape(("NodeResourcesFit", freeze({"cpu": Decimal("1")})))
    assert memo.shape(("NodeResourcesFit", freeze({"cpu": Decimal("1")}))) == shape
    other = memo.shape(("NodeResourcesFit", freeze({"cpu": Decimal("2")})))
    memo.put(node, shape, "fits")
    assert memo.get(node, shape) == "fits"
    assert memo.get(node, other) is None
    rebuilt = dataclasses.replace(node)  # equal, but another object: a rebuilt node
    assert rebuilt == node
    assert memo.get(rebuilt, shape) is None
    memo.put(rebuilt, other, "too small")
    assert memo.get(node, other) is None
    assert NodeMemo().shape(("NodeResourcesFit", freeze({"cpu": Decimal("1")}))) not in (shape, other)


def test_a_node_keeps_a_few_results_and_a_memo_a_bounded_number_of_shapes() -> None:
    memo: NodeMemo[int] = NodeMemo()
    node = NodeInfo(name="n1")
    ids = [memo.shape(i) for i in range(MAX_SHAPES_PER_NODE + 1)]
    for i in ids:
        memo.put(node, i, i)
    assert memo.get(node, ids[-1]) == ids[-1]
    assert memo.get(node, ids[0]) is None
    for i in range(MAX_SHAPES):
        memo.shape(("more", i))
    assert memo.shape(MAX_SHAPES_PER_NODE) != ids[-1]  # forgotten: a new id, not an old one


@pytest.mark.parametrize(
    ("plugin", "keyed"),
    [
        pytest.param(NodeResourcesFit(), True, id="node-local-plugin"),
        pytest.param(InterPodAffinity.__new__(InterPodAffinity), False, id="plugin-that-reads-other-nodes"),
    ],
)
def test_only_node_local_plugins_give_a_key(plugin: object, keyed: bool) -> None:
    assert (node_local_key(plugin, PodInfo(uid="u", namespace="ns", name="p")) is not None) is keyed


# --------------------------------------------------------------------------- differential

KWOK_TAINT = {"key": "kwok", "value": "fake", "effect": "NoSchedule"}


def node_body(i: int) -> dict[str, Any]:
    taints: list[dict[str, str]] = []
    if i % 5 == 1:
        taints.append({"key": "dedicated", "value": "db", "effect": "NoSchedule"})
    if i % 4 == 2:
        taints.append({"key": "spot", "value": "yes", "effect": "PreferNoSchedule"})
    return {
        "metadata": {
            "name": f"n{i}",
            "uid": f"n{i}",
            "labels": {
                "kubernetes.io/hostname": f"n{i}",
                "zone": "abc"[i % 3],
                "disk": "ssd" if i % 2 else "hdd",
            },
        },
        "spec": {"taints": taints, "unschedulable": i == 7},
        "status": {
            "allocatable": {"cpu": str(2 + i % 4), "memory": f"{4 + i % 3}Gi", "pods": "6"},
            "conditions": [{"type": "Ready", "status": "False" if i == 11 else "True"}],
        },
    }


def pod_body(name: str, node: str = "", **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "x"}
    if "requests" in spec:
        container["resources"] = {"requests": spec.pop("requests")}
    if "ports" in spec:
        container["ports"] = spec.pop("ports")
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": {"app": name}},
        "spec": {"schedulerName": "ip-scheduler", "nodeName": node, "containers": [container], **spec},
        "status": {"phase": "Running" if node else "Pending"},
    }


SHAPES: dict[str, dict[str, Any]] = {
    "plain": {"requests": {"cpu": "100m", "memory": "64Mi"}},
    "best-effort": {},
    "tolerates-db": {
        "requests": {"cpu": "500m"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}],
    },
    "zone-a": {"requests": {"cpu": "100m"}, "nodeSelector": {"zone": "a"}},
    "prefers-ssd": {
        "requests": {"memory": "1Gi"},
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 5,
                        "preference": {
                            "matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]
                        },
                    }
                ]
            }
        },
    },
    "big": {"requests": {"cpu": "3500m", "memory": "3Gi"}},
    "host-port": {"requests": {"cpu": "100m"}, "ports": [{"containerPort": 80, "hostPort": 8080}]},
    "pinned": {"requests": {"cpu": "100m"}, "nodeName": ""},
}


def world() -> tuple[Cache, PoolCache]:
    cache = Cache()
    pools: dict[str, list[PoolView]] = {}
    for i in range(24):
        cache.add_node(NodeInfo.from_obj(node_body(i)))
        first = ipaddress.IPv4Address("10.1.0.0") + (i << 8)
        body = {
            "metadata": {"name": f"pool-{i}", "uid": f"p{i}", "resourceVersion": "1"},
            "spec": {"nodeName": f"n{i}", "addresses": [f"{first + 1}-{first + 4}"]},
            "status": {"allocations": {}},
        }
        pools[f"pool-{i}"] = [PoolView.from_obj(body)]
    cache.ready.set()
    pool_cache = PoolCache(cache)
    pool_cache.attach(pools)
    return cache, pool_cache


def outcome(fw: Framework, pod: PodInfo, nodes: Any) -> tuple[Any, ...]:
    state = CycleState()
    feasible, diagnosis = fw.find_feasible(state, pod, nodes)
    scores = fw.run_scores(state, pod, feasible) if feasible else {}
    totals = fw.score_totals(state, pod, feasible) if feasible else {}
    statuses: dict[str, Status] = dict(diagnosis.node_to_status)
    return [n.name for n in feasible], statuses, diagnosis.pre_filter, scores, totals


def test_a_profile_with_the_memo_schedules_as_one_without_it_while_the_cluster_changes() -> None:
    cache, pools = world()
    with_memo = build_profile(UnderlayIPDeps(pools, None))  # type: ignore[arg-type]
    without = build_profile(UnderlayIPDeps(pools, None))  # type: ignore[arg-type]
    without.memoize = False
    assert with_memo.memoize
    placed = 0
    for rnd in range(4):
        for shape, template in SHAPES.items():
            spec = dict(template)
            if shape == "pinned":
                spec["nodeName"] = ""
                spec["affinity"] = {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchFields": [
                                        {"key": "metadata.name", "operator": "In", "values": [f"n{rnd}"]}
                                    ]
                                }
                            ]
                        }
                    }
                }
            pod = PodInfo.from_obj(pod_body(f"{shape}-{rnd}", **spec))
            snapshot = cache.snapshot()
            got = outcome(with_memo, pod, snapshot)
            want = outcome(without, pod, snapshot)
            assert got == want, (rnd, shape)
            if got[0]:  # bind it where the totals say, as the scheduler would: that node changes
                totals = got[4]
                assert totals == with_memo.total_scores(got[3], [snapshot[n] for n in got[0]])
                best = max(got[0], key=lambda n: (totals[n], n))
                cache.add_pod(PodInfo.from_obj(pod_body(f"{shape}-{rnd}", best, **spec)).lean())
                placed += 1
        # Between rounds a node changes as an informer would report it: a taint, a label.
        changed = NodeInfo.from_obj(node_body(rnd))
        changed = dataclasses.replace(
            changed,
            labels={**changed.labels, "disk": "nvme"},
            taints=(*changed.taints, Taint(key="maintenance", value="", effect="NoSchedule")),
        )
        cache.update_node(cache.node(changed.name), changed)
    assert placed > 10  # the cycles really placed pods, so nodes really changed under the memo
    assert any(n.memo for n in cache.snapshot().values())
