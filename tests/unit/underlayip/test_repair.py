"""Unit tests for ipscheduler.underlayip.repair.plan (pure planning over pools and pods, no server)."""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
from typing import Any

import pytest

from ipscheduler.framework.types import PodInfo
from ipscheduler.underlayip.models import ANNOTATION_IP, ANNOTATION_POOL
from ipscheduler.underlayip.repair import Repair, SkewClock, bound_with, plan, retained_statefulsets
from ipscheduler.underlayip.retention import StatefulSetFacts
from ipscheduler.underlayip.teardown import NodeState
from tests import builders
from tests.builders import NOW, ago, pool

TTL = 60.0

OLD = ago(3600)
YOUNG = ago(5)


alloc = functools.partial(builders.alloc, since=OLD)
"""A wire-form allocation, Reserved an hour ago unless told."""


def pod(
    uid: str,
    name: str = "p",
    namespace: str = "ns",
    node: str | None = None,
    phase: str = "Running",
    annotations: dict[str, str] | None = None,
    deleting: bool = False,
) -> PodInfo:
    """A pod of our scheduler, as the informers parse it."""
    return builders.pod(
        uid=uid,
        name=name,
        namespace=namespace,
        node=node,
        phase=phase,
        scheduler="ipscheduler",
        annotations=annotations or None,
        deleting=deleting,
    )


def ours(pool_name: str = "pool-a", ip: str | None = "10.0.0.1") -> dict[str, str]:
    return builders.ours(pool_name, ip)


def summary(repairs: list[Repair]) -> list[tuple[str, str, str, str, str | None]]:
    return [(r.action, r.pool, r.uid, r.pod, r.ip) for r in repairs]


ADDRS = ["10.0.0.0/28"]

# --------------------------------------------------------------------------- one allocation, one pod

# (allocation, pod or None, expected actions [(action, uid)], reason substring or None)
SINGLE = [
    (alloc("10.0.0.1", phase="Bound"), None, [("release", "u1")], "no longer exists"),
    (alloc("10.0.0.1", phase="Reserved"), None, [("release", "u1")], "no longer exists"),
    (
        alloc("10.0.0.1", phase="Bound"),
        pod("u1", node="node-a", phase="Succeeded"),
        [("release", "u1")],
        "Succeeded",
    ),
    (
        alloc("10.0.0.1", phase="Bound"),
        pod("u1", node="node-a", phase="Failed"),
        [("release", "u1")],
        "Failed",
    ),
    (alloc("10.0.0.1", phase="Reserved"), pod("u1", phase="Failed"), [("release", "u1")], "Failed"),
    (
        alloc("10.0.0.1", phase="Reserved", since=OLD),
        pod("u1", phase="Pending"),
        [("release", "u1")],
        "Reserved for more than 60s but pod is still not bound",
    ),
    (alloc("10.0.0.1", phase="Reserved", since=YOUNG), pod("u1", phase="Pending"), [], None),
    (alloc("10.0.0.1", phase="Reserved", since=ago(-3600)), pod("u1", phase="Pending"), [], None),
    (alloc("10.0.0.1", phase="Reserved", since=ago(-3600)), pod("u1", node="node-b"), [], None),
    (
        alloc("10.0.0.1", phase="Reserved", since=YOUNG),
        pod("u1", node="node-a", annotations=ours()),
        [("mark_bound", "u1")],
        "bound",
    ),
    (
        alloc("10.0.0.1", phase="Reserved", since=OLD),
        pod("u1", node="node-a", annotations=ours()),
        [("mark_bound", "u1")],
        "bound",
    ),
    (
        alloc("10.0.0.1", phase="Reserved", since=OLD),
        pod("u1", node="node-b", annotations=ours("pool-b")),
        [("release", "u1")],
        "bound to node-b",
    ),
    (alloc("10.0.0.1", phase="Reserved", since=YOUNG), pod("u1", node="node-b"), [], None),
    (alloc("10.0.0.1", phase="Reserved", since=ago(TTL)), pod("u1", node="node-b"), [], None),
    (
        alloc("10.0.0.1", phase="Reserved", since=ago(TTL + 1)),
        pod("u1", node="node-b"),
        [("release", "u1")],
        "Reserved for more than 60s",
    ),
    (
        alloc("10.0.0.1", phase="Reserved", since=OLD),
        pod("u1", node="node-a"),
        [("release", "u1")],
        "bound to node-a",
    ),
    (
        alloc("10.0.0.1", phase="Reserved", since=OLD),
        pod("u1", node="node-a", annotations=ours("pool-other")),
        [("release", "u1")],
        "bound to node-a",
    ),
    (
        alloc("10.0.0.1", phase="Reserved", since=YOUNG),
        pod("u1", node="node-a", annotations=ours("pool-other")),
        [],
        None,
    ),
    (alloc("10.0.0.1", phase="Bound", since=OLD), pod("u1", node="node-a", annotations=ours()), [], None),
    (alloc("10.0.0.1", phase="Bound", since=OLD), pod("u1", node="node-b"), [], None),
    (
        alloc("10.0.0.1", phase="Bound", since=OLD),
        pod("u1", phase="Pending"),
        [("release", "u1")],
        "Bound allocation of a pod that is not bound",
    ),
    (alloc("10.0.0.1", phase="Bound", since=YOUNG), pod("u1", phase="Pending"), [], None),
    (
        alloc("10.0.0.1", phase="Bound", since=OLD),
        pod("u1", node="node-a", annotations=ours(), deleting=True),
        [],
        None,
    ),
]


