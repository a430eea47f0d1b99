"""PodGroupManager: Coscheduling's state and decisions about whole PodGroups (no I/O).

After kubernetes-sigs/scheduler-plugins' ``pkg/coscheduling/core/core.go``, whose
``PodGroupManager`` the plugin (``coscheduling.go``; here
:class:`~ipscheduler.coscheduling.plugin.Coscheduling`) calls from its extension points:

- the group of a pod (``GetPodGroup``: :meth:`PodGroupManager.get_pod_group`, over the
  :class:`~ipscheduler.coscheduling.groups.GroupIndex` the informers fill) and the time it
  sorts by (``GetCreationTimestamp``);
- PreFilter's checks: a group backed off after a failure (``backedOffPG``), fewer pods than
  ``minMember``, the cluster's free resources short of ``minResources``
  (``CheckClusterResource``: :func:`resource_gap`), a group that passed not checked again
  for its schedule timeout (``permittedPG``);
- the pods of a group placed (``CalculateAssignedPods``: :func:`calculate_assigned_pods`),
  Permit's decision (wait, or allow the group) and the siblings to wake (``ActivateSiblings``);
- PostFilter's rejection of a group (``DeletePermittedPodGroup``, ``BackoffPodGroup``) and
  what Unreserve tells of a group given back.

Times are seconds of the injected ``clock`` (monotonic by default); the permitted and
backed-off groups expire by it, so tests drive them with a fake clock. The plugin keeps
what touches the framework: the cycle state, the pods held at Permit, events.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping

from ipscheduler.coscheduling.groups import GroupIndex, GroupLookup
from ipscheduler.coscheduling.models import PodGroupView, group_key
from ipscheduler.framework.aio import TTLSet
from ipscheduler.framework.interface import QueuedPodInfo
from ipscheduler.framework.quantity import to_units
from ipscheduler.framework.types import NodeInfo, PodInfo

Clock = Callable[[], float]


def loop_clock() -> float:
    """The running event loop's clock, the one Permit's wait timers are set on, else
    ``time.monotonic()``."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()


"""Seconds, monotonic (``time.monotonic``, or a test's fake)."""


