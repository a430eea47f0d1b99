"""plugins/noderesources: NodeResourcesFit, the two resource scores and their queueing hints
(no server).

Cases follow kube-scheduler 1.34's fit_test.go, least_allocated_test.go and
balanced_allocation_test.go; pods are parsed from raw bodies by :meth:`PodInfo.from_obj`,
so ``requests`` come from the real code. Expected scores are the hand computations of the
upstream tests (quoted in the comments).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pytest

from ipscheduler.framework import events
from ipscheduler.framework.interface import (
    Code,
    CycleState,
    FilterPlugin,
    PreFilterPlugin,
    QueueingHint,
    ScorePlugin,
)
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.plugins.noderesources import (
    NodeResourcesBalancedAllocation,
    NodeResourcesFit,
    NodeResourcesLeastAllocated,
    balanced_resource_score,
    fits,
    is_scalar_resource,
    nonzero_requests,
    nonzero_requests_from_spec,
)
from tests.builders import container, node, pod, pod_body
from tests.unit.plugins.cycle import HINT_NODE, HINT_POD, assert_plugin, hints_test, run_filter, run_score

OK = Code.SUCCESS
UNSCHED = Code.UNSCHEDULABLE
UNRES = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
MI = 1024 * 1024

Res = Mapping[str, str | int]


# --------------------------------------------------------------------------- builders


def req(cpu_m: int | None = None, mem: int | None = None, **extra: str | int) -> dict[str, str | int]:
    """Requests: cpu in millicores, memory in bytes, other resources by name (``_`` → ``/`` not done)."""
    out: dict[str, str | int] = {}
    if cpu_m is not None:
        out["cpu"] = f"{cpu_m}m"
    if mem is not None:
        out["memory"] = str(mem)
    out.update(extra)
    return out


def exact_pod(body: dict[str, Any]) -> PodInfo:
    """PodInfo.from_obj now carries the per-container non-zero requests itself."""
    pod = PodInfo.from_obj(body)
    assert pod.nonzero_requests == nonzero_requests_from_spec(body["spec"])
    return pod


def scores(plugin: ScorePlugin, p: PodInfo, nodes: list[NodeInfo]) -> list[int]:
    """Score + NormalizeScore, in the order of ``nodes``."""
    raw = run_score(plugin, p, nodes)
    return [raw[n.name] for n in nodes]


@pytest.mark.parametrize(
    ("plugin", "name", "kinds"),
    [
        (NodeResourcesFit(), "NodeResourcesFit", (PreFilterPlugin, FilterPlugin)),
        (NodeResourcesLeastAllocated(), "NodeResourcesLeastAllocated", (ScorePlugin,)),
        (NodeResourcesBalancedAllocation(), "NodeResourcesBalancedAllocation", (ScorePlugin,)),
    ],
    ids=["Fit", "LeastAllocated", "BalancedAllocation"],
)
def test_plugin_names_and_protocols(plugin: Any, name: str, kinds: tuple[type, ...]) -> None:
    assert_plugin(plugin, name, *kinds)


# --------------------------------------------------------------------------- NodeResourcesFit

# fit_test.go TestEnoughRequests: allocatable cpu 10m, memory 20, pods 32,
# example.com/aaa 5, ephemeral-storage 20, hugepages-2Mi 5; one pod already on the node.
FIT_ALLOC: dict[str, str | int] = {
    "cpu": "10m",
    "memory": 20,
    "pods": 32,
    "example.com/aaa": 5,
    "ephemeral-storage": 20,
    "hugepages-2Mi": 5,
}
A = "example.com/aaa"


def insufficient(*names: str) -> tuple[str, ...]:
    return tuple(f"Insufficient {n}" for n in names)


FIT_CASES: list[tuple[str, dict[str, Any], tuple[dict[str, Any], ...], Code, tuple[str, ...]]] = [
    # (id, pod body, bodies of the pods already on the node, code, reasons)
    (
        "no-resources-requested-always-fits",
        pod_body(container()),
        (pod_body(container(req(10, 20))),),
        OK,
        (),
    ),
    (
        "too-many-resources-fails-all-reasons-listed",
        pod_body(container(req(1, 1))),
        (pod_body(container(req(10, 20))),),
        UNSCHED,
        insufficient("cpu", "memory"),
    ),
    (
        "init-container-cpu-larger-than-containers",
        pod_body(container(req(1, 1)), init=(container(req(3, 1)),)),
        (pod_body(container(req(8, 19))),),
        UNSCHED,
        insufficient("cpu"),
    ),
    (
        "highest-init-container-cpu",
        pod_body(container(req(1, 1)), init=(container(req(3, 1)), container(req(2, 1)))),
        (pod_body(container(req(8, 19))),),
        UNSCHED,
        insufficient("cpu"),
    ),
    (
        "init-container-memory-larger-than-containers",
        pod_body(container(req(1, 1)), init=(container(req(1, 3)), container(req(1, 2)))),
        (pod_body(container(req(9, 19))),),
        UNSCHED,
        insufficient("memory"),
    ),
    (
        "init-containers-max-not-sum",
        pod_body(container(req(1, 1)), init=(container(req(1, 1)), container(req(1, 1)))),
        (pod_body(container(req(9, 19))),),
        OK,
        (),
    ),
    ("both-resources-fit", pod_body(container(req(1, 1))), (pod_body(container(req(5, 5))),), OK, ()),
    (
        "one-resource-memory-fits",
        pod_body(container(req(2, 1))),
        (pod_body(container(req(9, 5))),),
        UNSCHED,
        insufficient("cpu"),
    ),
    ("equal-edge-case-fits", pod_body(container(req(5, 1))), (pod_body(container(req(5, 19))),), OK, ()),
    (
        "equal-edge-case-for-init-container",
        pod_body(container(req(4, 1)), init=(container(req(5, 1)),)),
        (pod_body(container(req(5, 19))),),
        OK,
        (),
    ),
    (
        "limits-default-the-requests",
        pod_body(container(limits=req(3, 1))),
        (pod_body(container(req(8, 19))),),
        UNSCHED,
        insufficient("cpu"),
    ),
    (
        "sidecar-init-containers-add-up",
        pod_body(container(req(2)), init=(container(req(2), sidecar=True), container(req(2), sidecar=True))),
        (pod_body(container(req(5))),),
        UNSCHED,
        insufficient("cpu"),
    ),
    (
        "regular-init-after-sidecar-counts-with-it",
        pod_body(container(req(1)), init=(container(req(2), sidecar=True), container(req(4)))),
        (pod_body(container(req(5))),),
        UNSCHED,
        insufficient("cpu"),
    ),
    (
        "regular-init-before-sidecar-runs-alone",
        pod_body(container(req(1)), init=(container(req(4)), container(req(2), sidecar=True))),
        (pod_body(container(req(5))),),
        OK,
        (),
    ),
    (
        "existing-pod-sidecar-counts",
        pod_body(container(req(3))),
        (pod_body(container(req(4)), init=(container(req(4), sidecar=True),)),),
        UNSCHED,
        insufficient("cpu"),
    ),
    (
        "pod-overhead-fits",
        pod_body(container(req(1, 1)), overhead=req(3, 13)),
        (pod_body(container(req(5, 5))),),
        OK,
        (),
    ),
    (
        "pod-overhead-memory-does-not-fit",
        pod_body(container(req(1, 1)), overhead=req(1, 15)),
        (pod_body(container(req(5, 5))),),
        UNSCHED,
        insufficient("memory"),
    ),
    ("extended-resource-fits", pod_body(container({A: 1})), (pod_body(container()),), OK, ()),
    (
        "extended-resource-fits-for-init-container",
        pod_body(container(), init=(container({A: 1}),)),
        (pod_body(container()),),
        OK,
        (),
    ),
    (
        "extended-resource-capacity-enforced-unresolvable",
        pod_body(container(req(1, 1, **{A: 10}))),
        (pod_body(container()),),
        UNRES,
        insufficient(A),
    ),
    (
        "extended-resource-allocatable-enforced",
        pod_body(container(req(1, 1, **{A: 1}))),
        (pod_body(container({A: 5})),),
        UNSCHED,
        insufficient(A),
    ),
    (
        "extended-resource-multiple-containers",
        pod_body(container(req(1, 1, **{A: 3})), container(req(1, 1, **{A: 3}))),
        (pod_body(container({A: 2})),),
        UNRES,
        insufficient(A),
    ),
    (
        "extended-resource-multiple-init-containers-admitted",
        pod_body(container(), init=(container(req(1, 1, **{A: 3})), container(req(1, 1, **{A: 3})))),
        (pod_body(container({A: 2})),),
        OK,
        (),
    ),
    (
        "extended-resource-unknown-to-node-counts-zero",
        pod_body(container(req(1, 1, **{"example.com/bbb": 1}))),
        (pod_body(container()),),
        UNRES,
        insufficient("example.com/bbb"),
    ),
    (
        "kubernetes-io-resource-enforced",
        pod_body(container(req(1, 1, **{"kubernetes.io/something": 10}))),
        (pod_body(container()),),
        UNRES,
        insufficient("kubernetes.io/something"),
    ),
    (
        "hugepages-enforced-for-multiple-containers",
        pod_body(container({"hugepages-2Mi": 3}), container({"hugepages-2Mi": 3})),
        (pod_body(container({"hugepages-2Mi": 2})),),
        UNRES,
        insufficient("hugepages-2Mi"),
    ),
    (
        "zero-quantity-extended-request-skipped",
        pod_body(container(req(1, 1, **{A: 0}))),
        (pod_body(container({A: 6})),),
        OK,
        (),
    ),
    (
        "only-requested-resources-checked",
        pod_body(container({A: 1})),
        (pod_body(container(req(20, 30, **{A: 1}))),),
        OK,
        (),
    ),
    (
        "unscalar-resource-name-ignored",
        pod_body(container(req(1, 1, foo=100))),
        (pod_body(container()),),
        OK,
        (),
    ),
    (
        "ephemeral-storage-exceeds-allocatable",
        pod_body(container({"ephemeral-storage": 25})),
        (pod_body(container(req(2, 2))),),
        UNRES,
        insufficient("ephemeral-storage"),
    ),
    (
        "ephemeral-storage-sufficient",
        pod_body(container(), init=(container({"ephemeral-storage": 5}),)),
        (pod_body(container({"ephemeral-storage": 10})),),
        OK,
        (),
    ),
    (
        "several-insufficient-one-exceeds-node-unresolvable",
        pod_body(container(req(20, 2, **{A: 3, "ephemeral-storage": 25}))),
        (pod_body(container(req(5, 19, **{A: 3}))),),
        UNRES,
        insufficient("cpu", "memory", "ephemeral-storage", A),
    ),
    (
        "several-insufficient-all-resolvable",
        pod_body(container(req(6, 2, **{"hugepages-2Mi": 1, A: 3}))),
        (pod_body(container(req(5, 19, **{"hugepages-2Mi": 5, A: 3}))),),
        UNSCHED,
        insufficient("cpu", "memory", A, "hugepages-2Mi"),
    ),
]


@pytest.mark.parametrize(
    ("body", "existing", "code", "reasons"), [c[1:] for c in FIT_CASES], ids=[c[0] for c in FIT_CASES]
)
def test_node_resources_fit(
    body: dict[str, Any], existing: tuple[dict[str, Any], ...], code: Code, reasons: tuple[str, ...]
) -> None:
    p = PodInfo.from_obj(body)
    n = node(allocatable=FIT_ALLOC, pods=tuple(PodInfo.from_obj(b) for b in existing))
    plugin = NodeResourcesFit()
    state = CycleState()
    assert plugin.pre_filter(state, p, {n.name: n}).is_success()
    status = plugin.filter(state, p, n)
    assert (status.code, status.reasons) == (code, reasons)
    assert status.plugin == ("" if code is OK else "NodeResourcesFit")
    assert fits(p, n) == list(reasons)
    # Without PreFilter the filter computes the requests itself.
    assert run_filter(plugin, p, n) == status


# fit_test.go TestNotEnoughRequests: allocatable pods 1 and one pod already there.
PODS_ALLOC: dict[str, str | int] = {"cpu": "10m", "memory": 20, "pods": 1}

TOO_MANY_PODS_CASES: list[tuple[str, dict[str, Any], dict[str, str | int], tuple[str, ...]]] = [
    ("no-requests-still-counts-against-pods", pod_body(container()), PODS_ALLOC, ("Too many pods",)),
    ("resources-fit-but-no-pod-slot", pod_body(container(req(1, 1))), PODS_ALLOC, ("Too many pods",)),
    (
        "init-container-equal-edge-but-no-pod-slot",
        pod_body(container(req(5, 1)), init=(container(req(5, 1)),)),
        PODS_ALLOC,
        ("Too many pods",),
    ),
    (
        "too-many-pods-and-insufficient-cpu",
        pod_body(container(req(6, 1))),
        PODS_ALLOC,
        ("Too many pods", "Insufficient cpu"),
    ),
    (
        "node-without-pods-allocatable",
        pod_body(container(req(1, 1))),
        {"cpu": "10m", "memory": 20},
        ("Too many pods",),
    ),
]


@pytest.mark.parametrize(
    ("body", "alloc", "reasons"),
    [c[1:] for c in TOO_MANY_PODS_CASES],
    ids=[c[0] for c in TOO_MANY_PODS_CASES],
)
def test_node_resources_fit_too_many_pods(
    body: dict[str, Any], alloc: dict[str, str | int], reasons: tuple[str, ...]
) -> None:
    n = node(allocatable=alloc, pods=(pod(container(req(5, 19))),))
    status = run_filter(NodeResourcesFit(), PodInfo.from_obj(body), n)
    # "Too many pods" alone never makes the node unresolvable: deleting a pod frees a slot.
    assert (status.code, status.reasons) == (UNSCHED, reasons)


def test_underlay_ip_extended_resource() -> None:
    """The product's own extended resource is checked like any other."""
    ip = "ipscheduler.io/underlay-ip"
    alloc: dict[str, str | int] = {"cpu": "4", "memory": "8Gi", "pods": 110, ip: 2}
    one = pod(container({ip: 1}))
    assert run_filter(
        NodeResourcesFit(), one, node(allocatable=alloc, pods=(pod(container({ip: 1})),))
    ).is_success()
    full = node(allocatable=alloc, pods=(pod(container({ip: 1})), pod(container({ip: 1}))))
    status = run_filter(NodeResourcesFit(), one, full)
    assert (status.code, status.reasons) == (UNSCHED, ("Insufficient ipscheduler.io/underlay-ip",))