@pytest.mark.parametrize(
    ("allocation", "the_pod", "expected", "reason"),
    SINGLE,
    ids=[
        "bound-pod-missing",
        "reserved-pod-missing",
        "bound-pod-succeeded",
        "bound-pod-failed",
        "reserved-pod-failed-unbound",
        "reserved-pending-abandoned-released",
        "reserved-pending-young-kept",
        "reserved-pending-since-in-future-kept",
        "reserved-elsewhere-since-in-future-kept",
        "reserved-bound-here-young-mark-bound",
        "reserved-bound-here-old-mark-bound",
        "reserved-bound-elsewhere-old-release",
        "reserved-bound-elsewhere-young-kept",
        "reserved-bound-elsewhere-exactly-ttl-kept",
        "reserved-bound-elsewhere-just-over-ttl-release",
        "reserved-bound-here-no-annotation-old-release",
        "reserved-bound-here-other-pool-annotation-old-release",
        "reserved-bound-here-other-pool-annotation-young-kept",
        "bound-live-here-untouched",
        "bound-live-elsewhere-untouched",
        "bound-but-pod-unbound-released",
        "bound-but-pod-unbound-young-kept",
        "bound-deleting-pod-untouched",
    ],
)
def test_plan_single_allocation(
    allocation: dict[str, Any],
    the_pod: PodInfo | None,
    expected: list[tuple[str, str]],
    reason: str | None,
) -> None:
    p = pool(addresses=ADDRS, allocations={"u1": allocation})
    pods = {} if the_pod is None else {the_pod.uid: the_pod}
    out = plan([p], pods, NOW, TTL)
    assert [(r.action, r.uid) for r in out] == expected
    for r in out:
        assert r.pool == "pool-a"
        assert r.pod == "ns/p"
        assert r.ip == "10.0.0.1"
    if reason is not None:
        assert reason in out[0].reason


def test_plan_reserved_ttl_parameter_is_used() -> None:
    p = pool(addresses=ADDRS, allocations={"u1": alloc("10.0.0.1", since=ago(30))})
    pods = {"u1": pod("u1", node="node-b")}
    assert plan([p], pods, NOW, reserved_ttl=60.0) == []
    assert [r.action for r in plan([p], pods, NOW, reserved_ttl=10.0)] == ["release"]


@pytest.mark.parametrize(
    ("age_s", "count_only"),
    [
        pytest.param(TTL + 1, False, id="just-over-the-ttl"),
        pytest.param(300, False, id="the-bound-mark-delay"),
        pytest.param(86_400, False, id="a-day"),
        pytest.param(86_400, True, id="a-day-count-only-slot"),
    ],
)
def test_a_reserved_allocation_whose_pod_is_bound_with_it_is_never_released_whatever_its_age(
    age_s: float, count_only: bool
) -> None:
    """PostBind's Bound mark waits for the pool's next write, or --bound-mark-delay (5 min)
    for the GC sweep: the allocation stays Reserved meanwhile, well past --reserved-ttl. The
    TTL never releases it: it is marked Bound instead."""
    allocation = alloc(None if count_only else "10.0.0.1", phase="Reserved", since=ago(age_s))
    p = pool(
        addresses=None if count_only else ADDRS,
        capacity=3 if count_only else None,
        allocations={"u1": allocation},
    )
    annotations = {} if count_only else ours()
    pods = {"u1": pod("u1", node="node-a", annotations=annotations)}
    assert [(r.action, r.uid) for r in plan([p], pods, NOW, TTL)] == [("mark_bound", "u1")]
    assert plan([p], pods, NOW, reserved_ttl=0.0)[0].action == "mark_bound"


def test_plan_count_only_release_has_no_ip() -> None:
    p = pool(capacity=3, allocations={"u1": alloc(None, phase="Bound")})
    assert summary(plan([p], {}, NOW, TTL)) == [("release", "pool-a", "u1", "ns/p", None)]


@pytest.mark.parametrize(
    ("annotations", "node", "expected"),
    [
        ({}, "node-a", [("mark_bound", "u1")]),
        ({ANNOTATION_POOL: ""}, "node-a", [("mark_bound", "u1")]),
        ({ANNOTATION_POOL: "pool-a"}, "node-a", [("mark_bound", "u1")]),
        ({ANNOTATION_POOL: "pool-b"}, "node-a", [("release", "u1")]),
        ({}, "node-b", [("release", "u1")]),
    ],
    ids=[
        "no-annotation-mark-bound",
        "blanked-annotation-mark-bound",
        "pool-annotation-of-older-releases-mark-bound",
        "annotated-with-another-pool-release",
        "bound-to-another-node-release",
    ],
)
def test_plan_count_only_slot_is_bound_without_annotations(
    annotations: dict[str, str], node: str, expected: list[tuple[str, str]]
) -> None:
    """A count-only slot's Binding writes no annotation: a pod bound to the pool's node
    without ``ipscheduler.io/pool`` is bound with the slot (marked Bound, never released)."""
    p = pool(capacity=3, allocations={"u1": alloc(None, phase="Reserved", since=OLD)})
    pods = {"u1": pod("u1", node=node, annotations=annotations)}
    assert [(r.action, r.uid) for r in plan([p], pods, NOW, TTL)] == expected


