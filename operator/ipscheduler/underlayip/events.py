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

NODE_IP_POOL = EventResource(f"{PLURAL}.{VERSION}.{GROUP}")
"""The NodeIPPool resource, ``nodeippools.v1alpha1.ipscheduler.io``."""

NODE_IP_POOL_CHANGE = ClusterEvent(NODE_IP_POOL, ActionType.ALL, "NodeIPPoolChange")
"""A NodeIPPool was added, changed (spec, or status by someone else) or deleted, or the
node set changed its pools' status."""

ADDRESS_RELEASED = ClusterEvent(NODE_IP_POOL, ActionType.UPDATE_OTHER, "AddressReleased")
"""Addresses of a pool were released (a pod ended)."""

DEFAULT_POOLS_CHANGE = ClusterEvent(EventResource.NAMESPACE, ActionType.ALL, "NamespaceDefaultPoolsChange")
"""A namespace's ``ipscheduler.io/default-pools`` annotation was set, changed or removed."""