@pytest.mark.parametrize(
    ("name", "scalar"),
    [
        ("example.com/gpu", True),
        ("ipscheduler.io/underlay-ip", True),
        ("hugepages-2Mi", True),
        ("kubernetes.io/something", True),
        ("subdomain.kubernetes.io/something", True),
        ("attachable-volumes-csi-x", True),
        ("requests.example.com/gpu", False),
        ("foo", False),
        ("pods", False),
    ],
)
def test_is_scalar_resource(name: str, scalar: bool) -> None:
    assert is_scalar_resource(name) is scalar


# --------------------------------------------------------------------------- non-zero requests

NONZERO_CASES: list[tuple[str, dict[str, Any], str, int]] = [
    # (id, pod body, cpu, memory bytes)
    ("no-containers", pod_body(), "0", 0),
    ("container-without-requests", pod_body(container()), "0.1", 200 * MI),
    ("explicit-zero-kept", pod_body(container(req(0, 0))), "0", 0),
    ("only-cpu-set", pod_body(container(req(250))), "0.25", 200 * MI),
    ("limit-stands-for-request", pod_body(container(limits={"cpu": "2"})), "2", 200 * MI),
    ("defaults-per-container", pod_body(container(), container()), "0.2", 400 * MI),
    ("init-larger-than-containers", pod_body(container(), init=(container({"cpu": "1"}),)), "1", 200 * MI),
    ("sidecar-adds-up", pod_body(container(), init=(container(req(500), sidecar=True),)), "0.6", 400 * MI),
    ("overhead-added", pod_body(container(), overhead={"cpu": "250m", "memory": "1Mi"}), "0.35", 201 * MI),
    (
        "pod-level-requests-override",
        pod_body(container(), container(), resources={"requests": {"cpu": "3"}}),
        "3",
        400 * MI,
    ),
]