def test_plan_clean_state_is_empty() -> None:
    pools = [
        pool(
            addresses=ADDRS,
            allocations={
                "u1": alloc("10.0.0.1", pod="ns/a", phase="Bound"),
                "u2": alloc("10.0.0.2", pod="ns/b", phase="Reserved", since=YOUNG),
            },
        ),
        pool("pool-c", capacity=2, allocations={"u3": alloc(None, pod="ns/c", phase="Bound")}),
    ]
    pods = {
        "u1": pod("u1", name="a", node="node-a", annotations=ours("pool-a", "10.0.0.1")),
        "u2": pod("u2", name="b", phase="Pending"),
        "u3": pod("u3", name="c", node="node-a", annotations=ours("pool-c", None)),
        "u4": pod("u4", name="d", phase="Pending"),
    }
    assert plan(pools, pods, NOW, TTL) == []


# --------------------------------------------------------------------------- adopt

ADOPT = [
    (pod("u9", name="x", node="node-a", annotations=ours("pool-a", "10.0.0.5")), [("pool-a", "10.0.0.5")]),
    (pod("u9", name="x", node="node-a", annotations=ours("pool-c", None)), [("pool-c", None)]),
    (
        pod("u9", name="x", node="node-a", phase="Pending", annotations=ours("pool-a", "10.0.0.5")),
        [("pool-a", "10.0.0.5")],
    ),
    (pod("u9", name="x", node="node-a", phase="Succeeded", annotations=ours("pool-a", "10.0.0.5")), []),
    (pod("u9", name="x", node="node-a", phase="Failed", annotations=ours("pool-a", "10.0.0.5")), []),
    (pod("u9", name="x", node="node-a", annotations=ours("pool-a", "10.0.0.5"), deleting=True), []),
    (pod("u9", name="x", phase="Pending", annotations=ours("pool-a", "10.0.0.5")), []),
    (pod("u9", name="x", node="node-a", annotations={ANNOTATION_IP: "10.0.0.5"}), []),
    (pod("u9", name="x", node="node-a", annotations={ANNOTATION_POOL: ""}), []),
    (pod("u9", name="x", node="node-a"), []),
]


@pytest.mark.parametrize(
    ("the_pod", "expected"),
    ADOPT,
    ids=[
        "bound-live-with-ip",
        "bound-live-count-only-no-ip",
        "bound-but-phase-pending",
        "succeeded",
        "failed",
        "deleting",
        "unbound",
        "ip-annotation-only",
        "empty-pool-annotation",
        "no-annotations",
    ],
)
def test_plan_adopt(the_pod: PodInfo, expected: list[tuple[str, str | None]]) -> None:
    pools = [
        pool(addresses=ADDRS, allocations={"u1": alloc("10.0.0.1", pod="ns/a", phase="Bound")}),
        pool("pool-c", capacity=2),
    ]
    pods = {
        "u1": pod("u1", name="a", node="node-a", annotations=ours("pool-a", "10.0.0.1")),
        the_pod.uid: the_pod,
    }
    out = plan(pools, pods, NOW, TTL)
    assert [(r.action, r.pool, r.uid, r.pod, r.ip) for r in out] == [
        ("adopt", pool_name, "u9", "ns/x", ip) for pool_name, ip in expected
    ]
    for r in out:
        assert "no allocation" in r.reason


def test_plan_no_adopt_when_allocation_is_in_another_pool() -> None:
    """Held anywhere counts: an allocation in pool-b means no adopt into the annotated pool-a."""
    pools = [
        pool(addresses=ADDRS),
        pool(
            "pool-b",
            addresses=["10.0.1.0/28"],
            allocations={"u9": alloc("10.0.1.1", pod="ns/x", phase="Bound")},
        ),
    ]
    pods = {"u9": pod("u9", name="x", node="node-a", annotations=ours("pool-a", "10.0.0.5"))}
    assert plan(pools, pods, NOW, TTL) == []


def test_plan_no_adopt_for_pod_whose_allocation_is_released() -> None:
    """A terminal pod gets its allocation released and is never adopted back."""
    pools = [pool(addresses=ADDRS, allocations={"u1": alloc("10.0.0.1", phase="Bound")})]
    pods = {"u1": pod("u1", node="node-a", phase="Succeeded", annotations=ours())}
    assert [r.action for r in plan(pools, pods, NOW, TTL)] == ["release"]


def test_plan_accepts_any_iterable_of_pools() -> None:
    pools = [pool(addresses=ADDRS, allocations={"u1": alloc("10.0.0.1", phase="Bound")})]
    pods = {"u2": pod("u2", name="x", node="node-a", annotations=ours("pool-a", "10.0.0.2"))}
    out = plan(iter(pools), pods, NOW, TTL)
    assert [(r.action, r.uid) for r in out] == [("release", "u1"), ("adopt", "u2")]


