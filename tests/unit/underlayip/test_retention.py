"""Release policies (underlayip/retention.py): which policy a pod gets, its identity, its
retain-timeout, and why an annotation is refused."""

from __future__ import annotations

from typing import Any

import pytest

from ipscheduler.framework.types import OwnerRef
from ipscheduler.underlayip.retention import (
    DEFAULT_RETAIN_TIMEOUT,
    Retention,
    retention_of,
    statefulset_ordinal,
    wants_ordinal,
)
from tests.builders import pod_info

STS = OwnerRef("StatefulSet", "web", "uid-sts")
RS = OwnerRef("ReplicaSet", "web-7d9f", "uid-rs")


def sts_pod(name: str = "web-1", **fields: Any) -> Any:
    """A pod as the StatefulSet controller makes it: a controller reference, a name
    ``<set>-<ordinal>``, generateName ``<set>-``, the pod-index label."""
    ordinal = name.rpartition("-")[2]
    labels = {"apps.kubernetes.io/pod-index": ordinal} if ordinal.isdigit() else {}
    fields.setdefault("labels", labels)
    return pod_info(name, owner=STS, generate_name="web-", **fields)


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        (pod_info("bare"), Retention("Pod")),
        (pod_info("web-7d9f-x2x", owner=RS, generate_name="web-7d9f-"), Retention("Pod")),
        (sts_pod(), Retention("StatefulSet", "ns/web-1", "uid-sts", 1)),
        (
            sts_pod(annotations={"ipscheduler.io/release-policy": "Pod"}),
            Retention("Pod", ordinal=1),
        ),
        (
            sts_pod(annotations={"ipscheduler.io/release-policy": "Never"}),
            Retention("Never", "ns/web-1", "", 1),
        ),
        (
            pod_info("db", annotations={"ipscheduler.io/release-policy": "Never"}),
            Retention("Never", "ns/db"),
        ),
        (
            sts_pod(labels={}),  # before Kubernetes 1.28: the ordinal from the name alone
            Retention("StatefulSet", "ns/web-1", "uid-sts", 1),
        ),
        (
            sts_pod(annotations={"ipscheduler.io/retain-timeout": "1m30s"}),
            Retention("StatefulSet", "ns/web-1", "uid-sts", 1, timeout=90.0),
        ),
        (
            sts_pod(annotations={"ipscheduler.io/retain-timeout": "0"}),
            Retention("StatefulSet", "ns/web-1", "uid-sts", 1, timeout=None),
        ),
    ],
    ids=[
        "bare-pod",
        "deployment-pod",
        "statefulset-pod",
        "statefulset-pod-asks-pod",
        "statefulset-pod-asks-never",
        "named-pod-asks-never",
        "statefulset-pod-without-index-label",
        "retain-timeout",
        "retain-timeout-zero-waits-forever",
    ],
)
def test_the_policy_of_a_pod(pod: Any, expected: Retention) -> None:
    assert retention_of(pod) == expected
    assert DEFAULT_RETAIN_TIMEOUT == 300.0


@pytest.mark.parametrize(
    ("pod", "policy", "problem"),
    [
        (
            pod_info(
                "web-7d9f-x2x",
                owner=RS,
                generate_name="web-7d9f-",
                annotations={"ipscheduler.io/release-policy": "Never"},
            ),
            "Pod",
            "ipscheduler.io/release-policy=Never needs a stable pod name, and this one was generated from "
            "'web-7d9f-'; using Pod",
        ),
        (
            pod_info("db", annotations={"ipscheduler.io/release-policy": "StatefulSet"}),
            "Pod",
            "ipscheduler.io/release-policy=StatefulSet: the pod is not a StatefulSet's (no controller "
            "StatefulSet, or a name without its ordinal); using Pod",
        ),
        (
            sts_pod(annotations={"ipscheduler.io/release-policy": "always"}),
            "StatefulSet",
            "ipscheduler.io/release-policy='always' is not one of Pod, StatefulSet, Never; using StatefulSet",
        ),
        (
            sts_pod(annotations={"ipscheduler.io/retain-timeout": "5 minutes"}),
            "StatefulSet",
            "ipscheduler.io/retain-timeout: invalid duration '5 minutes' (a number with a unit: 30s, 5m, "
            "1h30m); using 5m",
        ),
    ],
    ids=["never-on-a-generated-name", "statefulset-on-a-bare-pod", "unknown-policy", "bad-timeout"],
)
def test_an_annotation_that_cannot_be_honoured_falls_back_and_says_why(
    pod: Any, policy: str, problem: str
) -> None:
    got = retention_of(pod)
    assert (got.policy, got.problem) == (policy, problem)
    assert got.timeout == DEFAULT_RETAIN_TIMEOUT


@pytest.mark.parametrize(
    ("pod", "ordinal"),
    [
        (sts_pod("web-0"), 0),
        (sts_pod("web-12"), 12),
        (sts_pod("other-3"), None),
        (sts_pod("web-x"), None),
        (sts_pod("web-2", labels={"apps.kubernetes.io/pod-index": "3"}), None),
        (pod_info("web-2", owner=RS), None),
        (pod_info("web-2"), None),
    ],
    ids=[
        "zero",
        "two-digits",
        "another-sets-name",
        "no-number",
        "label-disagrees",
        "not-a-statefulset",
        "no-owner",
    ],
)
def test_statefulset_ordinal(pod: Any, ordinal: int | None) -> None:
    assert statefulset_ordinal(pod) == ordinal


@pytest.mark.parametrize(
    ("ordinal", "replicas", "start", "wanted"),
    [
        (0, 3, 0, True),
        (2, 3, 0, True),
        (3, 3, 0, False),
        (2, 2, 0, False),
        (4, 2, 3, True),
        (2, 2, 3, False),
        (0, 0, 0, False),
    ],
    ids=["first", "last", "past-the-end", "scaled-down", "with-start", "below-start", "scaled-to-zero"],
)
def test_which_ordinals_a_statefulset_still_wants(
    ordinal: int, replicas: int, start: int, wanted: bool
) -> None:
    assert wants_ordinal(ordinal, replicas, start) is wanted