@pytest.mark.parametrize(
    ("body", "cpu", "memory"), [c[1:] for c in NONZERO_CASES], ids=[c[0] for c in NONZERO_CASES]
)
def test_nonzero_requests_from_spec(body: dict[str, Any], cpu: str, memory: int) -> None:
    assert nonzero_requests_from_spec(body["spec"]) == {"cpu": Decimal(cpu), "memory": Decimal(memory)}


def test_nonzero_requests_default_per_container() -> None:
    """Two containers without requests count the 100m / 200Mi default twice (as upstream)."""
    two_empty = pod(container(), container())
    assert nonzero_requests(two_empty)["cpu"] == Decimal("0.2")
    assert nonzero_requests(two_empty)["memory"] == Decimal(400 * MI)


# --------------------------------------------------------------------------- LeastAllocated

# least_allocated_test.go: "cpu": "4000" is 4000 cores, memory in bytes.
CPU_AND_MEMORY = (container(req(1000 * 1000, 2000)), container(req(2000 * 1000, 3000)))


def sized(name: str, cpu: int, memory: int, **extra: int) -> NodeInfo:
    return node(name, allocatable={"cpu": cpu, "memory": memory, **extra})


def on(n: NodeInfo, *bodies: dict[str, Any]) -> NodeInfo:
    return dataclasses.replace(n, pods=tuple(exact_pod(b) for b in bodies))