# --------------------------------------------------------------------------- key by UID, never by name


def _name_reuse_cases() -> list[tuple[dict[str, Any], dict[str, PodInfo], list[tuple[str, str]]]]:
    old_bound = alloc("10.0.0.1", pod="ns/web", phase="Bound")
    return [
        # new pod pending with its own reservation: only the old UID goes
        (
            {"u-old": old_bound, "u-new": alloc("10.0.0.2", pod="ns/web", since=YOUNG)},
            {"u-new": pod("u-new", name="web", phase="Pending")},
            [("release", "u-old")],
        ),
        # new pod bound here with its reservation: old released, new marked bound
        (
            {"u-old": old_bound, "u-new": alloc("10.0.0.2", pod="ns/web", since=YOUNG)},
            {"u-new": pod("u-new", name="web", node="node-a", annotations=ours("pool-a", "10.0.0.2"))},
            [("release", "u-old"), ("mark_bound", "u-new")],
        ),
        # new pod already Bound: old released, new untouched
        (
            {"u-old": old_bound, "u-new": alloc("10.0.0.2", pod="ns/web", phase="Bound")},
            {"u-new": pod("u-new", name="web", node="node-a", annotations=ours("pool-a", "10.0.0.2"))},
            [("release", "u-old")],
        ),
        # old pod still visible as Succeeded under the same name
        (
            {"u-old": old_bound, "u-new": alloc("10.0.0.2", pod="ns/web", phase="Bound")},
            {
                "u-old": pod("u-old", name="web", node="node-a", phase="Succeeded", annotations=ours()),
                "u-new": pod("u-new", name="web", node="node-a", annotations=ours("pool-a", "10.0.0.2")),
            },
            [("release", "u-old")],
        ),
        # new pod bound with the old pod's address but its allocation lost: release old, then adopt new
        (
            {"u-old": old_bound},
            {"u-new": pod("u-new", name="web", node="node-a", annotations=ours("pool-a", "10.0.0.1"))},
            [("release", "u-old"), ("adopt", "u-new")],
        ),
        # new pod on another node (Reserved, young) keeps its reservation
        (
            {"u-old": old_bound, "u-new": alloc("10.0.0.2", pod="ns/web", since=YOUNG)},
            {"u-new": pod("u-new", name="web", node="node-b")},
            [("release", "u-old")],
        ),
    ]


@pytest.mark.parametrize(
    ("allocations", "pods", "expected"),
    _name_reuse_cases(),
    ids=[
        "new-pending-reserved",
        "new-bound-reserved",
        "new-bound-bound",
        "old-succeeded-still-listed",
        "new-adopted-after-old-release",
        "new-reserved-young-elsewhere",
    ],
)
def test_plan_name_reuse_keys_by_uid(
    allocations: dict[str, Any], pods: dict[str, PodInfo], expected: list[tuple[str, str]]
) -> None:
    out = plan([pool(addresses=ADDRS, allocations=allocations)], pods, NOW, TTL)
    assert [(r.action, r.uid) for r in out] == expected
    assert not [r for r in out if r.action == "release" and r.uid == "u-new"]
    released = [r for r in out if r.action == "release"]
    assert [(r.uid, r.ip) for r in released] == [("u-old", "10.0.0.1")]


def test_plan_naive_since_does_not_crash() -> None:
    p = pool(addresses=ADDRS, allocations={"u1": alloc("10.0.0.1", since="2024-01-01T00:00:00")})
    out = plan([p], {"u1": pod("u1", node="node-b")}, NOW, TTL)
    assert [(r.action, r.uid) for r in out] == [("release", "u1")]


def test_a_since_in_the_future_ages_from_when_it_was_first_seen() -> None:
    """A replica whose clock runs an hour ahead stamped the reservation: it must not be kept
    for an hour plus the TTL, but for the TTL from when this process first saw it."""
    p = pool(addresses=ADDRS, allocations={"u1": alloc("10.0.0.1", since=ago(-3600))})
    pods = {"u1": pod("u1", phase="Pending")}
    clock = SkewClock()
    clock.observe([p], NOW)
    assert plan([p], pods, NOW, TTL, clock.first_seen) == []
    later = NOW + datetime.timedelta(seconds=TTL + 1)
    clock.observe([p], later)
    assert [(r.action, r.uid) for r in plan([p], pods, later, TTL, clock.first_seen)] == [("release", "u1")]
    assert plan([p], pods, later, TTL) == [], "without the clock it would wait for the skew too"
    clock.observe([pool(addresses=ADDRS)], later)
    assert clock.first_seen == {}, "forgotten once released"


# --------------------------------------------------------------------------- retained addresses


def sticky(phase: str = "Bound", policy: str = "StatefulSet", identity: str = "ns/web-1") -> dict[str, Any]:
    a = builders.alloc("10.0.0.5", pod=identity, phase=phase, since=ago(300))
    a.update(releasePolicy=policy, identity=identity, ownerUID="uid-sts")
    if phase == "Retained":
        a["retainedSince"] = ago(120)
    return a


LIVE = StatefulSetFacts("uid-sts", replicas=3)


