"""The PodGroup cluster events: what the PodGroup controller sends to the scheduling queue
and Coscheduling registers (upstream coscheduling's ``EventsToRegister``: PodGroup add and
update, Pod add). The resource is named as upstream names a custom one,
``<plural>.<version>.<group>``."""

from __future__ import annotations

from ipscheduler.coscheduling.models import GROUP, PLURAL, VERSION
from ipscheduler.framework.interface import ActionType, ClusterEvent, EventResource

POD_GROUP = EventResource(f"{PLURAL}.{VERSION}.{GROUP}")
"""The PodGroup resource, ``podgroups.v1alpha1.scheduling.x-k8s.io``."""

POD_GROUP_CHANGE = ClusterEvent(POD_GROUP, ActionType.ADD | ActionType.UPDATE, "PodGroupChange")
"""A PodGroup was created or its spec changed (e.g. a smaller ``minMember``)."""

GROUP_MEMBER_ADD = ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.ADD, "PodGroupMemberAdd")
"""A pod joined a group (created with the group label): its siblings may reach minMember."""
