"""coscheduling/groups: members parsed defensively, indexed by group, and the status a
group's pods give it (upstream's podgroup controller, level-based)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from ipscheduler.coscheduling.groups import GroupIndex, Member, desired_status
from ipscheduler.coscheduling.models import POD_GROUP_LABEL, PodGroupView

NOW = datetime.datetime(2026, 11, 26, 3, 0, tzinfo=datetime.UTC)


def m(uid: str, node: str = "", phase: str = "Pending", deleting: bool = False) -> Member:
    return Member(uid, "ns", uid, "ns/g", node_name=node, phase=phase, deleting=deleting, owners=("ns/job",))


@pytest.mark.parametrize(
    ("members", "phase", "counts"),
    [
        ([m("a")], "Pending", (0, 0, 0, 0)),
        ([m("a"), m("b"), m("c")], "PreScheduling", (0, 0, 0, 0)),
        ([m("a", "n1"), m("b"), m("c")], "Scheduling", (1, 0, 0, 0)),
        ([m("a", "n1"), m("b", "n1"), m("c", "n2")], "Scheduled", (3, 0, 0, 0)),
        (
            [m("a", "n1", "Running"), m("b", "n1", "Running"), m("c", "n2", "Running")],
            "Running",
            (3, 3, 0, 0),
        ),
        (
            [m("a", "n1", "Succeeded"), m("b", "n1", "Running"), m("c", "n2", "Failed")],
            "Failed",
            (3, 1, 1, 1),
        ),
        ([m(x, "n1", "Succeeded") for x in "abc"], "Finished", (3, 0, 3, 0)),
        ([m("a", "n1", deleting=True), m("b"), m("c")], "Pending", (0, 0, 0, 0)),
    ],
    ids=[
        "pending",
        "prescheduling",
        "scheduling",
        "scheduled",
        "running",
        "failed",
        "finished",
        "deleting-not-counted",
    ],
)
def test_desired_status(members: list[Member], phase: str, counts: tuple[int, int, int, int]) -> None:
    group = PodGroupView("ns", "g", min_member=3)
    status = desired_status(group, members, NOW)
    assert status["phase"] == phase
    assert (status["scheduled"], status["running"], status["succeeded"], status["failed"]) == counts
    assert status["occupiedBy"] == "ns/job"
    assert ("scheduleStartTime" in status) is (phase != "Pending")


def test_final_phases_stay_and_the_start_time_is_kept() -> None:
    done = PodGroupView("ns", "g", min_member=1, status={"phase": "Finished", "succeeded": 1})
    assert desired_status(done, [], NOW) == {"phase": "Finished", "succeeded": 1}
    started = PodGroupView("ns", "g", min_member=1, status={"scheduleStartTime": "2026-01-01T00:00:00Z"})
    assert desired_status(started, [m("a", "n1")], NOW)["scheduleStartTime"] == "2026-01-01T00:00:00Z"


def pod_body(**meta: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"uid": "u1", "namespace": "ns", "name": "p", "labels": {POD_GROUP_LABEL: "g"}}
    return {"metadata": {**base, **meta}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}


@pytest.mark.parametrize(
    ("body", "group"),
    [
        (pod_body(), "ns/g"),
        (pod_body(labels={}), None),
        (pod_body(labels={POD_GROUP_LABEL: ""}), None),
        (pod_body(labels={POD_GROUP_LABEL: 7}), None),
        (pod_body(uid=None), None),
        ({"metadata": "nope"}, None),
    ],
    ids=["member", "no-label", "empty-label", "label-not-a-string", "no-uid", "garbage"],
)
def test_member_from_obj_checks_every_value(body: dict[str, Any], group: str | None) -> None:
    member = Member.from_obj(body)
    assert (member.group if member else None) == group
    if member is not None:
        assert (member.node_name, member.phase, member.active) == ("n1", "Running", True)


def test_the_index_follows_members_across_groups_and_deletes() -> None:
    idx = GroupIndex()
    idx.set_member("a", m("a"))
    idx.set_member("b", m("b", "n1"))
    assert idx.active_count("ns/g") == 2
    assert idx.pending_uids("ns/g") == {"a"}
    idx.set_member("a", Member("a", "ns", "a", "ns/h"))  # relabelled to another group
    assert (idx.active_count("ns/g"), idx.active_count("ns/h")) == (1, 1)
    idx.set_member("b", None)
    assert "ns/g" not in idx.members


@pytest.mark.parametrize(
    ("labels", "setup", "found"),
    [
        ({}, "group", (None, False, "", "")),
        ({POD_GROUP_LABEL: ""}, "group", (None, False, "", "")),
        ({POD_GROUP_LABEL: "g"}, "group", ("ns/g", True, "", "")),
        ({POD_GROUP_LABEL: "h"}, "group", ("ns/h", False, "not found", "PodGroup ns/h not found")),
        (
            {POD_GROUP_LABEL: "g"},
            "invalid",
            (
                "ns/g",
                False,
                "spec.minMember: too small",
                "PodGroup ns/g is invalid: spec.minMember: too small",
            ),
        ),
        (
            {POD_GROUP_LABEL: "g"},
            "uninstalled",
            (
                "ns/g",
                False,
                "the PodGroup API is not installed",
                "PodGroup API scheduling.x-k8s.io/v1alpha1 is not installed (kubectl apply -f crds/)",
            ),
        ),
    ],
    ids=["no-label", "empty-label", "found", "not-found", "invalid", "api-not-installed"],
)
def test_lookup_resolves_a_pods_group_or_says_why_not(
    labels: dict[str, str], setup: str, found: tuple[str | None, bool, str, str]
) -> None:
    index = GroupIndex()
    if setup == "invalid":
        index.invalid["ns/g"] = "spec.minMember: too small"
    else:
        index.set_group("ns/g", PodGroupView("ns", "g", min_member=2))
    index.installed = setup != "uninstalled"
    got = index.lookup("ns", labels)
    assert (got.key, got.group is not None, got.why, got.message) == found
