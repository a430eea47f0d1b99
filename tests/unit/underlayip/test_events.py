"""underlayip/events: the NodeIPPool and default-pools cluster events, named as upstream names
a custom resource, and which registrations each one matches."""

from __future__ import annotations

import pytest

from ipscheduler.framework import events as generic
from ipscheduler.framework.interface import WILDCARD_EVENT, ActionType, ClusterEvent, EventResource
from ipscheduler.underlayip.events import (
    ADDRESS_RELEASED,
    DEFAULT_POOLS_CHANGE,
    NETWORK_ATTACHMENT_DEFINITION,
    NETWORK_POOLS_CHANGE,
    NODE_IP_POOL,
    NODE_IP_POOL_CHANGE,
)

POOL_DELETED = ClusterEvent(NODE_IP_POOL, ActionType.DELETE)
POOL_ADDED = ClusterEvent(NODE_IP_POOL, ActionType.ADD)


def test_the_pool_resource_is_named_plural_version_group() -> None:
    assert EventResource("nodeippools.v1alpha1.ipscheduler.io") == NODE_IP_POOL


def test_the_nad_resource_is_named_plural_version_group() -> None:
    assert EventResource("network-attachment-definitions.v1.k8s.cni.cncf.io") == NETWORK_ATTACHMENT_DEFINITION


@pytest.mark.parametrize(
    ("event", "registered", "matches"),
    [
        (ADDRESS_RELEASED, NODE_IP_POOL_CHANGE, True),
        (POOL_ADDED, NODE_IP_POOL_CHANGE, True),
        (POOL_DELETED, NODE_IP_POOL_CHANGE, True),
        (NODE_IP_POOL_CHANGE, ADDRESS_RELEASED, True),
        (POOL_ADDED, ADDRESS_RELEASED, False),
        (ADDRESS_RELEASED, generic.NODE_ADD_OR_DELETE, False),
        (generic.NODE_ADD, NODE_IP_POOL_CHANGE, False),
        (generic.ASSIGNED_POD_DELETE, NODE_IP_POOL_CHANGE, False),
        (ADDRESS_RELEASED, WILDCARD_EVENT, True),
        (DEFAULT_POOLS_CHANGE, ClusterEvent(EventResource.NAMESPACE, ActionType.UPDATE_OTHER), True),
        (DEFAULT_POOLS_CHANGE, NODE_IP_POOL_CHANGE, False),
        (NODE_IP_POOL_CHANGE, DEFAULT_POOLS_CHANGE, False),
        (NETWORK_POOLS_CHANGE, ClusterEvent(NETWORK_ATTACHMENT_DEFINITION, ActionType.UPDATE), True),
        (NETWORK_POOLS_CHANGE, NODE_IP_POOL_CHANGE, False),
        (NETWORK_POOLS_CHANGE, DEFAULT_POOLS_CHANGE, False),
    ],
    ids=[
        "a-release-is-a-pool-change",
        "a-pool-added",
        "a-pool-deleted",
        "a-pool-change-may-be-a-release",
        "a-pool-added-releases-nothing",
        "a-release-is-no-node-event",
        "a-node-added-is-no-pool-change",
        "a-bound-pod-deleted-is-no-pool-change",
        "the-wildcard",
        "a-namespaces-default-pools-changed",
        "default-pools-are-no-pool",
        "a-pool-is-no-namespace",
        "a-nads-pools-changed",
        "a-nad-is-no-pool",
        "a-nad-is-no-namespace",
    ],
)
def test_what_each_event_matches(event: ClusterEvent, registered: ClusterEvent, matches: bool) -> None:
    assert event.matches(registered) is matches


def test_the_labels_name_the_events_apart() -> None:
    labels = [
        e.label for e in (NODE_IP_POOL_CHANGE, ADDRESS_RELEASED, DEFAULT_POOLS_CHANGE, NETWORK_POOLS_CHANGE)
    ]
    assert labels == [
        "NodeIPPoolChange",
        "AddressReleased",
        "NamespaceDefaultPoolsChange",
        "NetworkAttachmentDefinitionPoolsChange",
    ]