@pytest.mark.parametrize(
    ("allocation", "pods", "statefulsets", "expected"),
    [
        (sticky(), {}, None, [("retain", "pod no longer exists")]),
        (
            sticky(),
            {"u1": pod("u1", node="node-a", phase="Succeeded")},
            None,
            [("retain", "pod is Succeeded")],
        ),
        (sticky("Retained"), {}, None, []),
        (sticky("Retained"), {}, {("ns", "web"): LIVE}, []),
        (
            sticky("Retained"),
            {},
            {("ns", "web"): None},
            [("release", "its StatefulSet ns/web no longer exists")],
        ),
        (
            sticky("Retained"),
            {},
            {("ns", "web"): StatefulSetFacts("uid-sts", 1)},
            [("release", "StatefulSet ns/web no longer wants ordinal 1 (replicas 1, ordinals from 0)")],
        ),
        (sticky("Retained", policy="Never", identity="ns/db"), {}, {}, []),
        (sticky(policy="Pod"), {}, None, [("release", "pod no longer exists")]),
    ],
    ids=[
        "sticky-pod-gone-retains",
        "sticky-pod-ended-retains",
        "retained-statefulset-unknown-kept",
        "retained-statefulset-wants-it",
        "retained-statefulset-deleted",
        "retained-statefulset-scaled-down",
        "retained-never-kept",
        "pod-policy-released",
    ],
)
def test_plan_for_addresses_kept_for_an_identity(
    allocation: dict[str, Any],
    pods: dict[str, PodInfo],
    statefulsets: dict[tuple[str, str], StatefulSetFacts | None] | None,
    expected: list[tuple[str, str]],
) -> None:
    pools = [pool("pool-a", "node-a", addresses=ADDRS, allocations={"u1": allocation})]
    repairs = plan(pools, pods, NOW, statefulsets=statefulsets)
    assert [(r.action, r.reason) for r in repairs] == expected
    assert retained_statefulsets(pools) == (
        {("ns", "web")}
        if allocation["phase"] == "Retained" and allocation["releasePolicy"] == "StatefulSet"
        else set()
    )


# --------------------------------------------------------------------------- preemption's hold
def nominee(node: str | None = None, nominated: str = "node-a", phase: str = "Pending") -> PodInfo:
    p = pod("hi", name="hi", node=node, phase=phase)
    return dataclasses.replace(p, nominated_node_name=nominated)


@pytest.mark.parametrize(
    ("since", "the_pod", "want"),
    [
        pytest.param(YOUNG, nominee(), None, id="held while the victims terminate"),
        pytest.param(ago(120), nominee(), None, id="kept past reserved-ttl while nominated here"),
        pytest.param(YOUNG, None, "pod no longer exists", id="pod gone"),
        pytest.param(YOUNG, nominee(phase="Failed"), "pod is Failed", id="pod ended"),
        pytest.param(
            YOUNG, nominee(node="node-b"), "pod is bound to node-b: its nomination is over", id="pod bound"
        ),
        pytest.param(
            ago(120),
            nominee(nominated="node-b"),
            "pod is no longer nominated to node-a but to node-b",
            id="nominated elsewhere",
        ),
        pytest.param(YOUNG, nominee(nominated=""), None, id="a nomination not yet seen is not judged early"),
        pytest.param(ago(400), nominee(), "Nominated for more than 300s", id="the hold times out"),
    ],
)
def test_plan_a_nominated_place(since: str, the_pod: PodInfo | None, want: str | None) -> None:
    held = pool(
        addresses=ADDRS, allocations={"hi": builders.alloc(None, pod="ns/hi", phase="Nominated", since=since)}
    )
    repairs = plan([held], {"hi": the_pod} if the_pod else {}, NOW, reserved_ttl=TTL)
    assert [r.reason for r in repairs] == ([want] if want else [])
    assert all(r.action == "release" for r in repairs)


# --------------------------------------------------------------------------- Releasing

READY_NODE = {"node-a": NodeState(True, NOW - datetime.timedelta(hours=1))}


def releasing(since: str, ip: str | None = "10.0.0.1", **extra: Any) -> dict[str, Any]:
    return {**alloc(ip, phase="Releasing"), "releasingSince": since, **extra}


# (allocation, pod or None, nodes, expected actions, reason substring or None)
TEARDOWN = [
    (alloc("10.0.0.1", phase="Bound"), None, READY_NODE, [("await_teardown", "u1")], "no longer exists"),
    (alloc("10.0.0.1", phase="Reserved"), None, READY_NODE, [("await_teardown", "u1")], "no longer exists"),
    (
        {**alloc("10.0.0.1", phase="Bound"), "releasePolicy": "StatefulSet", "identity": "ns/web-0"},
        None,
        READY_NODE,
        [("await_teardown", "u1")],
        "no longer exists",
    ),
    (alloc(None, phase="Bound"), None, READY_NODE, [("release", "u1")], "no longer exists"),
    (
        alloc("10.0.0.1", phase="Bound"),
        pod("u1", node="node-a", phase="Failed"),
        READY_NODE,
        [("release", "u1")],
        "Failed",
    ),
    (alloc("10.0.0.1", phase="Bound"), None, {}, [("release", "u1")], "no longer exists"),
    (
        alloc("10.0.0.1", phase="Bound"),
        None,
        {"node-a": NodeState(True, simulated=True)},
        [("release", "u1")],
        "no longer exists",
    ),
    (releasing(ago(30)), None, READY_NODE, [("settle", "u1")], "Ready for 15s"),
    (releasing(ago(5)), None, READY_NODE, [], None),
    (releasing(ago(3600)), None, {"node-a": NodeState(False)}, [], None),
    (releasing(ago(3600)), None, {"node-a": NodeState(True, NOW - datetime.timedelta(seconds=5))}, [], None),
    (
        releasing(ago(3600)),
        None,
        {"node-a": NodeState(True, NOW - datetime.timedelta(seconds=20))},
        [("settle", "u1")],
        "Ready",
    ),
    (releasing(ago(5)), None, {}, [("settle", "u1")], "no longer exists"),
    (releasing(ago(5)), None, {"node-a": NodeState(False, simulated=True)}, [("settle", "u1")], "simulated"),
]


