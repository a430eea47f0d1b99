"""The PodGroups and their members as the scheduler knows them (no I/O).

:class:`GroupIndex` is fed by two informers (built in ``coscheduling/controller``): the
PodGroups, and every pod carrying the group label in any phase
(``scheduling.x-k8s.io/pod-group``, narrowed server-side). Coscheduling and ``explain``
resolve a pod's group with :meth:`GroupIndex.lookup`; Coscheduling reads it in PreFilter
(enough members?), the PodGroup controller to write each group's status
(:func:`desired_status`, upstream's
``pkg/controllers/podgroup_controller.go``).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ipscheduler.coscheduling.models import (
    API_VERSION,
    FAILED,
    FINISHED,
    PENDING,
    PRE_SCHEDULING,
    RUNNING,
    SCHEDULED,
    SCHEDULING,
    PodGroupView,
    group_key,
)
from ipscheduler.framework.types import POD_FAILED, POD_PENDING, POD_RUNNING, POD_SUCCEEDED, TERMINAL_PHASES


@dataclass(frozen=True)
class Member:
    """A pod of a group: enough to count it (``phase`` the pod's ``status.phase``;
    ``owners`` ``<namespace>/<name>`` of its owner references, for ``occupiedBy``)."""

    uid: str
    namespace: str
    name: str
    group: str
    node_name: str = ""
    phase: str = POD_PENDING
    deleting: bool = False
    owners: tuple[str, ...] = ()

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def active(self) -> bool:
        """Counts toward ``minMember`` (not terminal, not being deleted)."""
        return not self.terminal and not self.deleting

    @classmethod
    def from_obj(cls, body: Mapping[str, Any]) -> Member | None:
        """A pod body → Member; None unless it has a UID, a namespace, a name and a
        non-empty group label (every value is type-checked before use)."""
        meta = body.get("metadata")
        if not isinstance(meta, Mapping):
            return None
        uid, namespace, name = (_text(meta, k) for k in ("uid", "namespace", "name"))
        labels = meta.get("labels")
        if not uid or not namespace or not name or not isinstance(labels, Mapping):
            return None
        key = group_key(namespace, labels)
        if key is None:
            return None
        node = _text(body.get("spec"), "nodeName")
        phase = _text(body.get("status"), "phase")
        refs = meta.get("ownerReferences")
        owners = tuple(
            sorted(
                f"{namespace}/{r['name']}"
                for r in (refs if isinstance(refs, list) else [])
                if isinstance(r, Mapping) and isinstance(r.get("name"), str)
            )
        )
        return cls(
            uid=uid,
            namespace=namespace,
            name=name,
            group=key,
            node_name=node,
            phase=phase or POD_PENDING,
            deleting=meta.get("deletionTimestamp") is not None,
            owners=owners,
        )


def _text(obj: Any, key: str) -> str:
    """``obj[key]`` if ``obj`` is a mapping and the value a string, else ``""``."""
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, str) else ""


@dataclass(frozen=True)
class GroupLookup:
    """A pod's PodGroup as Coscheduling resolves it (upstream ``PodGroupManager.GetPodGroup``,
    scheduler-plugins ``pkg/coscheduling/core/core.go``).

    ``key`` is ``<namespace>/<name>`` from the pod's label ``scheduling.x-k8s.io/pod-group``
    (None: the pod is in no group); ``group`` its PodGroup, or None when it cannot be used,
    and then ``why`` says why in a few words (``not found``, the parse error of an invalid PodGroup,
    ``the PodGroup API is not installed``) and ``message`` is Coscheduling's rejection.
    """

    key: str | None
    group: PodGroupView | None = None
    why: str = ""
    message: str = ""


class GroupIndex:
    """PodGroups by ``<namespace>/<name>`` and their member pods by UID.

    ``installed`` says whether the PodGroup API is served (the controller probes it);
    without it, every pod with the group label is unschedulable with that reason.
    """

    def __init__(self) -> None:
        self.groups: dict[str, PodGroupView] = {}
        self.members: dict[str, dict[str, Member]] = {}
        self._group_of: dict[str, str] = {}
        self.installed = True
        self.invalid: dict[str, str] = {}
        """``<namespace>/<name>`` → why a PodGroup did not parse (its pods wait, with it)."""

    # -- PodGroups ----------------------------------------------------------
    def set_group(self, key: str, group: PodGroupView | None) -> None:
        """Store (or with None, drop) the PodGroup of ``key``. Why an existing PodGroup is
        left out is kept in :attr:`invalid` by whoever parsed it."""
        if group is None:
            self.groups.pop(key, None)
        else:
            self.groups[key] = group

    def group(self, key: str) -> PodGroupView | None:
        return self.groups.get(key)

    def lookup(self, namespace: str, labels: Mapping[str, str]) -> GroupLookup:
        """The PodGroup of a pod in ``namespace`` with ``labels``: the one resolution
        Coscheduling's extension points and ``explain`` share (see :class:`GroupLookup`)."""
        key = group_key(namespace, labels)
        if key is None:
            return GroupLookup(None)
        if not self.installed:
            message = f"PodGroup API {API_VERSION} is not installed (kubectl apply -f crds/)"
            return GroupLookup(key, why="the PodGroup API is not installed", message=message)
        group = self.groups.get(key)
        if group is not None:
            return GroupLookup(key, group)
        invalid = self.invalid.get(key)
        if invalid:
            return GroupLookup(key, why=invalid, message=f"PodGroup {key} is invalid: {invalid}")
        return GroupLookup(key, why="not found", message=f"PodGroup {key} not found")

    # -- members ---------------------------------------------------------------
    def set_member(self, uid: str, member: Member | None) -> None:
        """Store a member pod, or with None forget the pod of ``uid``."""
        old = self._group_of.pop(uid, None)
        if old is not None:
            group = self.members.get(old)
            if group is not None:
                group.pop(uid, None)
                if not group:
                    del self.members[old]
        if member is not None:
            self.members.setdefault(member.group, {})[uid] = member
            self._group_of[uid] = member.group

    def members_of(self, key: str) -> Iterable[Member]:
        return self.members.get(key, {}).values()

    def active_count(self, key: str) -> int:
        """Members that count toward ``minMember`` (not terminal, not being deleted)."""
        return sum(1 for m in self.members_of(key) if m.active)

    def pending_uids(self, key: str) -> set[str]:
        """UIDs of the group's active members not bound yet (siblings to wake)."""
        return {m.uid for m in self.members_of(key) if m.active and not m.node_name}