def cpu_mem(cpu_cores: int, mem: int) -> dict[str, Any]:
    """A one-container pod with explicit cpu (cores) and memory requests (``memory: 0`` stays explicit)."""
    return pod_body(container({"cpu": str(cpu_cores), "memory": str(mem)}))


LEAST_CASES: list[tuple[str, dict[str, Any], list[NodeInfo], dict[str, int] | None, list[int]]] = [
    # (id, pod body, nodes, resources→weights, expected scores)
    (
        # cpu 100 + mem 100 on both nodes
        "nothing-scheduled-nothing-requested",
        pod_body(),
        [sized("n1", 4000, 10000), sized("n2", 4000, 10000)],
        None,
        [100, 100],
    ),
    (
        # n1: cpu (4000-3000)*100/4000 = 25, mem (10000-5000)*100/10000 = 50 → 37; n2: 50, 50 → 50
        "nothing-scheduled-resources-requested-differently-sized-nodes",
        pod_body(*CPU_AND_MEMORY),
        [sized("n1", 4000, 10000), sized("n2", 6000, 10000)],
        None,
        [37, 50],
    ),
    (
        "no-resources-requested-pods-scheduled",
        pod_body(),
        [on(sized("n1", 4000, 10000), pod_body(), pod_body()), on(sized("n2", 4000, 10000), pod_body())],
        None,
        [100, 100],
    ),
    (
        # n1: cpu (10000-6000)/10000 = 40, mem 100 → 70; n2: 40, (20000-5000)/20000 = 75 → 57
        "no-resources-requested-pods-scheduled-with-resources",
        pod_body(),
        [
            on(sized("n1", 10000, 20000), cpu_mem(3000, 0), cpu_mem(3000, 0)),
            on(sized("n2", 10000, 20000), cpu_mem(3000, 0), cpu_mem(3000, 5000)),
        ],
        None,
        [70, 57],
    ),
    (
        # n1: 40, 75 → 57; n2: 40, (20000-10000)/20000 = 50 → 45
        "resources-requested-pods-scheduled-with-resources",
        pod_body(*CPU_AND_MEMORY),
        [on(sized("n1", 10000, 20000), cpu_mem(3000, 0)), on(sized("n2", 10000, 20000), cpu_mem(3000, 5000))],
        None,
        [57, 45],
    ),
    (
        # n2: 40, (50000-10000)/50000 = 80 → 60
        "resources-requested-pods-scheduled-differently-sized-nodes",
        pod_body(*CPU_AND_MEMORY),
        [on(sized("n1", 10000, 20000), cpu_mem(3000, 0)), on(sized("n2", 10000, 50000), cpu_mem(3000, 5000))],
        None,
        [57, 60],
    ),
    (
        # cpu 6000 > 4000 → 0; n1 mem 100 → 50; n2 mem 50 → 25
        "requested-resources-exceed-node-capacity",
        cpu_mem(3000, 0),
        [on(sized("n1", 4000, 10000), cpu_mem(3000, 0)), on(sized("n2", 4000, 10000), cpu_mem(3000, 5000))],
        None,
        [50, 25],
    ),
    (
        "zero-node-resources",
        pod_body(),
        [on(node("n1"), cpu_mem(3000, 0)), on(node("n2"), cpu_mem(3000, 5000))],
        None,
        [0, 0],
    ),
    (
        # n1: (25*1 + 50*2) / 3 = 41; n2: (50 + 100) / 3 = 50
        "different-weights-on-cpu-and-memory",
        pod_body(*CPU_AND_MEMORY),
        [sized("n1", 4000, 10000), sized("n2", 6000, 10000)],
        {"memory": 2, "cpu": 1},
        [41, 50],
    ),
    (
        "extended-resource-bypassed-if-pod-does-not-request-it",
        pod_body(*CPU_AND_MEMORY),
        [sized("n1", 6000, 10000), sized("n2", 6000, 10000, **{"example.com/gpu": 4})],
        {"cpu": 1, "memory": 1, "example.com/gpu": 1},
        [50, 50],
    ),
    (
        # gpu n1: (4-2)/4 = 50 → (50+50+50)/3 = 50; n2: (10-2)/10 = 80 → 180/3 = 60
        "extended-resource-honored-if-pod-requests-it",
        pod_body(container({"cpu": "3000", "memory": "5000", "example.com/gpu": "2"})),
        [
            sized("n1", 6000, 10000, **{"example.com/gpu": 4}),
            sized("n2", 6000, 10000, **{"example.com/gpu": 10}),
        ],
        {"cpu": 1, "memory": 1, "example.com/gpu": 1},
        [50, 60],
    ),
    (
        # the node lacks the resource: cpu 50, mem (10000-4000)/10000 = 60 → 55 on both
        "node-without-the-resource",
        pod_body(container({"cpu": "3000", "memory": "4000"})),
        [sized("n1", 6000, 10000), sized("n2", 6000, 10000, **{"example.com/gpu": 4})],
        {"example.com/gpu": 2, "cpu": 1, "memory": 1},
        [55, 55],
    ),
    (
        # defaults per container: 200m of 1000m → 80; 400Mi of 1Gi → 60 → 70
        "non-zero-defaults-per-container",
        pod_body(container(), container()),
        [sized("n1", 1, 1024 * MI)],
        None,
        [70],
    ),
]