@pytest.mark.parametrize(
    ("a", "p", "nodes", "expected", "why"),
    TEARDOWN,
    ids=[
        "bound-pod-gone:-waits-for-its-node",
        "reserved-pod-gone:-waits-for-its-node",
        "sticky-pod-gone:-waits-for-its-node-before-it-is-retained",
        "count-only-slot:-released-at-once",
        "kubelet-reported-it-terminal:-released-at-once",
        "node-deleted:-released-at-once",
        "kwok-node:-released-at-once",
        "releasing-past-the-delay:-settled",
        "releasing-within-the-delay:-kept",
        "node-not-ready:-kept-however-long",
        "node-ready-again-within-the-delay:-kept",
        "node-ready-again-past-the-delay:-settled",
        "node-deleted-meanwhile:-settled",
        "kwok-node-even-not-ready:-settled",
    ],
)
def test_a_gone_pods_address_waits_for_its_node(
    a: dict[str, Any],
    p: PodInfo | None,
    nodes: dict[str, NodeState],
    expected: list[tuple[str, str]],
    why: str | None,
) -> None:
    pools = [pool(addresses=ADDRS, allocations={"u1": a})]
    pods = {p.uid: p} if p is not None else {}
    out = plan(pools, pods, NOW, TTL, nodes=nodes, release_delay=15.0)
    assert [(r.action, r.uid) for r in out] == expected
    if why is not None:
        assert why in out[0].reason, out[0].reason


def test_without_node_facts_every_node_lets_go_at_once() -> None:
    """``nodes`` None (no node informer, as in the tests of the other rules): a gone pod's
    address is released at once and a Releasing one settles."""
    pools = [
        pool(addresses=ADDRS, allocations={"u1": alloc("10.0.0.1", phase="Bound"), "u2": releasing(YOUNG)})
    ]
    assert [(r.action, r.uid) for r in plan(pools, {}, NOW, TTL)] == [("release", "u1"), ("settle", "u2")]


# --------------------------------------------------------------------------- further interfaces

RDMA_ENTRY = '{"net1":{"pool":"rdma","ips":["10.1.0.1"]}}'


def multi_homed(entries: str | None, node: str | None = "node-a", first: str = "pool-a") -> PodInfo:
    """Pod u1 bound to ``node`` with 10.0.0.1 of ``first`` and ``ipscheduler.io/interfaces``
    ``entries`` (None: absent)."""
    annotations = {**ours(first), **({"ipscheduler.io/interfaces": entries} if entries is not None else {})}
    return pod("u1", node=node, annotations=annotations)


@pytest.mark.parametrize(
    ("subject", "bound"),
    [
        pytest.param(multi_homed(RDMA_ENTRY), True, id="named-by-an-interfaces-entry"),
        pytest.param(multi_homed(None, first="rdma"), True, id="named-by-its-pool-annotation"),
        pytest.param(multi_homed('{"net1":{"pool":"rdma-b","ips":["10.1.0.1"]}}'), False, id="another-pool"),
        pytest.param(multi_homed(None), False, id="not-named"),
        pytest.param(multi_homed('{"net1":"rdma"}'), False, id="an-entry-that-cannot-be-read"),
        pytest.param(multi_homed("rdma"), False, id="not-json"),
        pytest.param(multi_homed(RDMA_ENTRY, node="node-b"), False, id="bound-to-another-node"),
        pytest.param(multi_homed(RDMA_ENTRY, node=None), False, id="not-bound"),
    ],
)
def test_a_pod_is_bound_with_the_pools_of_its_further_interfaces(subject: PodInfo, bound: bool) -> None:
    assert bound_with(subject, pool("rdma", addresses=["10.1.0.0/28"])) is bound


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        pytest.param(
            RDMA_ENTRY, [("mark_bound", "u1", "pod is bound with this address")], id="bound-with-it"
        ),
        pytest.param(
            '{"net1":{"pool":"rdma-b","ips":["10.1.0.1"]}}',
            [("release", "u1", "Reserved for more than 60s but pod is bound to node-a")],
            id="bound-with-another",
        ),
    ],
)
def test_plan_marks_bound_a_further_interfaces_reservation_the_pod_is_bound_with(
    entries: str, expected: list[tuple[str, str, str]]
) -> None:
    """A Reserved allocation of net1, older than the TTL: its pod's interfaces entry decides."""
    rdma = pool(
        "rdma", addresses=["10.1.0.0/28"], allocations={"u1": {**alloc("10.1.0.1"), "interface": "net1"}}
    )
    pods = {"u1": multi_homed(entries)}
    got = [(r.action, r.uid, r.reason) for r in plan([rdma], pods, NOW, TTL) if r.pool == "rdma"]
    assert got == expected  # (its first interface's pool, not listed here, is adopted: another test)