FINAL_PHASES = (FINISHED, FAILED)


def desired_status(group: PodGroupView, members: Iterable[Member], now: datetime.datetime) -> dict[str, Any]:
    """The status the group's pods say it has (wire names), after upstream's controller
    (``pkg/controllers/podgroup_controller.go``), level-based: counts of pods bound
    (``scheduled``), Running, Succeeded and Failed, and the phase: ``Pending`` (fewer than
    ``minMember`` pods and none bound), ``PreScheduling`` (enough pods, none bound),
    ``Scheduling`` (some bound), ``Scheduled`` (``minMember`` bound), ``Running``
    (``minMember`` running or succeeded), ``Failed`` (a pod failed and ``minMember`` have
    run), ``Finished`` (``minMember`` succeeded). Finished and Failed are final, as
    upstream. ``scheduleStartTime`` is set when the group first leaves Pending and kept;
    ``occupiedBy`` names the owners of its pods (``<namespace>/<name>``, sorted)."""
    old = group.status
    if old.get("phase") in FINAL_PHASES:
        return dict(old)
    pods = list(members)
    total = sum(1 for m in pods if not m.deleting)
    scheduled = sum(1 for m in pods if m.node_name and not m.deleting)
    running = sum(1 for m in pods if m.phase == POD_RUNNING)
    succeeded = sum(1 for m in pods if m.phase == POD_SUCCEEDED)
    failed = sum(1 for m in pods if m.phase == POD_FAILED)
    n = group.min_member
    if succeeded >= n:
        phase = FINISHED
    elif failed and failed + running + succeeded >= n:
        phase = FAILED
    elif running + succeeded >= n:
        phase = RUNNING
    elif scheduled >= n:
        phase = SCHEDULED
    elif scheduled > 0:
        phase = SCHEDULING
    elif total >= n:
        phase = PRE_SCHEDULING
    else:
        phase = PENDING
    status: dict[str, Any] = {
        "phase": phase,
        "scheduled": scheduled,
        "running": running,
        "succeeded": succeeded,
        "failed": failed,
    }
    owners = sorted({o for m in pods for o in m.owners})
    if owners:
        status["occupiedBy"] = ",".join(owners)
    elif old.get("occupiedBy"):
        status["occupiedBy"] = old["occupiedBy"]
    start = old.get("scheduleStartTime")
    if start:
        status["scheduleStartTime"] = start
    elif phase != PENDING:
        status["scheduleStartTime"] = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return status