@pytest.mark.parametrize(
    ("body", "nodes", "resources", "expected"), [c[1:] for c in LEAST_CASES], ids=[c[0] for c in LEAST_CASES]
)
def test_least_allocated_upstream_cases(
    body: dict[str, Any], nodes: list[NodeInfo], resources: dict[str, int] | None, expected: list[int]
) -> None:
    """Exact non-zero requests (as upstream) through the ``nonzero_requests`` field."""
    assert scores(NodeResourcesLeastAllocated(resources), exact_pod(body), nodes) == expected


LEAST_APPROX_CASES: list[tuple[str, PodInfo, NodeInfo, int]] = [
    # (id, pod, node, score) with today's PodInfo (aggregate requests only)
    # cpu (4000-100)*100//4000 = 97; memory (8192-200)*100//8192 = 97
    ("best-effort-pod-counts-defaults", pod(container()), sized("n", 4, 8192 * MI), 97),
    # existing best-effort pod counts too: 200m → 95; 400Mi → 95
    (
        "existing-best-effort-pod-counts",
        pod(container()),
        on(sized("n", 4, 8192 * MI), pod_body(container())),
        95,
    ),
    # cpu (4000-2000)/4000 = 50; memory (8192-200)/8192 = 97 → 73
    ("only-cpu-requested-memory-defaulted", pod(container({"cpu": "2"})), sized("n", 4, 8192 * MI), 73),
    # 1000m+3000m of 4000 → 0 (over-committed → 0, not negative); mem 97 → 48
    (
        "over-committed-resource-scores-zero",
        pod(container({"cpu": "3"})),
        on(sized("n", 4, 8192 * MI), cpu_mem(2, 1)),
        48,
    ),
]