def test_plan_adopts_the_first_interfaces_address_of_a_pod_holding_only_a_further_ones() -> None:
    """A status edit removed ns/p's allocation in pool-a; its net1 allocation in rdma is still there."""
    rdma = pool(
        "rdma",
        addresses=["10.1.0.0/28"],
        allocations={"u1": {**alloc("10.1.0.1", phase="Bound"), "interface": "net1"}},
    )
    got = plan([pool(addresses=ADDRS, allocations={}), rdma], {"u1": multi_homed(RDMA_ENTRY)}, NOW, TTL)
    assert [(r.action, r.pool, r.uid, r.ip) for r in got] == [("adopt", "pool-a", "u1", "10.0.0.1")]


BAD_IPS = "annotation ipscheduler.io/interfaces entry 'net1': ips must be a non-empty list of addresses"

NET = {"ips": [{"address": "10.1.0.1/28"}]}
"""net1's network, as its entry carries it."""

FIRST_HELD = {"u1": alloc("10.0.0.1", phase="Bound")}
"""pool-a records u1's first interface: only its further ones may be adopted."""


Adopt = tuple[str, str | None, str | None, tuple[str, ...], str]


def adopts(repairs: list[Repair]) -> list[Adopt]:
    """``(pool, interface, ip, more, problem)`` of each adopt."""
    return [(r.pool, r.interface, r.ip, r.more, r.problem) for r in repairs if r.action == "adopt"]


@pytest.mark.parametrize(
    ("entries", "rdma_allocations", "expected"),
    [
        pytest.param(
            '{"net1":{"pool":"rdma","ips":["10.1.0.1"]}}',
            {},
            [("rdma", "net1", "10.1.0.1", (), "")],
            id="one",
        ),
        pytest.param(
            '{"net1":{"pool":"rdma","ips":["10.1.0.1","fd00::1"]}}',
            {},
            [("rdma", "net1", "10.1.0.1", ("fd00::1",), "")],
            id="dual-stack",
        ),
        pytest.param(
            '{"net1":{"pool":"rdma","ips":["10.1.0.1"]},"net2":{"pool":"storage","ips":["10.2.0.1"]}}',
            {},
            [("rdma", "net1", "10.1.0.1", (), ""), ("storage", "net2", "10.2.0.1", (), "")],
            id="two-interfaces",
        ),
        pytest.param(
            '{"net1":{"pool":"rdma","ips":["10.1.0.1"]},"net2":{"pool":"storage","ips":["10.2.0.1"]}}',
            {"u1": {**alloc("10.1.0.1", phase="Bound"), "interface": "net1"}},
            [("storage", "net2", "10.2.0.1", (), "")],
            id="one-of-two-recorded",
        ),
        pytest.param(
            '{"net1":{"pool":"rdma","ips":["10.1.0.1"]}}',
            {"u1": {**alloc("10.1.0.5", phase="Bound"), "interface": "net1"}},
            [],
            id="recorded-with-other-addresses",  # ipscheduler check says so; not adopted twice
        ),
        pytest.param(
            '{"net1":{"pool":"rdma","ips":["10.1.0.1"]}}',
            {"u1": {**alloc("10.1.0.1", phase="Bound"), "interface": "net2"}},
            [("rdma", "net1", "10.1.0.1", (), "")],
            id="pool-holds-another-interface",  # allocator.adopt's AdoptConflict
        ),
        pytest.param(
            '{"net1":{"pool":"rdma","ips":["10.1.0.1"]}}',
            {"u1": alloc("10.1.0.1", phase="Bound")},
            [("rdma", "net1", "10.1.0.1", (), "")],
            id="pool-holds-the-first-interface",
        ),
        pytest.param(
            '{"net1":{"pool":"gone","ips":["10.9.0.1"]}}',
            {},
            [("gone", "net1", "10.9.0.1", (), "")],
            id="pool-missing",  # reported as the first interface's is: the adopt says so
        ),
        pytest.param(
            '{"net1":"rdma"}',
            {},
            [("", "net1", None, (), "annotation ipscheduler.io/interfaces entry 'net1' is not an object")],
            id="entry-not-an-object",
        ),
        pytest.param(
            '{"net1":{"ips":["10.1.0.1"]}}',
            {},
            [("", "net1", None, (), "annotation ipscheduler.io/interfaces entry 'net1' names no pool")],
            id="entry-without-pool",
        ),
        pytest.param(
            '{"net1":{"pool":"rdma","ips":"10.1.0.1"}}',
            {},
            [
                (
                    "rdma",
                    "net1",
                    None,
                    (),
                    BAD_IPS,
                )
            ],
            id="ips-not-a-list",
        ),
        pytest.param(
            '{"net1":{"pool":"rdma","ips":[]}}',
            {},
            [
                (
                    "rdma",
                    "net1",
                    None,
                    (),
                    BAD_IPS,
                )
            ],
            id="no-ips",
        ),
        pytest.param(
            '{"net1":{"pool":"rdma","ips":["not-an-ip"]}}',
            {},
            [("rdma", "net1", "not-an-ip", (), "")],
            id="ip-not-an-address",  # allocator.adopt's AdoptConflict, as for the first interface
        ),
        pytest.param(
            '{"net1":{"pool":"rdma","ips":["10.1.0.1"]},"net2":"x"}',
            {"u1": {**alloc("10.1.0.1", phase="Bound"), "interface": "net1"}},
            [("", "net2", None, (), "annotation ipscheduler.io/interfaces entry 'net2' is not an object")],
            id="a-bad-entry-beside-a-recorded-one",
        ),
        pytest.param(
            '{"a b":{"pool":"rdma","ips":["10.1.0.1"]}}',
            {},
            [
                (
                    "",
                    "",
                    None,
                    (),
                    "annotation ipscheduler.io/interfaces entry 'a b': not a further interface's name",
                )
            ],
            id="not-an-interface-name",
        ),
        pytest.param(
            '{"eth0":{"pool":"rdma","ips":["10.1.0.1"]}}',
            {},
            [
                (
                    "",
                    "",
                    None,
                    (),
                    "annotation ipscheduler.io/interfaces entry 'eth0': not a further interface's name",
                )
            ],
            id="the-first-interfaces-name",
        ),
        pytest.param(
            "net1",
            {},
            [
                (
                    "",
                    "",
                    None,
                    (),
                    "annotation ipscheduler.io/interfaces is not JSON: "
                    "Expecting value: line 1 column 1 (char 0)",
                )
            ],
            id="not-json",
        ),
        pytest.param(
            "[]",
            {},
            [
                (
                    "",
                    "",
                    None,
                    (),
                    "annotation ipscheduler.io/interfaces is not a JSON object (interface → entry)",
                )
            ],
            id="not-an-object",
        ),
        pytest.param(
            "[]",
            {"u1": {**alloc("10.1.0.1", phase="Bound"), "interface": "net1"}},
            [],
            id="not-an-object-but-an-interface-recorded",
        ),
        pytest.param("{}", {}, [], id="no-entries"),
    ],
)
def test_plan_adopts_each_further_interface_no_pool_records(
    entries: str,
    rdma_allocations: dict[str, Any],
    expected: list[tuple[str, str | None, str | None, tuple[str, ...], str]],
) -> None:
    """Pod u1, bound to node-a, its first interface recorded in pool-a; the further
    interfaces of its ``ipscheduler.io/interfaces`` ``entries`` are adopted where no pool
    records them, each in its entry's pool with its addresses; an entry that cannot be read
    is an adopt with its problem (the reconciler records nothing and says why)."""
    pools = [
        pool(addresses=ADDRS, allocations=FIRST_HELD),
        pool("rdma", addresses=["10.1.0.0/28"], allocations=rdma_allocations),
        pool("storage", addresses=["10.2.0.0/28"]),
    ]
    got = plan(pools, {"u1": multi_homed(entries)}, NOW, TTL)
    assert adopts(got) == expected
    for r in got:
        assert (r.uid, r.pod, r.node, r.subject) == ("u1", "ns/p", "node-a", multi_homed(entries))
        assert "no allocation for interface" in r.reason


