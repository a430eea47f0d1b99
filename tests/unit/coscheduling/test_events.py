"""coscheduling/events: the PodGroup cluster events (upstream coscheduling's EventsToRegister:
PodGroup add and update, Pod add), named as upstream names a custom resource, and which
registrations each one matches."""

from __future__ import annotations

import pytest

from ipscheduler.coscheduling.events import GROUP_MEMBER_ADD, POD_GROUP, POD_GROUP_CHANGE
from ipscheduler.framework import events as generic
from ipscheduler.framework.interface import ActionType, ClusterEvent, EventResource


def test_the_podgroup_resource_is_named_plural_version_group() -> None:
    assert EventResource("podgroups.v1alpha1.scheduling.x-k8s.io") == POD_GROUP


def event(resource: EventResource, action: ActionType) -> ClusterEvent:
    return ClusterEvent(resource, action)


@pytest.mark.parametrize(
    ("sent", "registered", "requeues"),
    [
        pytest.param(event(POD_GROUP, ActionType.ADD), POD_GROUP_CHANGE, True, id="a-podgroup-created"),
        pytest.param(
            event(POD_GROUP, ActionType.UPDATE_OTHER), POD_GROUP_CHANGE, True, id="a-podgroup-changed"
        ),
        pytest.param(
            event(POD_GROUP, ActionType.DELETE),
            POD_GROUP_CHANGE,
            False,
            id="a-podgroup-deleted-frees-no-member",
        ),
        pytest.param(
            event(EventResource.UNSCHEDULED_POD, ActionType.ADD),
            GROUP_MEMBER_ADD,
            True,
            id="a-member-created",
        ),
        pytest.param(
            event(EventResource.UNSCHEDULED_POD, ActionType.UPDATE_POD_LABEL),
            GROUP_MEMBER_ADD,
            False,
            id="a-pod-relabelled-is-no-member-added",
        ),
        pytest.param(generic.ASSIGNED_POD_ADD, GROUP_MEMBER_ADD, False, id="a-bound-pod-is-no-member-added"),
        pytest.param(GROUP_MEMBER_ADD, POD_GROUP_CHANGE, False, id="a-member-is-no-podgroup"),
        pytest.param(generic.NODE_ADD, POD_GROUP_CHANGE, False, id="a-node-is-no-podgroup"),
    ],
)
def test_which_events_requeue_a_group_pod(
    sent: ClusterEvent, registered: ClusterEvent, requeues: bool
) -> None:
    """Coscheduling registers POD_GROUP_CHANGE and GROUP_MEMBER_ADD: what each one matches."""
    assert sent.matches(registered) is requeues