@pytest.mark.parametrize(
    ("p", "n", "expected"), [c[1:] for c in LEAST_APPROX_CASES], ids=[c[0] for c in LEAST_APPROX_CASES]
)
def test_least_allocated_with_aggregate_requests(p: PodInfo, n: NodeInfo, expected: int) -> None:
    assert scores(NodeResourcesLeastAllocated(), p, [n]) == [expected]


@pytest.mark.parametrize("resources", [{}, {"cpu": 0}, {"cpu": 101}, {"memory": -1}], ids=str)
def test_scoring_resources_validated(resources: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="resource"):
        NodeResourcesLeastAllocated(resources)
    with pytest.raises(ValueError, match="resource"):
        NodeResourcesBalancedAllocation(resources)


# --------------------------------------------------------------------------- BalancedAllocation

# balanced_allocation_test.go: makeNode(name, milliCPU, memory); cpuOnly asks
# 1000m + 2000m with explicit memory 0, cpuAndMemory 1000m/2000 + 2000m/3000.
CPU_ONLY = pod_body(container(req(1000, 0)), container(req(2000, 0)))
CPU_AND_MEM = pod_body(container(req(1000, 2000)), container(req(2000, 3000)))
CPU_AND_MEM_AND_GPU = pod_body(
    container(req(1000, 2000)), container(req(2000, 3000, **{"nvidia.com/gpu": 3}))
)