@pytest.mark.parametrize(
    ("subject", "adopted"),
    [
        pytest.param(pod("u1", node="node-a", phase="Succeeded"), False, id="ended"),
        pytest.param(pod("u1", node="node-a", deleting=True), False, id="deleting"),
        pytest.param(pod("u1"), False, id="not-bound"),
        pytest.param(pod("u1", node="node-a"), True, id="bound"),
    ],
)
def test_plan_adopts_further_interfaces_of_bound_live_pods_only(subject: PodInfo, adopted: bool) -> None:
    entries = json_entries({"net1": {"pool": "rdma", "ips": ["10.1.0.1"], "network": NET}})
    subject = dataclasses.replace(subject, annotations={**ours(), "ipscheduler.io/interfaces": entries})
    pools = [pool(addresses=ADDRS, allocations=FIRST_HELD), pool("rdma", addresses=["10.1.0.0/28"])]
    got = [r for r in plan(pools, {"u1": subject}, NOW, TTL) if r.action == "adopt"]
    assert [(r.pool, r.interface) for r in got] == ([("rdma", "net1")] if adopted else [])
    if adopted:
        assert got[0].network == '{"ips":[{"address":"10.1.0.1/28"}]}'


def test_plan_adopts_the_first_interface_and_the_further_ones_of_a_pod_no_pool_records() -> None:
    """A pod restored bound: no pool records it at all."""
    pools = [pool(addresses=ADDRS), pool("rdma", addresses=["10.1.0.0/28"])]
    got = plan(pools, {"u1": multi_homed(RDMA_ENTRY)}, NOW, TTL)
    assert adopts(got) == [("pool-a", None, "10.0.0.1", (), ""), ("rdma", "net1", "10.1.0.1", (), "")]


def json_entries(entries: dict[str, Any]) -> str:
    return json.dumps(entries, separators=(",", ":"))
