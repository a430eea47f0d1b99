"""underlayip/selection: the pools a pod names and the namespaces a pool serves."""

from __future__ import annotations

from typing import Any

import pytest

from ipscheduler.framework.types import PodInfo
from ipscheduler.underlayip.families import FamilyNeed, family_need
from ipscheduler.underlayip.selection import (
    ANY,
    NamespaceDefaults,
    PoolChoice,
    is_ours,
    may_use,
    namespace_default_pools,
    namespace_defaults,
    pool_choice,
    tenancy_problem,
)
from tests.builders import pod_info, pool


@pytest.mark.parametrize(
    ("annotation", "names"),
    [
        (None, ()),
        ("a", ("a",)),
        (" b , a ", ("b", "a")),
        ("a,b,a", ("a", "b")),
        ("pool-1.zone-a", ("pool-1.zone-a",)),
    ],
    ids=["none", "one", "trimmed-in-order", "repeated-once", "dotted-name"],
)
def test_the_pools_a_pod_names(annotation: str | None, names: tuple[str, ...]) -> None:
    annotations = {"ipscheduler.io/pools": annotation} if annotation is not None else {}
    choice = pool_choice(pod_info(annotations=annotations))
    assert choice == PoolChoice(names)


@pytest.mark.parametrize(
    "annotation",
    ["", "a,", "a, ,b", "Big", "a b", "-a"],
    ids=["empty", "trailing-comma", "blank", "upper-case", "space-inside", "leading-dash"],
)
def test_a_malformed_list_is_a_problem_never_any_pool(annotation: str) -> None:
    choice = pool_choice(pod_info(annotations={"ipscheduler.io/pools": annotation}))
    assert choice.problem and not choice.names and choice != ANY


@pytest.mark.parametrize(
    ("names", "namespaces", "pod_ns", "allowed"),
    [
        ((), None, "ns", True),
        (("pool-a",), None, "ns", True),
        (("other",), None, "ns", False),
        ((), ["team"], "ns", False),
        ((), ["team"], "team", True),
        (("pool-a",), ["team"], "ns", False),
    ],
    ids=[
        "anything",
        "named",
        "not-named",
        "reserved-for-another-namespace",
        "reserved-for-its-namespace",
        "named-but-reserved",
    ],
)
def test_may_use(names: tuple[str, ...], namespaces: list[str] | None, pod_ns: str, allowed: bool) -> None:
    assert may_use(pod_info(namespace=pod_ns), PoolChoice(names), pool(namespaces=namespaces)) is allowed


def test_rank_follows_the_pods_order() -> None:
    choice = PoolChoice(("b", "a"))
    assert (choice.rank("b"), choice.rank("a")) == (0, 1)
    assert ANY.rank("a") == 0


@pytest.mark.parametrize(
    ("pod_annotation", "namespace_default", "expected"),
    [
        (None, "a, b", PoolChoice(("a", "b"), source="namespace ns annotation ipscheduler.io/default-pools")),
        ("c", "a, b", PoolChoice(("c",))),
        (None, None, ANY),
    ],
    ids=["namespace-default", "the-pods-own-list-wins", "neither"],
)
def test_a_namespaces_default_pools_apply_to_pods_that_name_none(
    pod_annotation: str | None, namespace_default: str | None, expected: PoolChoice
) -> None:
    annotations = {"ipscheduler.io/pools": pod_annotation} if pod_annotation is not None else {}
    assert pool_choice(pod_info(annotations=annotations), namespace_default) == expected


def test_a_malformed_namespace_default_names_the_namespace() -> None:
    choice = pool_choice(pod_info(), "a,,b")
    assert choice.problem == (
        "namespace ns annotation ipscheduler.io/default-pools='a,,b': '' is not a NodeIPPool name "
        "(a comma-separated list of pool names)"
    )


@pytest.mark.parametrize(
    ("scheduler", "annotations", "ours"),
    [
        ("ip-scheduler", {}, True),
        (
            "default-scheduler",
            {"ipscheduler.io/pool": "p", "ipscheduler.io/ip": "10.0.0.1"},
            True,
        ),  # extender
        ("default-scheduler", {"ipscheduler.io/ip": ""}, True),  # a count-only slot's Binding
        ("default-scheduler", {}, False),
        ("other", {"example.com/x": "y"}, False),
    ],
    ids=["our-scheduler", "bound-through-the-extender", "slot", "kube-schedulers", "another"],
)
def test_is_ours(scheduler: str, annotations: dict[str, str], ours: bool) -> None:
    pod = pod_info("p", scheduler_name=scheduler, annotations=annotations)
    assert is_ours(pod, "ip-scheduler") is ours