def milli(name: str, cpu_m: int, memory: int, *existing: dict[str, Any], **extra: int) -> NodeInfo:
    alloc: dict[str, str | int] = {"cpu": f"{cpu_m}m", "memory": memory, **extra}
    return node(name, allocatable=alloc, pods=tuple(PodInfo.from_obj(b) for b in existing))


BALANCED_CASES: list[tuple[str, dict[str, Any], list[NodeInfo], dict[str, int] | None, list[int]]] = [
    (
        # n1: 3000/4000 = .75, 5000/10000 = .5 → std .125 → 87; n2: .5, .5 → 100
        "nothing-scheduled-resources-requested-differently-sized-nodes",
        CPU_AND_MEM,
        [milli("n1", 4000, 10000), milli("n2", 6000, 10000)],
        None,
        [87, 100],
    ),
    (
        # n1: .6, .25 → std .175 → 82; n2: .6, .5 → std .05 → 95
        "resources-requested-pods-scheduled-with-resources",
        CPU_AND_MEM,
        [milli("n1", 10000, 20000, CPU_ONLY), milli("n2", 10000, 20000, CPU_AND_MEM)],
        None,
        [82, 95],
    ),
    (
        # n2: .6, 10000/50000 = .2 → std .2 → 80
        "resources-requested-pods-scheduled-differently-sized-nodes",
        CPU_AND_MEM,
        [milli("n1", 10000, 20000, CPU_ONLY), milli("n2", 10000, 50000, CPU_AND_MEM)],
        None,
        [82, 80],
    ),
    (
        # n1: 6000/6000 = 1, 0 → std .5 → 50; n2: 1, .5 → std .25 → 75
        "requested-resources-at-node-capacity",
        CPU_ONLY,
        [milli("n1", 6000, 10000, CPU_ONLY), milli("n2", 6000, 10000, CPU_AND_MEM)],
        None,
        [50, 75],
    ),
    (
        # 9000/6000 is capped at 1: n1: 1, 0 → 50
        "fraction-capped-at-one",
        CPU_ONLY,
        [milli("n1", 6000, 10000, CPU_ONLY, CPU_ONLY)],
        None,
        [50],
    ),
    (
        # gpu not requested → skipped: 3000/3500 = .857, 5000/40000 = .125 → std .366 → 63
        "node-without-the-scalar-resource-skips-it",
        CPU_AND_MEM,
        [milli("n1", 3500, 40000, **{"nvidia.com/gpu": 8}), milli("n2", 3500, 40000)],
        {"cpu": 1, "memory": 1, "nvidia.com/gpu": 1},
        [63, 63],
    ),
    (
        # n1 (with the 3-GPU pod): .857, .125, 4/8 → std .3002 → 70; n2: .857, .125, 1/8 → std .345 → 65
        "include-scalar-resource",
        pod_body(container({"memory": "0", "nvidia.com/gpu": "1"})),
        [
            milli("n1", 3500, 40000, CPU_AND_MEM_AND_GPU, **{"nvidia.com/gpu": 8}),
            milli("n2", 3500, 40000, CPU_AND_MEM, **{"nvidia.com/gpu": 8}),
        ],
        {"cpu": 1, "memory": 1, "nvidia.com/gpu": 1},
        [70, 65],
    ),
    (
        # .5, .25, .5 → mean .4167, std sqrt(.041667/3) = .1179 → 88
        "three-resources-population-std",
        pod_body(container(req(1000, 1000, **{"example.com/gpu": 2}))),
        [milli("n1", 2000, 4000, **{"example.com/gpu": 4})],
        {"cpu": 1, "memory": 1, "example.com/gpu": 1},
        [88],
    ),
    (
        "zero-node-resources",
        CPU_AND_MEM,
        [milli("n1", 0, 0, CPU_ONLY), milli("n2", 0, 0)],
        None,
        [100, 100],
    ),
    (
        # best-effort: upstream PreScore skips the plugin; a constant 0 everywhere
        "best-effort-pod-skipped",
        pod_body(container()),
        [milli("n1", 4000, 10000), milli("n2", 10000, 20000, CPU_ONLY)],
        None,
        [0, 0],
    ),
    (
        # actual requests, no non-zero defaults: memory fraction stays 0 → std .25 → 75
        "no-nonzero-defaults",
        pod_body(container(req(2000))),
        [milli("n1", 4000, 10000, pod_body(container()))],
        None,
        [75],
    ),
]


