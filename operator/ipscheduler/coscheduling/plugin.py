"""Coscheduling: gang scheduling of PodGroups, all or nothing, addresses included.

After kubernetes-sigs/scheduler-plugins' ``pkg/coscheduling`` (``coscheduling.go`` and
``core/core.go``), on the PodGroup API of :mod:`ipscheduler.coscheduling.models`:

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
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import Field

from ipscheduler.coscheduling import events
from ipscheduler.coscheduling.groups import GroupIndex
from ipscheduler.coscheduling.models import API_VERSION, KIND, POD_GROUP_LABEL, PodGroupView, group_key
from ipscheduler.framework.events import ASSIGNED_POD_DELETE
from ipscheduler.framework.interface import (
    PODS_TO_ACTIVATE,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EventResource,
    Handle,
    QueuedPodInfo,
    QueueingHint,
    Status,
)
from ipscheduler.framework.quantity import to_units
from ipscheduler.framework.registry import PluginArgs
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.kube.events import EventRecorder
from ipscheduler.plugins.queuesort import priority_then_qos

log = logging.getLogger(__name__)

NAME = "Coscheduling"

_GROUP = "Coscheduling/group"
_ASSIGNED = "Coscheduling/assigned"

Clock = Callable[[], float]

_NODE_ROOM = ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE)


class CoschedulingArgs(PluginArgs):
    """``pluginConfig`` args (upstream ``CoschedulingArgs``): how long a pod may wait at
    Permit for its group when the PodGroup sets no ``scheduleTimeoutSeconds``, and how long
    a group that failed is kept out (0: not at all)."""

    permit_waiting_time_seconds: int = Field(60, alias="permitWaitingTimeSeconds", ge=1, le=900)
    pod_group_backoff_seconds: int = Field(0, alias="podGroupBackoffSeconds", ge=0)


class Coscheduling:
    """QueueSort, PreFilter, PostFilter, Permit and Reserve/Unreserve for PodGroups (see the
    module doc). ``index`` holds the groups and their members; ``recorder`` (optional)
    posts the PodGroup events; ``clock`` is monotonic seconds."""

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
        self.clock = clock
        self._backoff: dict[str, float] = {}  # group key → monotonic time its backoff ends
        self._waiting_since: dict[str, float] = {}  # group key → when its first pod waited
        self._permitted: dict[str, float] = {}  # group key → when its minResources pass expires
        self._wall_offset = time.time() - time.monotonic()

    # -- QueueSort -----------------------------------------------------------
    def _sort_time(self, qp: QueuedPodInfo) -> tuple[float, str]:
        key = group_key(qp.pod.namespace, qp.pod.labels)
        if key is not None:
            group = self.index.groups.get(key)
            if group is not None and group.creation is not None:
                return group.creation.timestamp(), key
            # A group not known yet: its pods still stay together, by name.
            first = qp.initial_attempt_timestamp if qp.initial_attempt_timestamp is not None else qp.timestamp
            return first + self._wall_offset, key
        first = qp.initial_attempt_timestamp if qp.initial_attempt_timestamp is not None else qp.timestamp
        return first + self._wall_offset, ""

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        """True if ``a`` is popped before ``b`` (upstream ``Coscheduling.Less`` with our QoS
        rank between priority and time, as PrioritySort)."""
        first = priority_then_qos(a, b)
        if first is not None:
            return first
        if POD_GROUP_LABEL not in a.pod.labels and POD_GROUP_LABEL not in b.pod.labels:
            return a.timestamp < b.timestamp  # PrioritySort's order, at its cost
        (ta, ka), (tb, kb) = self._sort_time(a), self._sort_time(b)
        if ta != tb:
            return ta < tb
        if ka != kb:
            return ka < kb
        return a.timestamp < b.timestamp

    # -- counting --------------------------------------------------------------
    def _assigned(self, state: CycleState, key: str, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> int:
        """Pods of group ``key`` placed on ``nodes`` (bound, or assumed: reserved and held at
        Permit or binding), other than ``pod`` (upstream ``CalculateAssignedPods`` over the
        snapshot); memoized per cycle."""

        def count() -> int:
            namespace = pod.namespace
            return sum(
                1
                for node in nodes.values()
                for p in node.pods
                if p.namespace == namespace and p.uid != pod.uid and group_key(namespace, p.labels) == key
            )

        return state.memo(_ASSIGNED, count)

    def _group_of(self, pod: PodInfo) -> tuple[str | None, PodGroupView | None, Status | None]:
        """The pod's group key, its PodGroup, and the rejection when the group cannot be
        used (not found, invalid, the API not installed)."""
        key = group_key(pod.namespace, pod.labels)
        if key is None:
            return None, None, None
        if not self.index.installed:
            return (
                key,
                None,
                Status.unresolvable(
                    f"PodGroup API {API_VERSION} is not installed (kubectl apply -f crds/)", plugin=NAME
                ),
            )
        group = self.index.group(key)
        if group is None:
            invalid = self.index.invalid.get(key)
            if invalid:
                return key, None, Status.unresolvable(f"PodGroup {key} is invalid: {invalid}", plugin=NAME)
            return key, None, Status.unresolvable(f"PodGroup {key} not found", plugin=NAME)
        return key, group, None

    # -- PreFilter -------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Status:
        """See the module doc (upstream ``PodGroupManager.PreFilter``)."""
        key, group, problem = self._group_of(pod)
        if key is None:
            return Status.success()
        if problem is not None or group is None:
            return problem or Status.unresolvable(f"PodGroup {key} not found", plugin=NAME)
        state.write(_GROUP, group)
        until = self._backoff.get(key)
        if until is not None:
            if self.clock() < until:
                return Status.unresolvable(f"podGroup {key} failed recently", plugin=NAME)
            del self._backoff[key]
        members = self.index.active_count(key)
        if members < group.min_member:
            return Status.unresolvable(
                f"pre-filter pod {pod.name} cannot find enough sibling pods, current pods number: "
                f"{members}, minMember of group: {group.min_member}",
                plugin=NAME,
            )
        if group.min_resources and not self._resources_permitted(key):
            gap = resource_gap(key, group, nodes)
            if gap:
                self._permitted.pop(key, None)
                return Status.unresolvable(f"resource gap: {format_gap(gap)}", plugin=NAME)
            self._permitted[key] = self.clock() + self._timeout(group)
        needed = group.min_member - self._assigned(state, key, pod, nodes)
        if needed <= 0:
            return Status.success()
        room = self.handle.room_for(pod, nodes)
        if room is not None and room.pods < needed:
            return Status.unschedulable(
                f"PodGroup {key} needs {needed} more pod(s) placed to reach minMember {group.min_member}, "
                f"but the nodes have {room.resource} for {room.pods}",
                plugin=room.plugin,
            )
        return Status.success()

    def _resources_permitted(self, key: str) -> bool:
        until = self._permitted.get(key)
        if until is None:
            return False
        if self.clock() < until:
            return True
        del self._permitted[key]
        return False

    def _timeout(self, group: PodGroupView) -> float:
        """Seconds a pod of ``group`` may wait at Permit (upstream ``GetWaitTimeDuration``)."""
        return group.timeout if group.timeout is not None else float(self.args.permit_waiting_time_seconds)

    # -- PostFilter ------------------------------------------------------------
    async def post_filter(self, state: CycleState, pod: PodInfo, statuses: Mapping[str, Status]) -> Status:
        """A pod of a group fits nowhere: unless the group is placed already or at most 10 %
        short, reject its siblings held at Permit now (upstream ``Coscheduling.PostFilter``)
        and back the group off when ``podGroupBackoffSeconds`` is set."""
        group: PodGroupView | None = state.get(_GROUP)
        if group is None:
            return Status.unschedulable(plugin=NAME)
        assigned = state.get(_ASSIGNED)
        if assigned is None:
            assigned = self._waiting_count(group.key)
        if assigned >= group.min_member or (group.min_member - assigned) / group.min_member <= 0.1:
            return Status.unschedulable(plugin=NAME)
        self._permitted.pop(group.key, None)  # upstream DeletePermittedPodGroup
        rejected = self._reject_waiting(group.key, "optimistic rejection in PostFilter")
        if self.args.pod_group_backoff_seconds and self.index.active_count(group.key) >= group.min_member:
            self._backoff[group.key] = self.clock() + self.args.pod_group_backoff_seconds
        if rejected:
            self._group_event(
                group,
                "Unschedulable",
                f"{rejected} pod(s) waiting at Permit released: pod {pod.name} is unschedulable, "
                f"the group cannot reach minMember {group.min_member}",
            )
        return Status.unschedulable(
            f"PodGroup {group.key} gets rejected due to Pod {pod.name} is unschedulable "
            "even after PostFilter",
            plugin=NAME,
        )

    # -- Permit ------------------------------------------------------------------
    def permit(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> tuple[Status, float]:
        """Wait until ``minMember`` pods of the group are placed, then allow them all
        (upstream ``Coscheduling.Permit``)."""
        key, group, problem = self._group_of(pod)
        if key is None:
            return Status.success(), 0.0
        if problem is not None or group is None:
            return Status.unschedulable("PodGroup not found", plugin=NAME), 0.0
        assigned = state.get(_ASSIGNED)
        if assigned is None:  # PreFilter did not count (a pod of a group created meanwhile)
            assigned = self._waiting_count(key)
        if assigned + 1 >= group.min_member:
            for waiting in self.handle.waiting_pods:
                if group_key(waiting.pod.namespace, waiting.pod.labels) == key:
                    waiting.allow(NAME)
            self._waiting_since.pop(key, None)
            return Status.success(), 0.0
        self._waiting_since.setdefault(key, self.clock())
        siblings = self.index.pending_uids(key) - {pod.uid}
        if siblings:
            activate: set[str] = state.get(PODS_TO_ACTIVATE) or set()
            activate |= siblings
            state.write(PODS_TO_ACTIVATE, activate)
        return Status.wait(plugin=NAME), self._timeout(group)

    # -- Reserve / Unreserve ------------------------------------------------------
    async def reserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Nothing to reserve (the group's state is its pods)."""
        return Status.success()

    async def unreserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> None:
        """A pod of the group was given back: reject every sibling still waiting at Permit
        (upstream ``Coscheduling.Unreserve``), with a Warning on the PodGroup."""
        key, group, _ = self._group_of(pod)
        if key is None or group is None:
            return
        since = self._waiting_since.pop(key, None)
        rejected = self._reject_waiting(key, "rejection in Unreserve")
        if since is None and not rejected:
            return
        waited = self.clock() - since if since is not None else 0.0
        timeout = self._timeout(group)
        if since is not None and waited >= timeout:
            why = f"timed out after {timeout:g}s waiting for minMember {group.min_member}"
            reason = "Timeout"
        else:
            why = f"pod {pod.name} was given back before the group reached minMember {group.min_member}"
            reason = "Unschedulable"
        self._group_event(group, reason, f"{rejected + 1} reserved pod(s) released: {why}")

    def _waiting_count(self, key: str) -> int:
        return sum(1 for w in self.handle.waiting_pods if group_key(w.pod.namespace, w.pod.labels) == key)

    def _reject_waiting(self, key: str, message: str) -> int:
        n = 0
        for waiting in self.handle.waiting_pods:
            if group_key(waiting.pod.namespace, waiting.pod.labels) == key:
                waiting.reject(NAME, message)
                n += 1
        return n

    def _group_event(self, group: PodGroupView, reason: str, message: str) -> None:
        log.info("PodGroup %s: %s", group.key, message)
        if self.recorder is not None:
            ref = {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "namespace": group.namespace,
                "name": group.name,
                "uid": group.uid,
            }
            self.recorder.emit(ref, "Warning", reason, message)

    # -- EnqueueExtensions ---------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A PodGroup added or changed, a pod joining the group (upstream's two), and, for
        the pods released by a rejection or refused for ``minResources``, a bound pod
        deleted, a node added or its allocatable changed (room)."""
        return [
            ClusterEventWithHint(events.POD_GROUP_CHANGE, _same_group_as_podgroup),
            ClusterEventWithHint(events.GROUP_MEMBER_ADD, _same_group_as_pod),
            ClusterEventWithHint(ASSIGNED_POD_DELETE),
            ClusterEventWithHint(_NODE_ROOM),
        ]


def resource_gap(key: str, group: PodGroupView, nodes: Mapping[str, NodeInfo]) -> dict[str, int]:
    """What the nodes lack for ``group`` (key ``key``): resource name → the shortfall in the
    scheduler's integer units (:func:`~ipscheduler.framework.quantity.to_units`: cpu in
    millicores), empty when they have it. The need is ``minResources`` plus ``pods:
    minMember``; each node offers its allocatable minus what its pods request, the
    group's own pods counting as free, never below zero. Upstream
    ``CheckClusterResource``/``getNodeResource`` (scheduler-plugins
    ``pkg/coscheduling/core/core.go``), which lets an overcommitted node's negative
    remainder add to the need; here it offers nothing."""
    need = {name: to_units(name, value) for name, value in group.min_resources.items()}
    need["pods"] = group.min_member
    need = {name: units for name, units in need.items() if units > 0}
    for node in nodes.values():
        if not need:
            break
        allocatable = node.allocatable_units
        requested = node.requested_units
        own: dict[str, int] = {}
        for p in node.pods:
            if group_key(p.namespace, p.labels) == key:
                own["pods"] = own.get("pods", 0) + 1
                for name, value in p.requests.items():
                    own[name] = own.get(name, 0) + to_units(name, value)
        for name in list(need):
            left = allocatable.get(name, 0) - requested.get(name, 0) + own.get(name, 0)
            if left > 0:
                need[name] -= left
                if need[name] <= 0:
                    del need[name]
    return need


def format_gap(gap: Mapping[str, int]) -> str:
    """``cpu 1500m, memory 1Gi, pods 2``: :func:`resource_gap`'s shortfall as quantities,
    sorted by resource name."""
    return ", ".join(f"{name} {_quantity(name, units)}" for name, units in sorted(gap.items()))


def _quantity(name: str, units: int) -> str:
    if name == "cpu":
        return str(units // 1000) if units % 1000 == 0 else f"{units}m"
    for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if units >= size and units % size == 0:
            return f"{units // size}{suffix}"
    return str(units)


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


def new(
    args: CoschedulingArgs | None, handle: Handle, index: GroupIndex, recorder: EventRecorder | None = None
) -> Coscheduling:
    """The plugin's factory (registered by ``cmd/profiles`` with its index and recorder)."""
    return Coscheduling(args or CoschedulingArgs(), handle, index, recorder)
