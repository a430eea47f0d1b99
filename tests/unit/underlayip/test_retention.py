"""Release policies (underlayip/retention.py): which policy a pod gets, its identity, its
retain-timeout, and why an annotation is refused."""

from __future__ import annotations

from typing import Any

import pytest

from ipscheduler.framework.types import OwnerRef
from ipscheduler.underlayip.models import Allocation
from ipscheduler.underlayip.retention import (
    DEFAULT_RETAIN_TIMEOUT,
    Retention,
    StatefulSetFacts,
    claims,
    retained_release_reason,
    retention_of,
    statefulset_of,
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


@pytest.mark.parametrize(
    ("identity", "parsed"),
    [("ns/web-2", ("ns", "web", 2)), ("ns/my-db-10", ("ns", "my-db", 10)), ("ns/web", None), ("web-1", None)],
    ids=["simple", "dashed-name", "no-ordinal", "no-namespace"],
)
def test_the_statefulset_of_an_identity(identity: str, parsed: tuple[str, str, int] | None) -> None:
    assert statefulset_of(identity) == parsed


LIVE = StatefulSetFacts("uid-sts", replicas=3)


@pytest.mark.parametrize(
    ("policy", "identity", "facts", "reason"),
    [
        ("StatefulSet", "ns/web-1", LIVE, None),
        ("StatefulSet", "ns/web-1", None, "its StatefulSet ns/web no longer exists"),
        (
            "StatefulSet",
            "ns/web-1",
            StatefulSetFacts("uid-new", 3),
            "its StatefulSet ns/web was recreated (UID uid-new, was uid-sts)",
        ),
        (
            "StatefulSet",
            "ns/web-2",
            StatefulSetFacts("uid-sts", 2),
            "StatefulSet ns/web no longer wants ordinal 2 (replicas 2, ordinals from 0)",
        ),
        ("StatefulSet", "ns/web-2", StatefulSetFacts("uid-sts", 2, start=1), None),
        (
            "StatefulSet",
            "ns/web-0",
            StatefulSetFacts("uid-sts", 2, start=1),
            "StatefulSet ns/web no longer wants ordinal 0 (replicas 2, ordinals from 1)",
        ),
        ("Never", "ns/db", None, None),
        (None, "ns/web-1", LIVE, "Retained without a release policy that keeps it"),
        ("StatefulSet", "ns/web", LIVE, "Retained without a release policy that keeps it"),
    ],
    ids=[
        "wanted",
        "statefulset-deleted",
        "statefulset-recreated",
        "scaled-down",
        "ordinals-start-keeps-it",
        "below-ordinals-start",
        "never",
        "no-policy",
        "identity-without-ordinal",
    ],
)
def test_when_a_retained_address_goes(
    policy: Any, identity: str, facts: StatefulSetFacts | None, reason: str | None
) -> None:
    assert retained_release_reason(policy, identity, "uid-sts", facts) == reason


def _kept(uid: str, phase: str, policy: str, owner: str) -> tuple[str, str, Allocation]:
    a = Allocation.model_validate(
        {
            "ip": "10.0.0.5",
            "pod": "ns/web-0",
            "phase": phase,
            "since": "2024-01-01T00:00:00Z",
            "releasePolicy": policy,
            "identity": "ns/web-0",
            **({"ownerUID": owner} if owner else {}),
        }
    )
    return ("pool-a", uid, a)


@pytest.mark.parametrize(
    ("kept", "owner", "want"),
    [
        pytest.param([_kept("old", "Retained", "StatefulSet", "sts-1")], "sts-1", "old", id="same-owner"),
        pytest.param(
            [_kept("old", "Retained", "StatefulSet", "sts-1")], "sts-2", None, id="re-created-owner"
        ),
        pytest.param([_kept("old", "Retained", "Never", "")], "sts-2", "old", id="never-any-owner"),
        pytest.param([_kept("me", "Retained", "StatefulSet", "sts-1")], "sts-1", None, id="its-own"),
        pytest.param([_kept("old", "Bound", "StatefulSet", "sts-1")], "sts-1", None, id="not-retained-yet"),
        pytest.param(
            [
                _kept("other", "Retained", "StatefulSet", "sts-2"),
                _kept("old", "Retained", "StatefulSet", "sts-1"),
            ],
            "sts-1",
            "old",
            id="the-owners-among-others",
        ),
    ],
)
def test_the_address_a_pod_takes_back(
    kept: list[tuple[str, str, Allocation]], owner: str, want: str | None
) -> None:
    """One rule for what a pod takes back (claims, which UnderlayIP's PreFilter and explain
    both decide with, through sticky.kept_address): only an allocation of another UID, kept
    with Never or for the same owner."""
    retention = retention_of(
        pod_info("web-0", uid="me", owner=OwnerRef("StatefulSet", "web", owner), generate_name="web-")
    )
    got = next((c for c in claims("me", retention, kept) if c[2].phase == "Retained"), None)
    assert (got[1] if got else None) == want
    assert {u for _, u, _ in claims("me", retention, kept)} == {u for _, u, _ in kept if u != "me"} - (
        {u for _, u, a in kept if a.release_policy != "Never" and a.owner_uid != owner}
    )