@pytest.mark.parametrize(
    ("body", "nodes", "resources", "expected"),
    [c[1:] for c in BALANCED_CASES],
    ids=[c[0] for c in BALANCED_CASES],
)
def test_balanced_allocation(
    body: dict[str, Any], nodes: list[NodeInfo], resources: dict[str, int] | None, expected: list[int]
) -> None:
    assert scores(NodeResourcesBalancedAllocation(resources), PodInfo.from_obj(body), nodes) == expected


@pytest.mark.parametrize(
    ("requested", "allocatable", "expected"),
    [([3, 5], [4, 10], 87), ([6, 0], [10, 20], 70), ([5], [10], 100), ([1, 1], [0, 0], 100)],
    ids=["two", "one-zero-fraction", "single-fraction-std-zero", "nothing-allocatable"],
)
def test_balanced_resource_score(requested: list[int], allocatable: list[int], expected: int) -> None:
    assert balanced_resource_score(requested, allocatable) == expected


def test_score_normalize_is_noop() -> None:
    raw = {"a": 7, "b": 42}
    for plugin in (NodeResourcesLeastAllocated(), NodeResourcesBalancedAllocation()):
        scores_copy = dict(raw)
        plugin.normalize_score(CycleState(), pod(container()), scores_copy)
        assert scores_copy == raw


# --------------------------------------------------------------------------- queueing hints

P_CPU8 = PodInfo(uid="u", namespace="ns", name="p", requests={"cpu": Decimal(8)})

HINTS = [
    # id, event (None: node update from old/new), pod, old, new, expected
    (
        "resources-node-big-enough",
        events.NODE_ADD,
        P_CPU8,
        None,
        dataclasses.replace(HINT_NODE, allocatable={"cpu": Decimal(16), "pods": Decimal(110)}),
        QueueingHint.QUEUE,
    ),
    ("resources-node-too-small", events.NODE_ADD, P_CPU8, None, HINT_NODE, QueueingHint.SKIP),
    (
        "resources-allocatable-grew",
        None,
        P_CPU8,
        HINT_NODE,
        dataclasses.replace(HINT_NODE, allocatable={"cpu": Decimal(8), "pods": Decimal(110)}),
        QueueingHint.QUEUE,
    ),
    ("resources-cpu-pod-deleted", events.ASSIGNED_POD_DELETE, P_CPU8, P_CPU8, None, QueueingHint.QUEUE),
    (
        "resources-any-pod-deleted-frees-a-slot",
        events.ASSIGNED_POD_DELETE,
        P_CPU8,
        HINT_POD,
        None,
        QueueingHint.QUEUE,
    ),
    ("resources-pod-added", events.ASSIGNED_POD_ADD, P_CPU8, None, HINT_POD, QueueingHint.SKIP),
]


test_plugin_hints = hints_test(NodeResourcesFit, HINTS)
