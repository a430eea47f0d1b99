"""The NodeIPPool cluster events: what the pool controller sends to the scheduling queue
and the UnderlayIP plugin registers (:class:`~ipscheduler.framework.interface.EnqueueExtensions`).

The generic floors know only Kubernetes' own resources
(:mod:`ipscheduler.framework.events`); the wing names its resource as upstream names
a custom one, ``<plural>.<version>.<group>`` (``pkg/scheduler/framework/types.go``,
``EventResource``).
"""

from __future__ import annotations

from ipscheduler.framework.interface import ActionType, ClusterEvent, EventResource
from ipscheduler.underlayip.models import GROUP, PLURAL, VERSION
from ipscheduler.underlayip.multus import NAD_GROUP, NAD_PLURAL, NAD_VERSION

NODE_IP_POOL = EventResource(f"{PLURAL}.{VERSION}.{GROUP}")
"""The NodeIPPool resource, ``nodeippools.v1alpha1.ipscheduler.io``."""

NODE_IP_POOL_CHANGE = ClusterEvent(NODE_IP_POOL, ActionType.ALL, "NodeIPPoolChange")
"""A NodeIPPool was added, changed (spec, or status by someone else) or deleted, or the
node set changed its pools' status."""

ADDRESS_RELEASED = ClusterEvent(NODE_IP_POOL, ActionType.UPDATE_OTHER, "AddressReleased")
"""Addresses of a pool were released (a pod ended)."""

DEFAULT_POOLS_CHANGE = ClusterEvent(EventResource.NAMESPACE, ActionType.ALL, "NamespaceDefaultPoolsChange")
"""A namespace's ``ipscheduler.io/default-pools`` annotation was set, changed or removed."""

NETWORK_ATTACHMENT_DEFINITION = EventResource(f"{NAD_PLURAL}.{NAD_VERSION}.{NAD_GROUP}")
"""Multus' NetworkAttachmentDefinition resource, ``network-attachment-definitions.v1.k8s.cni.cncf.io``."""

NETWORK_POOLS_CHANGE = ClusterEvent(
    NETWORK_ATTACHMENT_DEFINITION, ActionType.ALL, "NetworkAttachmentDefinitionPoolsChange"
)
"""A NetworkAttachmentDefinition's ``ipscheduler.io/pools`` or IP family annotations were set,
changed or removed (or the NAD carrying them came or went)."""