class PodGroupManager:
    """The PodGroups' scheduling state (upstream ``PodGroupManager``).

    ``index`` holds the groups and their member pods; ``schedule_timeout`` is the seconds a
    pod may wait at Permit when its PodGroup sets no ``scheduleTimeoutSeconds`` (the
    plugin's ``permitWaitingTimeSeconds``); ``backoff`` the seconds a group that failed in
    PostFilter is refused (``podGroupBackoffSeconds``; 0: never); ``clock`` monotonic
    seconds; ``wall_offset`` the seconds from the queue's monotonic timestamps to Unix time
    (default: measured now), to sort a pod's first queue time against a group's
    ``creationTimestamp``.
    """

    def __init__(
        self,
        index: GroupIndex,
        schedule_timeout: float,
        backoff: float = 0.0,
        clock: Clock = loop_clock,
        wall_offset: float | None = None,
    ) -> None:
        self.index = index
        self.schedule_timeout = schedule_timeout
        self.backoff = backoff
        self.clock = clock
        self.wall_offset = time.time() - time.monotonic() if wall_offset is None else wall_offset
        self._permitted: TTLSet[str] = TTLSet(clock)  # passed the minResources check (upstream permittedPG)
        self._backed_off: TTLSet[str] = TTLSet(clock)  # failed recently (upstream backedOffPG)
        self._waiting: set[str] = set()  # group keys with a pod waiting at Permit

    def get_pod_group(self, pod: PodInfo) -> GroupLookup:
        """The pod's PodGroup, or why it cannot be used (upstream ``GetPodGroup``)."""
        return self.index.lookup(pod.namespace, pod.labels)

    def sort_time(self, qp: QueuedPodInfo) -> tuple[float, str]:
        """What QueueSort orders ``qp`` by after priority and QoS: (Unix seconds, group key).
        A pod of a known group: the group's ``creationTimestamp`` (upstream
        ``GetCreationTimestamp``); else the pod's first time in the queue, with its group's
        key (a group not known yet still keeps its pods together) or ``""``."""
        key = group_key(qp.pod.namespace, qp.pod.labels)
        group = self.index.groups.get(key) if key is not None else None
        if group is not None and group.creation is not None:
            return group.creation.timestamp(), group.key
        first = qp.initial_attempt_timestamp if qp.initial_attempt_timestamp is not None else qp.timestamp
        return first + self.wall_offset, key or ""

    def timeout(self, group: PodGroupView) -> float:
        """Seconds a pod of ``group`` may wait at Permit: its ``scheduleTimeoutSeconds``, else
        ``schedule_timeout`` (upstream ``util.GetWaitTimeDuration``)."""
        return group.timeout if group.timeout is not None else self.schedule_timeout

    def pre_filter(self, pod: PodInfo, group: PodGroupView, nodes: Mapping[str, NodeInfo]) -> str | None:
        """Why ``pod`` of ``group`` is refused before any node is tried, None when it may go
        on (upstream ``PodGroupManager.PreFilter``, its messages): the group failed recently
        (backed off), it has fewer active pods than ``minMember``, or (``minResources`` set,
        the group not permitted within its schedule timeout) ``nodes`` fall short of
        :func:`resource_gap`. A group whose resources suffice is permitted for
        :meth:`timeout` seconds; one that falls short loses its permit."""
        key = group.key
        if key in self._backed_off:
            return f"podGroup {key} failed recently"
        members = self.index.active_count(key)
        if members < group.min_member:
            return (
                f"pre-filter pod {pod.name} cannot find enough sibling pods, current pods number: "
                f"{members}, minMember of group: {group.min_member}"
            )
        if not group.min_resources or key in self._permitted:
            return None
        gap = resource_gap(key, group, nodes)
        if gap:
            self._permitted.discard(key)
            return f"resource gap: {format_gap(gap)}"
        self._permitted.add(key, self.timeout(group))
        return None

    def permit(self, group: PodGroupView, assigned: int) -> bool:
        """True when a pod of ``group`` completes it: ``assigned`` (its other pods placed or
        held at Permit) plus this one reach ``minMember``, and every pod of the group may
        bind; False: the pod waits, and the group's wait starts now unless it has (upstream
        ``PodGroupManager.Permit``: ``Success`` or ``Wait``)."""
        if assigned + 1 >= group.min_member:
            self._waiting.discard(group.key)
            return True
        self._waiting.add(group.key)
        return False

    def siblings_to_activate(self, pod: PodInfo, key: str) -> set[str]:
        """UIDs of the pods of group ``key`` other than ``pod`` not bound yet, to move to the
        active queue when ``pod`` waits at Permit (upstream ``ActivateSiblings``)."""
        return self.index.pending_uids(key) - {pod.uid}

    def post_filter(self, group: PodGroupView, assigned: int) -> bool:
        """True when a pod of ``group`` that fits nowhere fails the whole group (upstream
        ``Coscheduling.PostFilter``): ``assigned`` (its pods placed or held at Permit) is
        short of ``minMember`` by more than 10 %. The group then loses its permit
        (``DeletePermittedPodGroup``) and, with a ``backoff`` and enough pods to retry, is
        refused for ``backoff`` seconds (``BackoffPodGroup``); the plugin rejects the pods
        held at Permit."""
        if assigned >= group.min_member or (group.min_member - assigned) / group.min_member <= 0.1:
            return False
        self._permitted.discard(group.key)
        if self.backoff and self.index.active_count(group.key) >= group.min_member:
            self._backed_off.add(group.key, self.backoff)
        return True

    def unreserve(
        self, group: PodGroupView, pod: PodInfo, rejected: int, timed_out: bool = False
    ) -> tuple[str, str] | None:
        """The Warning a PodGroup gets when ``pod`` of ``group`` is given back and ``rejected``
        of its pods held at Permit were rejected with it: (reason, message), ``Timeout`` when
        ``pod``'s own wait at Permit ran out (``timed_out``: the framework's
        :data:`~ipscheduler.framework.interface.PERMIT_TIMED_OUT`), else ``Unschedulable``;
        None when the group was not waiting and nothing was rejected (a sibling's own
        Unreserve). Ends the group's wait. Decided by what ended the wait, never by comparing
        clocks: a group's wait and Permit's timer start a few instructions apart."""
        waited = group.key in self._waiting
        self._waiting.discard(group.key)
        if not waited and not rejected:
            return None
        if timed_out:
            why = f"timed out after {self.timeout(group):g}s waiting for minMember {group.min_member}"
            return "Timeout", f"{rejected + 1} reserved pod(s) released: {why}"
        why = f"pod {pod.name} was given back before the group reached minMember {group.min_member}"
        return "Unschedulable", f"{rejected + 1} reserved pod(s) released: {why}"


def calculate_assigned_pods(key: str, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> int:
    """Pods of group ``key`` placed on ``nodes`` (bound, or assumed: reserved and held at
    Permit or binding), other than ``pod`` (upstream ``CalculateAssignedPods`` over the
    snapshot)."""
    namespace = pod.namespace
    return sum(
        1
        for node in nodes.values()
        for p in node.pods
        if p.namespace == namespace and p.uid != pod.uid and group_key(namespace, p.labels) == key
    )


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
