"""Unit tests for ipscheduler.underlayip.check.find_violations (raw NodeIPPool and Pod bodies, no server)."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest

from ipscheduler.underlayip.check import find_violations, naming_namespace
from ipscheduler.underlayip.models import ANNOTATION_NETWORK
from tests import builders
from tests.builders import container, ours, pod_body
from tests.builders import pool_body as pool

alloc = functools.partial(builders.alloc, phase="Bound")
"""A wire-form allocation, Bound unless told."""


def pod(
    uid: str,
    name: str,
    node: str | None = "node-a",
    phase: str = "Running",
    pool_name: str | None = None,
    ip: str | None = None,
    deleting: bool = False,
    host_network: bool = False,
) -> dict[str, Any]:
    """A pod body of our scheduler, annotated with ``pool_name`` and ``ip`` when given."""
    extra = {"hostNetwork": True} if host_network else {}
    return pod_body(
        container(name="c"),
        uid=uid,
        name=name,
        node=node,
        phase=phase,
        scheduler="ipscheduler",
        annotations=ours(pool_name, ip),
        deleting=deleting,
        **extra,
    )


V4 = ["10.0.0.0/28"]
V6 = ["fd00::/120"]


def test_clean_state_has_no_violations() -> None:
    pools = [
        pool(
            addresses=V4,
            allocations={
                "u1": alloc("10.0.0.1", "ns/a"),
                "u2": alloc("10.0.0.2", "ns/b", phase="Reserved"),
            },
            status={"capacity": 14, "allocated": 2, "free": 12},
        ),
        pool("pool-6", addresses=V6, allocations={"u3": alloc("fd00::1", "ns/c")}),
        pool("pool-c", capacity=2, allocations={"u4": alloc(None, "ns/d")}),
        pool("pool-b", node="node-b", addresses=["10.0.1.0/28"]),
    ]
    pods = [
        pod("u1", "a", pool_name="pool-a", ip="10.0.0.1"),
        pod("u2", "b", node=None, phase="Pending"),
        pod("u3", "c", pool_name="pool-6", ip="fd00:0::1"),  # other spelling of the same address
        pod("u4", "d", pool_name="pool-c"),
        pod("u5", "e", host_network=True),
        pod("u6", "f", phase="Succeeded", pool_name="pool-a", ip="10.0.0.9"),
        pod("u7", "g", phase="Failed"),
        pod("u8", "h", deleting=True, pool_name="pool-a", ip="10.0.0.3"),
        pod("u9", "i", node=None, phase="Pending"),
    ]
    assert find_violations(pools, pods) == []


def test_empty_inputs() -> None:
    assert find_violations([], []) == []


# (pools, pods, expected violation lines, exactly)
CASES: list[tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]] = [
    (
        [pool(addresses=V4, allocations={"u1": alloc("10.0.0.1", "ns/a"), "u2": alloc("10.0.0.1", "ns/b")})],
        [
            pod("u1", "a", pool_name="pool-a", ip="10.0.0.1"),
            pod("u2", "b", pool_name="pool-a", ip="10.0.0.1"),
        ],
        [
            "address 10.0.0.1 held twice: ns/a (pool pool-a) and ns/b (pool pool-a)",
            "address 10.0.0.1 used by 2 running pods: ns/a (u1) on node-a, ns/b (u2) on node-a",
        ],
    ),
    (
        [
            pool(addresses=V4, allocations={"u1": alloc("10.0.0.1", "ns/a")}),
            pool("pool-b", addresses=V4, allocations={"u2": alloc("10.0.0.1", "ns/b")}),
        ],
        [
            pod("u1", "a", pool_name="pool-a", ip="10.0.0.1"),
            pod("u2", "b", pool_name="pool-b", ip="10.0.0.1"),
        ],
        [
            "address 10.0.0.1 held twice: ns/a (pool pool-a) and ns/b (pool pool-b)",
            "address 10.0.0.1 used by 2 running pods: ns/a (u1) on node-a, ns/b (u2) on node-a",
        ],
    ),
    (
        [
            pool("pool-a", addresses=V6, allocations={"u1": alloc("fd00::1", "ns/a")}),
            pool("pool-b", addresses=V6, allocations={"u2": alloc("fd00:0::1", "ns/b")}),
        ],
        [
            pod("u1", "a", pool_name="pool-a", ip="fd00::1"),
            pod("u2", "b", pool_name="pool-b", ip="fd00:0::1"),
        ],
        [
            "address fd00::1 held twice: ns/a (pool pool-a) and ns/b (pool pool-b)",
            "address fd00::1 used by 2 running pods: ns/a (u1) on node-a, ns/b (u2) on node-a",
        ],
    ),
    (
        [
            pool(
                addresses=V6,
                allocations={"u1": alloc("FD00:0:0::0001", "ns/a"), "u2": alloc("fd00::1", "ns/b")},
            )
        ],
        [pod("u1", "a", pool_name="pool-a", ip="fd00::1"), pod("u2", "b", pool_name="pool-a", ip="fd00::1")],
        [
            "address fd00::1 held twice: ns/a (pool pool-a) and ns/b (pool pool-a)",
            "address fd00::1 used by 2 running pods: ns/a (u1) on node-a, ns/b (u2) on node-a",
        ],
    ),
    (
        [pool(addresses=V4, allocations={"u1": alloc("10.0.0.1", "ns/a")})],
        [],
        ["pool pool-a: ns/a (u1): allocation of a pod that no longer exists"],
    ),
    (
        [pool(capacity=3, allocations={"u1": alloc(None, "ns/a", phase="Reserved")})],
        [pod("u1-other", "a", pool_name="pool-a")],
        [
            "pool pool-a: ns/a (u1): allocation of a pod that no longer exists",
            "pod ns/a (u1-other) is bound to node-a but holds no allocation",
        ],
    ),
    (
        [pool(addresses=V4, allocations={"u1": alloc("10.0.0.1", "ns/a")})],
        [pod("u1", "a", phase="Succeeded", pool_name="pool-a", ip="10.0.0.1")],
        ["pool pool-a: ns/a (u1): allocation of a Succeeded pod"],
    ),
    (
        [pool(addresses=V4, allocations={"u1": alloc("10.0.0.1", "ns/a")})],
        [pod("u1", "a", phase="Failed", pool_name="pool-a", ip="10.0.0.1")],
        ["pool pool-a: ns/a (u1): allocation of a Failed pod"],
    ),
    (
        [pool(addresses=V4)],
        [pod("u1", "a", pool_name="pool-a", ip="10.0.0.1")],
        ["pod ns/a (u1) is bound to node-a but holds no allocation"],
    ),
    (
        [pool(addresses=V4)],
        [pod("u1", "a")],
        ["pod ns/a (u1) is bound to node-a but holds no allocation"],
    ),
    (
        [pool(addresses=V4)],
        [pod("u1", "a", phase="Pending", pool_name="pool-a", ip="10.0.0.1")],
        ["pod ns/a (u1) is bound to node-a but holds no allocation"],
    ),
    (
        [pool(addresses=V4, allocations={"u1": alloc("10.0.0.1", "ns/a")})],
        [pod("u1", "a", node="node-b", pool_name="pool-a", ip="10.0.0.1")],
        ["pool pool-a: ns/a (u1): pod runs on node-b but the pool serves node-a"],
    ),
    (
        [pool(addresses=V4, status={"capacity": 2, "allocated": 3})],
        [],
        ["pool pool-a: allocated 3 > capacity 2"],
    ),
    (
        [pool(addresses=V4, allocations={"u1": alloc("10.0.0.1", "ns/a")})],
        [pod("u1", "a", pool_name="pool-a", ip="10.0.0.2")],
        ["pool pool-a: ns/a (u1): annotations ip=10.0.0.2 pool=pool-a differ from allocation ip=10.0.0.1"],
    ),
    (
        [pool(addresses=V4, allocations={"u1": alloc("10.0.0.1", "ns/a")})],
        [pod("u1", "a", pool_name="pool-b", ip="10.0.0.1")],
        ["pool pool-a: ns/a (u1): annotations ip=10.0.0.1 pool=pool-b differ from allocation ip=10.0.0.1"],
    ),
    (
        [pool(addresses=V4, allocations={"u1": alloc("10.0.0.1", "ns/a")})],
        [pod("u1", "a")],
        ["pool pool-a: ns/a (u1): annotations ip=None pool=None differ from allocation ip=10.0.0.1"],
    ),
    (
        [pool(addresses=V4, allocations={"u1": alloc("10.0.0.1", "ns/a")})],
        [pod("u1", "a", pool_name="pool-a")],
        ["pool pool-a: ns/a (u1): annotations ip=None pool=pool-a differ from allocation ip=10.0.0.1"],
    ),
    (
        [pool(capacity=2, allocations={"u1": alloc(None, "ns/a")})],
        [pod("u1", "a", pool_name="pool-a", ip="10.0.0.1")],
        ["pool pool-a: ns/a (u1): annotations ip=10.0.0.1 pool=pool-a differ from allocation ip=None"],
    ),
    ([pool(capacity=2, allocations={"u1": alloc(None, "ns/a")})], [pod("u1", "a")], []),
    ([pool(capacity=2, allocations={"u1": alloc(None, "ns/a")})], [pod("u1", "a", pool_name="pool-a")], []),
    (
        [pool(capacity=2, allocations={"u1": alloc(None, "ns/a")})],
        [pod("u1", "a", pool_name="pool-b")],
        ["pool pool-a: ns/a (u1): annotations ip=None pool=pool-b differ from allocation ip=None"],
    ),
    (
        # A status edit removed t2's allocation and pb1 got its address: two running pods share it.
        [pool(addresses=V4, allocations={"u2": alloc("10.0.0.2", "ns/pb1")})],
        [
            pod("u1", "t2", pool_name="pool-a", ip="10.0.0.2"),
            pod("u2", "pb1", node="node-a", pool_name="pool-a", ip="10.0.0.2"),
        ],
        [
            "address 10.0.0.2 used by 2 running pods: ns/pb1 (u2) on node-a, ns/t2 (u1) on node-a",
            "pod ns/t2 (u1) is bound to node-a but holds no allocation",
        ],
    ),
    (
        [pool(addresses=V4), pool("pool-b", node="node-b", addresses=V6)],
        [
            pod("u1", "a", pool_name="pool-a", ip="fd00::7"),
            pod("u2", "b", node="node-b", pool_name="pool-b", ip="FD00:0::7"),
            pod("u3", "c", node=None, phase="Pending", ip="fd00::7"),
            pod("u4", "d", phase="Succeeded", ip="fd00::7"),
        ],
        [
            "address fd00::7 used by 2 running pods: ns/a (u1) on node-a, ns/b (u2) on node-b",
            "pod ns/a (u1) is bound to node-a but holds no allocation",
            "pod ns/b (u2) is bound to node-b but holds no allocation",
        ],
    ),
]


@pytest.mark.parametrize(
    ("pools", "pods", "expected"),
    CASES,
    ids=[
        "same-address-twice-one-pool",
        "same-address-across-pools",
        "same-v6-address-different-spelling-across-pools",
        "same-v6-address-uppercase-spelling-one-pool",
        "allocation-of-missing-pod",
        "allocation-of-missing-uid-same-name",
        "allocation-of-succeeded-pod",
        "allocation-of-failed-pod",
        "bound-pod-with-annotations-no-allocation",
        "bound-pod-without-annotations-no-allocation",
        "bound-pending-phase-no-allocation",
        "allocation-on-pool-of-other-node",
        "allocated-over-capacity",
        "annotation-ip-differs",
        "annotation-pool-differs",
        "annotations-missing",
        "annotation-ip-missing",
        "annotation-ip-on-count-only-allocation",
        "count-only-slot-without-annotations",
        "count-only-slot-with-the-pool-annotation-of-older-releases",
        "count-only-slot-annotated-with-another-pool",
        "two-running-pods-share-an-address-one-unrecorded",
        "shared-across-nodes-any-spelling-pending-and-finished-do-not-count",
    ],
)
def test_violations(pools: list[dict[str, Any]], pods: list[dict[str, Any]], expected: list[str]) -> None:
    assert find_violations(pools, pods) == expected


def test_annotation_ip_in_other_spelling_is_not_a_violation() -> None:
    pools = [pool(addresses=V6, allocations={"u1": alloc("fd00::a", "ns/a")})]
    pods = [pod("u1", "a", pool_name="pool-a", ip="FD00:0:0:0:0:0:0:A")]
    assert find_violations(pools, pods) == []


def test_status_counts_at_capacity_are_fine() -> None:
    assert find_violations([pool(addresses=V4, status={"capacity": 3, "allocated": 3})], []) == []


def test_several_violations_are_all_reported() -> None:
    pools = [
        pool(
            addresses=V4,
            allocations={
                "gone": alloc("10.0.0.1", "ns/gone"),
                "done": alloc("10.0.0.1", "ns/done"),
                "elsewhere": alloc("10.0.0.3", "ns/elsewhere"),
            },
            status={"capacity": 1, "allocated": 3},
        )
    ]
    pods = [
        pod("done", "done", phase="Succeeded"),
        pod("elsewhere", "elsewhere", node="node-b", pool_name="pool-a", ip="10.0.0.3"),
        pod("naked", "naked", node="node-b"),
        pod("host", "host", node="node-b", host_network=True),
    ]
    out = find_violations(pools, pods)
    assert sorted(out) == sorted(
        [
            "pool pool-a: allocated 3 > capacity 1",
            "pool pool-a: ns/gone (gone): allocation of a pod that no longer exists",
            "address 10.0.0.1 held twice: ns/gone (pool pool-a) and ns/done (pool pool-a)",
            "pool pool-a: ns/done (done): allocation of a Succeeded pod",
            "pool pool-a: ns/elsewhere (elsewhere): pod runs on node-b but the pool serves node-a",
            "pod ns/naked (naked) is bound to node-b but holds no allocation",
        ]
    )


def test_malformed_bodies_are_skipped() -> None:
    pools = [{"metadata": {}}, pool(addresses=V4, allocations={"u1": alloc("10.0.0.1", "ns/a")})]
    pods = [{"metadata": {"name": "no-uid"}}, pod("u1", "a", pool_name="pool-a", ip="10.0.0.1")]
    assert find_violations(pools, pods) == []


@pytest.mark.parametrize(
    ("network", "violation"),
    [
        (None, None),
        ('{"ips":[{"address":"10.0.1.2/24","gateway":"10.0.1.1"}]}', None),
        ('{"ips": [{"gateway": "10.0.1.1", "address": "10.0.1.2/24"}]}', None),
        ('{"ips":[{"address":"10.0.1.2/16","gateway":"10.0.1.1"}]}', "differs from the pool's network"),
        ('{"ips":[{"address":"10.0.1.9/24","gateway":"10.0.1.1"}]}', "differs from the pool's network"),
        ("not json", "differs from the pool's network"),
    ],
    ids=["absent", "as-written", "same-json-other-spelling", "wrong-prefix", "other-address", "garbage"],
)
def test_network_annotation_must_match_the_pools_subnet(network: str | None, violation: str | None) -> None:
    p = pool(addresses=["10.0.1.2-10.0.1.9"], allocations={"u1": alloc("10.0.1.2", "ns/a")})
    p["spec"]["subnets"] = [{"cidr": "10.0.1.0/24", "gateway": "10.0.1.1"}]
    body = pod("u1", "a", pool_name="pool-a", ip="10.0.1.2")
    if network is not None:
        body["metadata"]["annotations"][ANNOTATION_NETWORK] = network
    problems = find_violations([p], [body])
    if violation is None:
        assert problems == []
    else:
        assert len(problems) == 1 and violation in problems[0]


@pytest.mark.parametrize(
    ("namespace", "kept"),
    [
        ("ns", [1, 2, 3, 5]),
        ("team", [3, 4, 5]),
        ("a-ns", []),
        ("10", []),
    ],
    ids=["ns", "team-shares-the-address", "a-suffix-is-not-the-namespace", "an-address-is-not-a-pod"],
)
def test_check_n_keeps_the_violations_that_name_a_pod_of_the_namespace(
    namespace: str, kept: list[int]
) -> None:
    lines = [
        "pool pool-a: allocated 3 > capacity 1",
        "pool pool-a: ns/gone (gone): allocation of a pod that no longer exists",
        "pod ns/naked (naked) is bound to node-b but holds no allocation",
        "address 10.0.0.1 held twice: ns/gone (pool pool-a) and team/x (pool pool-b)",
        'pool pool-b: team/y (y): annotation ipscheduler.io/network={"ips":[{"address":"10.0.1.2/16"}]} '
        "differs from the pool's network for 10.0.1.2: {}",
        "address 10.0.0.9 used by 2 running pods: ns/a (u1) on node-a, team/b (u2) on node-a",
    ]
    assert naming_namespace(lines, namespace) == [lines[i] for i in kept]


@pytest.mark.parametrize(
    ("annotations", "defaults", "namespaces", "expected"),
    [
        pytest.param({}, {}, None, [], id="allowed"),
        pytest.param(
            {},
            {},
            ["team"],
            "NodeIPPool pool-a is reserved for namespaces team (spec.namespaces), not ns",
            id="reserved-for-another-namespace",
        ),
        pytest.param(
            {"ipscheduler.io/pools": "pool-b"},
            {},
            None,
            "annotation ipscheduler.io/pools=pool-b does not name NodeIPPool pool-a",
            id="pod-names-another-pool",
        ),
        pytest.param(
            {},
            {"ns": "pool-b"},
            None,
            "namespace ns annotation ipscheduler.io/default-pools=pool-b does not name NodeIPPool pool-a",
            id="namespace-default-names-another-pool",
        ),
        pytest.param({}, {"other": "pool-b"}, None, [], id="another-namespaces-default"),
    ],
)
def test_check_names_the_tenancy_rule_of_a_pod_not_adopted_and_of_an_allocation(
    annotations: dict[str, str], defaults: dict[str, str], namespaces: list[str] | None, expected: Any
) -> None:
    """A pod created bound in a pool it may not use is not adopted: check says which rule;
    an allocation (written by a status edit) of a pod that may not use its pool is a
    violation too."""
    unadopted = pod("u1", "a", pool_name="pool-a", ip="10.0.0.1")
    unadopted["metadata"]["annotations"].update(annotations)
    got = find_violations([pool(addresses=V4, namespaces=namespaces)], [unadopted], defaults)
    line = "pod ns/a (u1) is bound to node-a but holds no allocation"
    assert got == ([line] if not expected else [f"{line}: it may not use NodeIPPool pool-a: {expected}"])
    recorded = pool(addresses=V4, namespaces=namespaces, allocations={"u1": alloc("10.0.0.1", "ns/a")})
    got = find_violations([recorded], [unadopted], defaults)
    assert got == (
        [] if not expected else [f"pool pool-a: ns/a (u1): the pod may not use the pool: {expected}"]
    )


@pytest.mark.parametrize(
    ("holder", "expected"),
    [
        pytest.param(pod("hi", "hi", node=None, phase="Pending"), [], id="held while the victim terminates"),
        pytest.param(
            pod("hi", "hi", node="node-b", phase="Running"),
            ["pool pool-a: ns/hi (hi): Nominated, but its pod is bound to node-b"],
            id="the pod is bound elsewhere",
        ),
    ],
)
def test_a_nominated_place_over_a_full_pool(holder: dict[str, Any], expected: list[str]) -> None:
    victim = pod("v", "v", pool_name="pool-a", ip="10.0.0.1")
    allocations = {
        "v": alloc("10.0.0.1", pod="ns/v"),
        "hi": builders.alloc(None, pod="ns/hi", phase="Nominated"),
    }
    status = {"capacity": 1, "allocated": 2, "free": 0}
    body = pool(addresses=["10.0.0.1"], allocations=allocations, status=status)
    assert find_violations([body], [victim, holder]) == expected


def kept(
    ip: str, pod_key: str, phase: str, policy: str = "StatefulSet", owner: str = "sts-1"
) -> dict[str, Any]:
    """An allocation kept for pod identity ``ns/db-0`` (``owner``: its StatefulSet's UID)."""
    out = alloc(ip, pod_key, phase=phase)
    out.update(releasePolicy=policy, identity="ns/db-0")
    if policy == "StatefulSet":
        out["ownerUID"] = owner
    return out


@pytest.mark.parametrize(
    ("allocations", "expected"),
    [
        ({"old": kept("10.0.0.1", "ns/db-0", "Retained")}, []),
        (
            {"old": kept("10.0.0.1", "ns/db-0", "Retained"), "new": kept("10.0.0.3", "ns/db-0", "Bound")},
            [
                "identity ns/db-0 holds 2 allocations: 10.0.0.1 (Retained, ns/db-0 (old), pool pool-a), "
                "10.0.0.3 (Bound, ns/db-0 (new), pool pool-a)"
            ],
        ),
        (
            {
                "old": kept("10.0.0.1", "ns/db-0", "Retained", owner="sts-1"),
                "new": kept("10.0.0.3", "ns/db-0", "Bound", owner="sts-2"),
            },
            [],
        ),
        (
            {
                "old": kept("10.0.0.1", "ns/db-0", "Retained", policy="Never"),
                "new": kept("10.0.0.3", "ns/db-0", "Bound", policy="Never"),
            },
            ["identity ns/db-0 holds 2 allocations"],
        ),
    ],
    ids=["one", "two-for-one-statefulset", "a-recreated-statefulsets-old-one", "never-any-owner"],
)
def test_an_identity_holding_two_allocations_is_a_violation(
    allocations: dict[str, Any], expected: list[str]
) -> None:
    """One identity holding two addresses (say 10.61.1.1 and 10.61.1.3) is reported, not
    passed as clean."""
    got = [v for v in find_violations([pool(addresses=V4, allocations=allocations)], []) if "identity" in v]
    assert len(got) == len(expected)
    assert all(g.startswith(e) for g, e in zip(got, expected, strict=True))


@pytest.mark.parametrize(
    ("pods", "want"),
    [
        ([], []),
        ([pod("u1", "a", phase="Succeeded", pool_name="pool-a", ip="10.0.0.1")], []),
        (
            [pod("u1", "a", pool_name="pool-a", ip="10.0.0.1")],
            ["pool pool-a: ns/a (u1): Releasing, but its pod runs on node-a"],
        ),
    ],
    ids=["its-pod-gone:-clean", "its-pod-ended:-clean", "its-pod-runs:-violation"],
)
def test_a_releasing_address_is_the_gone_pods_until_its_node_lets_it_go(
    pods: list[dict[str, Any]], want: list[str]
) -> None:
    releasing = {**alloc("10.0.0.1", "ns/a", phase="Releasing"), "releasingSince": builders.SINCE}
    pools = [pool(addresses=V4, allocations={"u1": releasing}, status={"capacity": 14, "allocated": 1})]
    assert find_violations(pools, pods) == want


# --------------------------------------------------------------------------- further interfaces

RDMA = ["10.1.0.0/28"]
NET1_ENTRY = {"pool": "rdma", "ips": ["10.1.0.1"], "network": {"ips": [{"address": "10.1.0.1/32"}]}}


def net1(ip: str = "10.1.0.1", **fields: Any) -> dict[str, Any]:
    """Pod ns/a's allocation for its interface net1."""
    return {**alloc(ip, "ns/a"), "interface": "net1", **fields}


def multi_homed(entries: dict[str, Any] | None, phase: str = "Running", **more: str) -> dict[str, Any]:
    """Pod ns/a (u1) bound with 10.0.0.1 of pool-a, its ``ipscheduler.io/interfaces`` these
    ``entries`` (None: absent), and the annotations ``more``."""
    body = pod("u1", "a", pool_name="pool-a", ip="10.0.0.1", phase=phase)
    if entries is not None:
        body["metadata"]["annotations"]["ipscheduler.io/interfaces"] = json.dumps(entries)
    body["metadata"]["annotations"].update(more)
    return body


def multi_pools(rdma_allocations: dict[str, Any], **rdma: Any) -> list[dict[str, Any]]:
    """pool-a holding ns/a's 10.0.0.1, and pool rdma (node-a) holding ``rdma_allocations``."""
    return [
        pool(addresses=V4, allocations={"u1": alloc("10.0.0.1", "ns/a")}),
        pool("rdma", addresses=RDMA, allocations=rdma_allocations, **rdma),
    ]


WHERE = "pool rdma: ns/a (u1): interface net1"


@pytest.mark.parametrize(
    ("pools", "pods", "expected"),
    [
        pytest.param(multi_pools({"u1": net1()}), [multi_homed({"net1": NET1_ENTRY})], [], id="as-written"),
        pytest.param(
            multi_pools({"u1": net1()}),
            [multi_homed({"net1": NET1_ENTRY}, **{"ipscheduler.io/pools": "pool-a"})],
            [],
            id="its-pool-need-not-be-in-the-pods-pools",
        ),
        pytest.param(
            multi_pools({"u1": net1()}),
            [multi_homed({"net1": {**NET1_ENTRY, "pool": "rdma-b"}})],
            [
                f"{WHERE}: annotation ipscheduler.io/interfaces says "
                f"{ {**NET1_ENTRY, 'pool': 'rdma-b'} }, the allocation 10.1.0.1"
            ],
            id="entry-names-another-pool",
        ),
        pytest.param(
            multi_pools({"u1": net1()}),
            [multi_homed({"net1": {**NET1_ENTRY, "ips": ["10.1.0.9"]}})],
            [
                f"{WHERE}: annotation ipscheduler.io/interfaces says "
                f"{ {**NET1_ENTRY, 'ips': ['10.1.0.9']} }, the allocation 10.1.0.1"
            ],
            id="entry-names-other-addresses",
        ),
        pytest.param(
            multi_pools({"u1": net1()}),
            [multi_homed({"net2": NET1_ENTRY})],
            [
                f"{WHERE}: annotation ipscheduler.io/interfaces says None, the allocation 10.1.0.1",
                "pod ns/a (u1) is bound to node-a but holds no allocation for interface net2 "
                "(10.1.0.1 of pool rdma)",
            ],
            id="no-entry-for-the-interface",
        ),
        pytest.param(
            multi_pools({"u1": net1()}),
            [multi_homed(None)],
            [f"{WHERE}: annotation ipscheduler.io/interfaces says None, the allocation 10.1.0.1"],
            id="no-annotation",
        ),
        pytest.param(
            multi_pools({"u1": net1(phase="Reserved")}),
            [pod("u1", "a", node=None, phase="Pending")],
            [],
            id="pending-nothing-to-compare",
        ),
        pytest.param(
            multi_pools({"u1": net1()}, namespaces=["team"]),
            [multi_homed({"net1": NET1_ENTRY})],
            [f"{WHERE}: pool reserved for other namespaces"],
            id="pool-reserved-for-other-namespaces",
        ),
    ],
)
def test_a_further_interfaces_allocation_is_checked_against_its_entry(
    pools: list[dict[str, Any]], pods: list[dict[str, Any]], expected: list[str]
) -> None:
    assert find_violations(pools, pods) == expected


@pytest.mark.parametrize(
    ("first", "further", "expected"),
    [
        pytest.param(None, "net2", 0, id="one-allocation-per-interface"),
        pytest.param("net2", "net2", 1, id="two-for-one-interface"),
        pytest.param(None, None, 1, id="two-for-the-first-interface"),
    ],
)
def test_an_identity_holds_one_allocation_per_interface(
    first: str | None, further: str | None, expected: int
) -> None:
    """The identity ns/db-0's Retained allocations in two pools: one per interface is what it
    keeps, two for one interface leak one."""
    a = {**kept("10.0.0.1", "ns/db-0", "Retained"), **({"interface": first} if first else {})}
    b = {**kept("10.1.0.1", "ns/db-0", "Retained"), **({"interface": further} if further else {})}
    pools = [pool(addresses=V4, allocations={"old": a}), pool("rdma", addresses=RDMA, allocations={"old": b})]
    assert (
        len([v for v in find_violations(pools, []) if v.startswith("identity ns/db-0 holds 2")]) == expected
    )


def test_a_pod_holding_only_its_further_interfaces_allocation_is_a_violation() -> None:
    pools = [pool(addresses=V4), pool("rdma", addresses=RDMA, allocations={"u1": net1()})]
    assert find_violations(pools, [multi_homed({"net1": NET1_ENTRY})]) == [
        "pod ns/a (u1) is bound to node-a but holds no allocation"
    ]


# --------------------------------------------------------------------------- two-pool dual-stack

V6 = ["fd00::/124"]
ETH0_ENTRY = {"pool": "v6", "ips": ["fd00::1"], "network": {"ips": [{"address": "fd00::1/128"}]}}
BOTH = '{"ips":[{"address":"10.0.0.1/32"},{"address":"fd00::1/128"}]}'


@pytest.mark.parametrize(
    ("ips", "network", "second", "expected"),
    [
        pytest.param("10.0.0.1,fd00::1", BOTH, "fd00::1", [], id="as-written"),
        pytest.param(
            "10.0.0.1,fd00::1",
            BOTH,
            "fd00::2",
            [
                "pool v6: ns/a (u1): interface eth0: annotation ipscheduler.io/interfaces says "
                f"{ETH0_ENTRY}, the allocation fd00::2"
            ],
            id="the-second-pool-holds-another-address",
        ),
        pytest.param(
            "10.0.0.1,fd00::9",
            BOTH,
            "fd00::1",
            [
                "pool pool-a: ns/a (u1): annotation ipscheduler.io/ips=10.0.0.1,fd00::9 differs from "
                "allocation ips=10.0.0.1",
                f"pool pool-a: ns/a (u1): annotation ipscheduler.io/network={BOTH} differs from the pool's "
                'network for 10.0.0.1: {"ips":[{"address":"10.0.0.1/32"}]}',
            ],
            id="ips-not-naming-the-entrys-address-leaves-it-a-further-interface",
        ),
    ],
)
def test_a_dual_stack_pods_second_family_from_a_second_pool_is_its_first_interfaces(
    ips: str, network: str, second: str, expected: list[str]
) -> None:
    """Pod ns/a holds 10.0.0.1 in pool-a and its second family in pool v6 (interface eth0):
    ``ipscheduler.io/ips`` lists both, the network carries both."""
    pools = [
        pool(addresses=V4, allocations={"u1": alloc("10.0.0.1", "ns/a")}),
        pool("v6", addresses=V6, allocations={"u1": {**alloc(second, "ns/a"), "interface": "eth0"}}),
    ]
    body = multi_homed({"eth0": ETH0_ENTRY}, **{"ipscheduler.io/ips": ips, "ipscheduler.io/network": network})
    assert find_violations(pools, [body]) == expected


UNRECORDED = (
    "pod ns/a (u1) is bound to node-a but holds no allocation for interface net1 (10.1.0.1 of pool rdma)"
)


@pytest.mark.parametrize(
    ("rdma_allocations", "pods", "expected"),
    [
        pytest.param({"u1": net1()}, [multi_homed({"net1": NET1_ENTRY})], [], id="recorded"),
        pytest.param(
            {},
            [multi_homed({"net1": NET1_ENTRY})],
            [UNRECORDED],
            id="not-recorded",
        ),
        pytest.param(
            {"u1": {**alloc("10.1.0.1", "ns/a")}},
            [multi_homed({"net1": NET1_ENTRY})],
            [
                "pool rdma: ns/a (u1): annotations ip=10.0.0.1 pool=pool-a differ from allocation "
                "ip=10.1.0.1",
                UNRECORDED,
            ],
            id="recorded-as-the-first-interfaces",
        ),
        pytest.param({}, [multi_homed({"net1": NET1_ENTRY}, phase="Succeeded")], [], id="pod-ended"),
        pytest.param({}, [multi_homed({"net1": "rdma"})], [], id="entry-that-cannot-be-read"),
    ],
)
def test_a_bound_pods_further_interface_that_no_pool_records_is_a_violation(
    rdma_allocations: dict[str, Any], pods: list[dict[str, Any]], expected: list[str]
) -> None:
    """Its addresses look free: another pod may be given them (adoption records it). (An ended
    pod's first interface's allocation is a violation of its own, left out here.)"""
    pools = multi_pools(rdma_allocations)
    assert [v for v in find_violations(pools, pods) if "of a Succeeded pod" not in v] == expected
