"""hack/bench/multi.py: the pools and pods of the dual-stack and further-interface phases, and
the check of what each pod got."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest

from bench import multi, phases
from ipscheduler.underlayip.families import family_need
from ipscheduler.underlayip.interfaces import further_interfaces
from ipscheduler.underlayip.models import (
    ANNOTATION_INTERFACES,
    ANNOTATION_IP,
    ANNOTATION_IPS,
    ANNOTATION_POOL,
    MAX_POOL_ADDRESSES,
    NodeIPPool,
)
from tests.builders import pod

NODES = ["node-1", "node-2", "node-3"]


@pytest.mark.parametrize(
    ("pods", "nodes", "want"),
    [(9, 3, (3, 3, 3)), (10, 3, (4, 3, 3)), (2, 3, (1, 1, 0))],
    ids=["divides", "remainder-first", "fewer-pods-than-nodes"],
)
def test_the_pools_hold_exactly_the_pods(pods: int, nodes: int, want: tuple[int, ...]) -> None:
    assert multi.rooms(pods, nodes) == want
    assert sum(want) == pods


def _sizes(p: multi.Plan) -> dict[str, int]:
    """Addresses per pool, as the scheduler counts them (the pool's own model)."""
    out = {}
    for body in multi.pool_bodies(p):
        pool = NodeIPPool.model_validate(body)
        assert pool.metadata["labels"] == {multi.PHASE_LABEL: p.tag}
        total = 0
        for entry in pool.spec.addresses:
            first, last = (ipaddress.ip_address(a) for a in entry.split("-"))
            total += int(last) - int(first) + 1
        out[pool.metadata["name"]] = total
    return out


def test_single_stack_pools_are_ipv4_and_hold_one_address_per_pod() -> None:
    p = multi.plan("dualstack-single", NODES, 10)
    assert _sizes(p) == {"ds1-node-1": 4, "ds1-node-2": 3, "ds1-node-3": 3}
    ranges = [r for _, rs in multi.pool_ranges(p).values() for r in rs]
    assert all(ipaddress.ip_address(a).version == 4 for r in ranges for a in r)
    assert multi.pod_annotations(p) == {}


def test_dual_stack_pools_declare_as_many_ipv6_as_ipv4_and_the_pods_require_both() -> None:
    p = multi.plan("dualstack-dual", NODES, 10)
    assert _sizes(p) == {"ds2-node-1": 8, "ds2-node-2": 6, "ds2-node-3": 6}
    for _node, ranges in multi.pool_ranges(p).values():
        assert [ipaddress.ip_address(first).version for first, _ in ranges] == [4, 6]
    need = family_need(multi.pod_annotations(p))
    assert need.dual and need.required == ("IPv4", "IPv6") and not need.problem


def test_each_further_interface_names_its_pool_of_every_node_and_the_scheduler_reads_it() -> None:
    p = multi.plan("interfaces-16", NODES, 5)
    pools = _sizes(p)
    assert len(pools) == 3 * 17 and set(pools.values()) == {2, 1}
    listed = pod(name="p0", annotations=multi.pod_annotations(p))
    got = further_interfaces(listed)
    assert not got.problem
    assert [i.interface for i in got.interfaces] == [f"net{k}" for k in range(1, 17)]
    assert got.interfaces[2].choice.names == ("if16-node-1-net3", "if16-node-2-net3", "if16-node-3-net3")
    # The first interface takes the pool with the most free, then the first by name: its own.
    assert sorted(n for n in pools if n.startswith("if16-node-1"))[0] == p.first_pool("node-1")


def test_a_node_without_room_gets_no_pool_and_no_pod_names_it() -> None:
    p = multi.plan("interfaces-1", NODES, 2)
    assert set(_sizes(p)) == {"if1-node-1", "if1-node-1-net1", "if1-node-2", "if1-node-2-net1"}
    assert json.loads(multi.pod_annotations(p)["ipscheduler.io/interface-pools"]) == {
        "net1": "if1-node-1-net1,if1-node-2-net1"
    }


def test_no_two_pools_of_the_phases_or_of_the_bench_share_an_address() -> None:
    seen: set[str] = set()
    bench = [(f"10.100.{i}.1", f"10.100.{i}.20") for i in range(3)]  # cluster.node_range
    for key in multi.MULTI_PHASES:
        for _, ranges in multi.pool_ranges(multi.plan(key, NODES, 30)).values():
            for a, b in ranges:
                nets = {
                    str(ipaddress.ip_network(f"{x}/{24 if ':' not in x else 64}", strict=False))
                    for x in (a, b)
                }
                assert len(nets) == 1
                assert not nets & seen
                seen |= nets
    assert not {str(ipaddress.ip_network(f"{a}/24", strict=False)) for a, _ in bench} & seen


@pytest.mark.parametrize(
    ("asked", "nodes", "pods", "why"),
    [
        ({"ours"}, 5000, 10**6, None),
        ({"dualstack-single"}, 4, 4 * 254, None),
        ({"dualstack-single"}, 4, 4 * 254 + 1, "dualstack-single: at most 254 pods per node, not 255"),
        ({"dualstack-dual"}, 4, 4 * (MAX_POOL_ADDRESSES // 2) + 1, "at most 224 pods per node, not 225"),
        ({"interfaces-16"}, 1025, 1025, "interfaces-16: at most 1024 nodes"),
    ],
    ids=["not-asked", "full-blocks", "over-a-block", "over-the-pool-ceiling", "too-many-nodes"],
)
def test_a_shape_the_address_blocks_cannot_hold_is_refused(
    asked: set[str], nodes: int, pods: int, why: str | None
) -> None:
    got = multi.problem(asked, nodes, pods)
    assert got == why if why is None else why in (got or "")


def _bound(p: multi.Plan, node: str, i: int, **change: Any) -> dict[str, str]:
    """What pod ``i`` of ``p`` on ``node`` is bound with when all went well (``change``
    overrides: an annotation's key without its prefix, None to drop it)."""
    pools = multi.pool_ranges(p)
    first_pool = p.first_pool(node)
    ranges = pools[first_pool][1]
    ips = [str(ipaddress.ip_address(a) + i) for a, _ in ranges]
    out = {ANNOTATION_POOL: first_pool, ANNOTATION_IP: ips[0]}
    if p.dual:
        out[ANNOTATION_IPS] = ",".join(ips)
    if p.interfaces:
        entries = {}
        for k in range(1, p.interfaces + 1):
            name = p.interface_pool(node, k)
            entries[f"net{k}"] = {"pool": name, "ips": [str(ipaddress.ip_address(pools[name][1][0][0]) + i)]}
        out[ANNOTATION_INTERFACES] = json.dumps(entries)
    for key, value in change.items():
        full = f"ipscheduler.io/{key}"
        if value is None:
            out.pop(full, None)
        else:
            out[full] = value
    return out


@pytest.mark.parametrize("key", multi.MULTI_PHASES)
def test_pods_that_got_every_address_right_pass(key: str) -> None:
    p = multi.plan(key, NODES, 6)
    placed = {f"p{n}{i}": (node, _bound(p, node, i)) for n, node in enumerate(NODES) for i in range(2)}
    got = multi.check(p, placed)
    assert got == {
        "addresses": 6,
        "addresses_unique": True,
        "addresses_in_node_pool": True,
        "addresses_per_pod": p.addresses_per_pod(),
        "address_total": 6 * p.addresses_per_pod(),
        "address_problems": [],
    }


def test_an_address_given_twice_is_caught() -> None:
    p = multi.plan("dualstack-single", NODES, 6)
    got = multi.check(p, {"a": ("node-1", _bound(p, "node-1", 0)), "b": ("node-1", _bound(p, "node-1", 0))})
    assert not got["addresses_unique"] and got["addresses"] == 2
    assert got["address_problems"] == ["b: 10.128.0.1 given twice"]


@pytest.mark.parametrize(
    ("key", "change", "problem"),
    [
        (
            "dualstack-single",
            {"pool": "bench-node-1", "ip": "10.100.0.1"},
            "first interface from pool bench-node-1",
        ),
        ("dualstack-single", {"ip": None}, "not one IPv4"),
        ("dualstack-dual", {"ips": "10.129.0.1"}, "not one IPv4 and one IPv6"),
        ("dualstack-dual", {"ips": "10.129.0.1,fd00:100:1:1::1"}, "fd00:100:1:1::1 outside pool ds2-node-1"),
        ("interfaces-16", {"interfaces": "{}"}, "ipscheduler.io/interfaces has []"),
        (
            "interfaces-1",
            {"interfaces": '{"net1": {"pool": "if1-node-2-net1", "ips": ["10.131.1.1"]}}'},
            "net1: ",
        ),
        (
            "interfaces-1",
            {"interfaces": '{"net1": {"pool": "if1-node-1-net1", "ips": ["10.131.0.9"]}}'},
            "outside",
        ),
        ("dualstack-single", {"interfaces": "{}"}, "on a pod that asked for none"),
    ],
    ids=[
        "another-pool",
        "no-address",
        "one-family",
        "another-nodes-ipv6",
        "no-interface",
        "another-nodes-interface-pool",
        "outside-the-interface-pool",
        "interfaces-unasked",
    ],
)
def test_a_pod_with_a_wrong_address_fails_the_row(key: str, change: dict[str, Any], problem: str) -> None:
    p = multi.plan(key, NODES, 6)
    got = multi.check(p, {"p0": ("node-1", _bound(p, "node-1", 0, **change))})
    assert got["addresses"] == 0 and not got["addresses_in_node_pool"]
    assert any(problem in line for line in got["address_problems"]), got["address_problems"]


def test_the_check_reads_what_the_bindings_watch_kept() -> None:
    """The watch keeps a bound pod's address annotations for these phases, none other."""
    p = multi.plan("dualstack-dual", NODES, 3)
    phase = phases.Phase("dualstack-dual: ip-scheduler", "ip-scheduler", False, 1, keep_annotations=True)
    bound_with = {**_bound(p, "node-2", 0), "other": "x"}
    obj = {"metadata": {"name": "p0", "annotations": bound_with}, "spec": {"nodeName": "node-2"}}
    assert phases._seen_bound(obj, phase)
    assert phase.annotations == {"p0": {k: v for k, v in bound_with.items() if k != "other"}}
    placed = {pod: (node, phase.annotations[pod]) for pod, (node, _) in phase.placement.items()}
    assert multi.check(p, placed)["addresses"] == 1
    plain = phases.Phase("ip-scheduler", "ip-scheduler", False, 1)
    assert phases._seen_bound(obj, plain) and plain.annotations == {}


def test_the_pods_carry_the_phases_annotations() -> None:
    body = phases.pod_body("p1", "ip-scheduler", False, annotations={"a": "b"})
    assert body["metadata"] == {"name": "p1", "annotations": {"a": "b"}}
    assert "annotations" not in phases.pod_body("p1", "ip-scheduler", False)["metadata"]