@pytest.mark.parametrize(
    ("pod", "namespaces", "default", "scheduler", "problem"),
    [
        (
            pod_info(),
            None,
            None,
            "ip-scheduler",
            "spec.schedulerName is 'default-scheduler', not 'ip-scheduler'",
        ),
        (pod_info(scheduler_name="ip-scheduler"), None, None, "ip-scheduler", None),
        (pod_info(), None, None, None, None),
        (
            pod_info(namespace="tenant-b"),
            ["tenant-a", "shared"],
            None,
            None,
            "NodeIPPool pool-a is reserved for namespaces shared, tenant-a (spec.namespaces), not tenant-b",
        ),
        (pod_info(namespace="tenant-a"), ["tenant-a"], None, None, None),
        (
            pod_info(annotations={"ipscheduler.io/pools": "pool-b, pool-c"}),
            None,
            None,
            None,
            "annotation ipscheduler.io/pools=pool-b, pool-c does not name NodeIPPool pool-a",
        ),
        (pod_info(annotations={"ipscheduler.io/pools": "pool-b,pool-a"}), None, None, None, None),
        (
            pod_info(annotations={"ipscheduler.io/pools": "a,"}),
            None,
            None,
            None,
            "annotation ipscheduler.io/pools='a,': '' is not a NodeIPPool name "
            "(a comma-separated list of pool names)",
        ),
        (
            pod_info(),
            None,
            "pool-b",
            None,
            "namespace ns annotation ipscheduler.io/default-pools=pool-b does not name NodeIPPool pool-a",
        ),
        (pod_info(), None, "pool-a", None, None),
        (pod_info(annotations={"ipscheduler.io/pools": "pool-a"}), None, "pool-b", None, None),
        (
            pod_info(
                scheduler_name="ip-scheduler", namespace="tenant-b", annotations={"ipscheduler.io/pools": "x"}
            ),
            ["tenant-a"],
            None,
            "ip-scheduler",
            "NodeIPPool pool-a is reserved for namespaces tenant-a (spec.namespaces), not tenant-b",
        ),
    ],
    ids=[
        "another-scheduler",
        "our-scheduler",
        "scheduler-not-checked-in-extender-mode",
        "reserved-for-other-namespaces",
        "reserved-for-its-namespace",
        "pod-names-other-pools",
        "pod-names-the-pool",
        "malformed-annotation",
        "namespace-default-names-other-pools",
        "namespace-default-names-the-pool",
        "the-pods-own-annotation-wins-over-the-namespaces",
        "namespaces-checked-before-the-pods-annotation",
    ],
)
def test_tenancy_problem_names_the_first_rule_that_refuses(
    pod: PodInfo,
    namespaces: list[str] | None,
    default: str | None,
    scheduler: str | None,
    problem: str | None,
) -> None:
    assert tenancy_problem(pod, pool(namespaces=namespaces), default, scheduler) == problem


@pytest.mark.parametrize(
    ("body", "value"),
    [
        ({}, None),
        ({"metadata": {"annotations": {"ipscheduler.io/default-pools": "a,b"}}}, "a,b"),
        ({"metadata": {"annotations": {"ipscheduler.io/default-pools": 3}}}, None),
        ({"metadata": {"annotations": None}}, None),
    ],
    ids=["no-metadata", "set", "not-a-string", "null-annotations"],
)
def test_a_namespaces_default_pools_annotation(body: dict[str, Any], value: str | None) -> None:
    assert namespace_default_pools(body) == value


POLICY = "ipscheduler.io/ip-family-policy"
FAMILIES = "ipscheduler.io/ip-families"


@pytest.mark.parametrize(
    ("body", "defaults"),
    [
        pytest.param({}, None, id="no-metadata"),
        pytest.param({"metadata": {"annotations": None}}, None, id="null-annotations"),
        pytest.param({"metadata": {"annotations": ["a"]}}, None, id="annotations-not-a-map"),
        pytest.param({"metadata": {"annotations": {"example.com/x": "y"}}}, None, id="unrelated"),
        pytest.param(
            {"metadata": {"annotations": {"ipscheduler.io/default-pools": "a,b"}}},
            NamespaceDefaults("a,b"),
            id="pools-only",
        ),
        pytest.param(
            {"metadata": {"annotations": {FAMILIES: "IPv6", POLICY: "RequireDualStack"}}},
            NamespaceDefaults(None, ((POLICY, "RequireDualStack"), (FAMILIES, "IPv6"))),
            id="families-only-policy-first",
        ),
        pytest.param(
            {"metadata": {"annotations": {"ipscheduler.io/default-pools": "a", FAMILIES: "IPv4,IPv6"}}},
            NamespaceDefaults("a", ((FAMILIES, "IPv4,IPv6"),)),
            id="pools-and-one-family-key",
        ),
        pytest.param(
            {"metadata": {"annotations": {POLICY: "Bogus"}}},
            NamespaceDefaults(None, ((POLICY, "Bogus"),)),
            id="malformed-kept-for-family-need-to-refuse",
        ),
        pytest.param(
            {"metadata": {"annotations": {POLICY: 3, FAMILIES: None, "ipscheduler.io/default-pools": ["a"]}}},
            None,
            id="not-strings-ignored",
        ),
        pytest.param(
            {"metadata": {"annotations": {POLICY: 3, FAMILIES: "IPv6"}}},
            NamespaceDefaults(None, ((FAMILIES, "IPv6"),)),
            id="one-not-a-string",
        ),
    ],
)
def test_a_namespaces_defaults_for_its_pods(body: dict[str, Any], defaults: NamespaceDefaults | None) -> None:
    assert namespace_defaults(body) == defaults


def test_namespace_defaults_feed_family_need() -> None:
    body = {"metadata": {"annotations": {POLICY: "PreferDualStack", FAMILIES: "IPv6"}}}
    defaults = namespace_defaults(body)
    assert defaults is not None
    assert family_need({}, dict(defaults.families)) == FamilyNeed("PreferDualStack", ("IPv6", "IPv4"))
