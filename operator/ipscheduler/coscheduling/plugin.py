"""Coscheduling: gang scheduling of PodGroups, all or nothing, addresses included.

After kubernetes-sigs/scheduler-plugins' ``pkg/coscheduling/coscheduling.go``, on the PodGroup
API of :mod:`ipscheduler.coscheduling.models`: each extension point asks the
:class:`~ipscheduler.coscheduling.core.PodGroupManager` (upstream ``core/core.go``: the groups'
state and decisions, no I/O) and acts on its answer (the cycle state, the pods held at
Permit, the PodGroup's events).

- **QueueSort** (``Less``): higher priority first, then (ours, as PrioritySort) higher QoS
  class, then the earlier of the group's ``creationTimestamp`` (a pod outside a group: its
  first time in the queue), then by group name, so a group's pods leave the queue together.
- **PreFilter**: a pod of a group is rejected (UnschedulableAndUnresolvable, upstream's
  messages) when its PodGroup does not exist, the group failed recently (backoff), or it
  has fewer pods than ``minMember``, or (``minResources`` set) the nodes' free resources
  summed over the cluster fall short of ``minResources`` and room for ``minMember`` pods
  (``CheckClusterResource``: allocatable minus requested, the group's own pods counting as
  free; ``resource gap: cpu 2, memory 1Gi``); a group that passed is not checked again for
  its schedule timeout (upstream's ``permittedPG``). Our addition: when the pods the group still needs
  (``minMember`` minus those placed or held at Permit) exceed the room the profile's
  :class:`~ipscheduler.framework.interface.CapacityAware` plugins report on the nodes (free
  underlay addresses), the pod is Unschedulable before anything is reserved; the rejection
  names the plugin whose room fell short, so the events that plugin registers (an address
  released, a pool added) bring the group back.
- **PostFilter**: when a pod of a group fits nowhere and the group is more than 10 % short
  of ``minMember``, its siblings held at Permit are rejected at once (their reservations
  released), so two groups never hold each other's addresses.
- **Permit**: a pod waits (at most the group's ``scheduleTimeoutSeconds``, else
  ``permitWaitingTimeSeconds``) until ``minMember`` pods of its group are placed, then all
  of them are allowed and bind; the first to wait wakes its siblings in the queue.
- **Unreserve**: one pod of the group given back (timeout, rejection, failed binding)
  rejects every sibling still waiting; each is unreserved in turn, releasing its address.
  A Warning event on the PodGroup says why.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from ipscheduler.coscheduling import events
from ipscheduler.coscheduling.core import Clock, PodGroupManager, calculate_assigned_pods
from ipscheduler.coscheduling.groups import GroupIndex
from ipscheduler.coscheduling.models import POD_GROUP_LABEL, PodGroupView, group_key
from ipscheduler.framework.events import ASSIGNED_POD_DELETE, NODE_ADD_OR_ALLOCATABLE_CHANGE
from ipscheduler.framework.interface import (
    PERMIT_TIMED_OUT,
    PODS_TO_ACTIVATE,
    ClusterEventWithHint,
    CycleState,
    EventRecorder,
    Handle,
    PostFilterResult,
    QueuedPodInfo,
    QueueingHint,
    Status,
)
from ipscheduler.framework.registry import PluginArgs
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.framework.waiting import WaitingPod
from ipscheduler.plugins.queuesort import priority_then_qos

log = logging.getLogger(__name__)

NAME = "Coscheduling"

_GROUP = "Coscheduling/group"
_ASSIGNED = "Coscheduling/assigned"


class CoschedulingArgs(PluginArgs):
    """``pluginConfig`` args (upstream ``CoschedulingArgs``): how long a pod may wait at
    Permit for its group when the PodGroup sets no ``scheduleTimeoutSeconds``, and how long
    a group that failed is kept out (0: not at all)."""

    permit_waiting_time_seconds: int = Field(60, alias="permitWaitingTimeSeconds", ge=1, le=900)
    pod_group_backoff_seconds: int = Field(0, alias="podGroupBackoffSeconds", ge=0)


class Coscheduling:
    """QueueSort, PreFilter, PostFilter, Permit and Reserve/Unreserve for PodGroups (see the
    module doc), each over the :class:`~ipscheduler.coscheduling.core.PodGroupManager` of
    ``index`` (the groups and their members); ``recorder`` (optional) posts the PodGroup
    events; ``clock`` is monotonic seconds."""

    name = NAME

    def __init__(
        self,
        args: CoschedulingArgs,
        handle: Handle,
        index: GroupIndex,
        recorder: EventRecorder | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.args = args
        self.handle = handle
        self.index = index
        self.recorder = recorder
        self.manager = PodGroupManager(
            index, args.permit_waiting_time_seconds, args.pod_group_backoff_seconds, clock
        )

    # -- QueueSort -----------------------------------------------------------
    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        """True if ``a`` is popped before ``b`` (upstream ``Coscheduling.Less`` with our QoS
        rank between priority and time, as PrioritySort)."""
        first = priority_then_qos(a, b)
        if first is not None:
            return first
        if POD_GROUP_LABEL not in a.pod.labels and POD_GROUP_LABEL not in b.pod.labels:
            return a.timestamp < b.timestamp  # PrioritySort's order, at its cost
        ta, tb = self.manager.sort_time(a), self.manager.sort_time(b)  # (time, group key)
        return ta < tb if ta != tb else a.timestamp < b.timestamp

    # -- PreFilter -------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Status:
        """See the module doc (upstream ``Coscheduling.PreFilter``)."""
        found = self.manager.get_pod_group(pod)
        if found.key is None:
            return Status.success()
        if found.group is None:
            return Status.unresolvable(found.message, plugin=NAME)
        state.write(_GROUP, found.group)
        problem = self.manager.pre_filter(pod, found.group, nodes)
        if problem is not None:
            return Status.unresolvable(problem, plugin=NAME)
        return self._room_check(state, pod, found.group, nodes)

    def _room_check(
        self, state: CycleState, pod: PodInfo, group: PodGroupView, nodes: Mapping[str, NodeInfo]
    ) -> Status:
        """Unschedulable (by the plugin whose room fell short) when the pods ``group`` still
        needs exceed the room the profile's CapacityAware plugins report on ``nodes``."""
        assigned = state.memo(_ASSIGNED, lambda: calculate_assigned_pods(group.key, pod, nodes))
        needed = group.min_member - assigned
        room = self.handle.room_for(pod, nodes) if needed > 0 else None
        if room is None or room.pods >= needed:
            return Status.success()
        return Status.unschedulable(
            f"PodGroup {group.key} needs {needed} more pod(s) placed to reach minMember {group.min_member}, "
            f"but the nodes have {room.resource} for {room.pods}",
            plugin=room.plugin,
        )

    # -- PostFilter ------------------------------------------------------------
    async def post_filter(
        self, state: CycleState, pod: PodInfo, statuses: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        """A pod of a group fits nowhere: unless the group is placed already or at most 10 %
        short, reject its siblings held at Permit now (upstream ``Coscheduling.PostFilter``)
        and back the group off when ``podGroupBackoffSeconds`` is set."""
        group: PodGroupView | None = state.get(_GROUP)
        if group is None or not self.manager.post_filter(group, self._assigned(state, group.key)):
            return None, Status.unschedulable(plugin=NAME)
        rejected = self._reject_waiting(group.key, "optimistic rejection in PostFilter")
        if rejected:
            self._group_event(
                group,
                "Unschedulable",
                f"{rejected} pod(s) waiting at Permit released: pod {pod.name} is unschedulable, "
                f"the group cannot reach minMember {group.min_member}",
            )
        return None, Status.unschedulable(
            f"PodGroup {group.key} gets rejected due to Pod {pod.name} is unschedulable "
            "even after PostFilter",
            plugin=NAME,
        )

    # -- Permit ------------------------------------------------------------------
    def permit(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> tuple[Status, float]:
        """Wait until ``minMember`` pods of the group are placed, then allow them all
        (upstream ``Coscheduling.Permit``)."""
        found = self.manager.get_pod_group(pod)
        if found.key is None:
            return Status.success(), 0.0
        if found.group is None:
            return Status.unschedulable("PodGroup not found", plugin=NAME), 0.0
        if self.manager.permit(found.group, self._assigned(state, found.key)):
            for waiting in self._waiting(found.key):
                waiting.allow(NAME)
            return Status.success(), 0.0
        siblings = self.manager.siblings_to_activate(pod, found.key)
        if siblings:
            state.write(PODS_TO_ACTIVATE, (state.get(PODS_TO_ACTIVATE) or set()) | siblings)
        return Status.wait(plugin=NAME), self.manager.timeout(found.group)

    # -- Reserve / Unreserve ------------------------------------------------------
    async def reserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Nothing to reserve (the group's state is its pods)."""
        return Status.success()

    async def unreserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> None:
        """A pod of the group was given back: reject every sibling still waiting at Permit
        (upstream ``Coscheduling.Unreserve``), with a Warning on the PodGroup: ``Timeout``
        when this plugin's Permit timeout ended the pod's wait."""
        group = self.manager.get_pod_group(pod).group
        if group is None:
            return
        rejected = self._reject_waiting(group.key, "rejection in Unreserve")
        timed_out = NAME in (state.get(PERMIT_TIMED_OUT) or ())
        warning = self.manager.unreserve(group, pod, rejected, timed_out)
        if warning is not None:
            self._group_event(group, *warning)

    # -- the pods held at Permit ----------------------------------------------------
    def _waiting(self, key: str) -> list[WaitingPod]:
        """The pods of group ``key`` held at Permit."""
        return [w for w in self.handle.waiting_pods if group_key(w.pod.namespace, w.pod.labels) == key]

    def _assigned(self, state: CycleState, key: str) -> int:
        """The group's pods placed, as PreFilter counted them, else (a pod of a group created
        meanwhile) those held at Permit."""
        assigned: int | None = state.get(_ASSIGNED)
        return assigned if assigned is not None else len(self._waiting(key))

    def _reject_waiting(self, key: str, message: str) -> int:
        waiting = self._waiting(key)
        for w in waiting:
            w.reject(NAME, message)
        return len(waiting)

    def _group_event(self, group: PodGroupView, reason: str, message: str) -> None:
        log.info("PodGroup %s: %s", group.key, message)
        if self.recorder is not None:
            self.recorder.emit(group.ref(), "Warning", reason, message)

    # -- EnqueueExtensions ---------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A PodGroup added or changed, a pod joining the group (upstream's two), and, for
        the pods released by a rejection or refused for ``minResources``, a bound pod
        deleted, a node added or its allocatable changed (room)."""
        return [
            ClusterEventWithHint(events.POD_GROUP_CHANGE, _same_group_as_podgroup),
            ClusterEventWithHint(events.GROUP_MEMBER_ADD, _same_group_as_pod),
            ClusterEventWithHint(ASSIGNED_POD_DELETE),
            ClusterEventWithHint(NODE_ADD_OR_ALLOCATABLE_CHANGE),
        ]


def _same_group_as_podgroup(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """QUEUE when the PodGroup event is about the pod's own group."""
    group = new if new is not None else old
    key = group_key(pod.namespace, pod.labels)
    if isinstance(group, PodGroupView) and group.key != key:
        return QueueingHint.SKIP
    return QueueingHint.QUEUE


def _same_group_as_pod(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """QUEUE when the pod added is of the same group."""
    key = group_key(pod.namespace, pod.labels)
    added = getattr(new, "group", None)
    if isinstance(added, str) and added != key:
        return QueueingHint.SKIP
    return QueueingHint.QUEUE


def new(args: CoschedulingArgs | None, handle: Handle, index: GroupIndex) -> Coscheduling:
    """The plugin's factory (registered by ``cmd/profiles`` with its index); its PodGroup
    events go through ``handle.recorder``."""
    return Coscheduling(args or CoschedulingArgs(), handle, index, handle.recorder)
