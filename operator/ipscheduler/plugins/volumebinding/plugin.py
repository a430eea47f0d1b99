"""VolumeBinding: a pod's claims bound, or bindable, on the node; binding them before the pod.

Mirrors kube-scheduler 1.34's ``pkg/scheduler/framework/plugins/volumebinding/volume_binding.go``:
the extension points only, each a few lines over a
:class:`~ipscheduler.plugins.volumebinding.binder.SchedulerVolumeBinder` (``binder.py``, which
decides and writes). This module alone makes statuses and their messages.

* PreFilter (``podHasPVCs``, ``GetPodVolumeClaims``): Skip a pod without claims
  (``persistentVolumeClaim`` or generic ``ephemeral`` volumes). Each claim, read from the
  listers, must exist (``persistentvolumeclaim "<name>" not found``; for an ephemeral one
  ``waiting for ephemeral volume controller to create the persistentvolumeclaim "<name>"``),
  not be ``Lost`` (``persistentvolumeclaim "<name>" bound to non-existent persistentvolume
  "<pv>"``) nor being deleted (``persistentvolumeclaim "<name>" is being deleted``), and an
  ephemeral claim must be the pod's: all UnschedulableAndUnresolvable. Then the binder sorts
  the claims: one it may not bind → UnschedulableAndUnresolvable ``pod has unbound immediate
  PersistentVolumeClaims``.
* Filter (``FindPodVolumes``): the binder's conflict reasons for the node,
  UnschedulableAndUnresolvable: ``node(s) unavailable due to one or more pvc(s) bound to
  non-existent pv(s)``, ``node(s) had volume node affinity conflict``, ``node(s) didn't find
  available persistent volumes to bind``. The node's volumes are kept for Reserve.
* Reserve (``AssumePodVolumes``): the binder assumes the node's volumes; Unreserve
  (``RevertAssumedPodVolumes``) drops them.
* PreBind (``BindPodVolumes``): nothing when the pod's claims were all bound; else the binder
  writes and waits (``bindTimeoutSeconds``, 600 s) until kube-controller-manager has bound them.

An error of the binder (a :class:`~ipscheduler.plugins.volumebinding.binder.VolumeBindingError`)
is an Error status with its text, anything else PreBind's write raised one with the exception's
type before its text (upstream's ``AsStatus(err)``): the pod is retried.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import Field

from ipscheduler.framework import events
from ipscheduler.framework.interface import ClusterEventWithHint, CycleState, Handle, QueueingHint, Status
from ipscheduler.framework.registry import PluginArgs
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.framework.volumes import (
    CLAIM_LOST,
    RESOURCE_PVC,
    PVCInfo,
    VolumeListers,
    not_found,
)
from ipscheduler.plugins.helper import missing_pre_filter_state
from ipscheduler.plugins.volumebinding.binder import (
    DEFAULT_BIND_TIMEOUT_SECONDS,
    ConflictReason,
    PodVolumeClaims,
    PodVolumes,
    SchedulerVolumeBinder,
    VolumeBinder,
    VolumeBindingError,
)

NAME = "VolumeBinding"

ERR_REASON_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
ERR_REASON_NODE_CONFLICT = "node(s) had volume node affinity conflict"
ERR_REASON_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
ERR_REASON_UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"

REASONS = {
    ConflictReason.BIND_CONFLICT: ERR_REASON_BIND_CONFLICT,
    ConflictReason.NODE_CONFLICT: ERR_REASON_NODE_CONFLICT,
    ConflictReason.PV_NOT_EXIST: ERR_REASON_PV_NOT_EXIST,
}
"""The message of each conflict reason the binder gives."""

_STATE_KEY = "PreFilter" + NAME


class VolumeBindingArgs(PluginArgs):
    """``pluginConfig`` args (upstream ``VolumeBindingArgs``): ``bindTimeoutSeconds``, how long
    PreBind waits for the claims to be bound (seconds, > 0; default 600). ``shape`` (the
    alpha capacity score) is not supported."""

    bind_timeout_seconds: int = Field(DEFAULT_BIND_TIMEOUT_SECONDS, alias="bindTimeoutSeconds", gt=0)


@dataclass
class _StateData:
    """The cycle's one state (upstream ``stateData``): PreFilter's claims, Filter's volumes
    per node, and whether Reserve found every claim bound."""

    claims: PodVolumeClaims
    by_node: dict[str, PodVolumes] = field(default_factory=dict)
    all_bound: bool = False


class VolumeBinding:
    """PreFilter, Filter, Reserve/Unreserve and PreBind over a volume binder (see the module
    doc); ``volumes``: the listers PreFilter reads the pod's claims from."""

    name: str = NAME

    def __init__(self, volumes: VolumeListers, binder: SchedulerVolumeBinder) -> None:
        self.volumes = volumes
        self.binder = binder

    def _claim_problem(self, pod: PodInfo) -> str | None:
        """``podHasPVCs``: why a claim of the pod stops it (None: none does)."""
        for name, ephemeral in [(c, False) for c in pod.pvc_names] + [
            (c, True) for c in pod.ephemeral_pvc_names
        ]:
            pvc = self.volumes.pvc(pod.namespace, name)
            if pvc is None:
                if ephemeral:
                    waiting = "waiting for ephemeral volume controller to create the persistentvolumeclaim"
                    return f'{waiting} "{name}"'
                return not_found(RESOURCE_PVC, name)
            if pvc.phase == CLAIM_LOST:
                lost = f'persistentvolumeclaim "{pvc.name}" bound to non-existent persistentvolume'
                return f'{lost} "{pvc.volume_name}"'
            if pvc.deleting:
                return f'persistentvolumeclaim "{pvc.name}" is being deleted'
            if ephemeral and pvc.owner_uid != pod.uid:
                return f"PVC {pvc.namespace}/{pvc.name} was not created for pod {pod.key} (pod is not owner)"
        return None

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Status:
        """The pod's claims, sorted by the binder; unbound Immediate ones refused."""
        problem = self._claim_problem(pod)
        if problem is not None:
            return Status.unresolvable(problem, plugin=self.name)
        if not pod.pvc_names and not pod.ephemeral_pvc_names:
            return Status.skip()
        try:
            claims = self.binder.get_pod_volume_claims(pod)
        except VolumeBindingError as e:
            return Status.error(str(e), plugin=self.name)
        if claims.immediate:
            return Status.unresolvable(ERR_REASON_UNBOUND_IMMEDIATE, plugin=self.name)
        state.write(_STATE_KEY, _StateData(claims))
        return Status.success()

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Every bound claim's volume usable on ``node``, every claim to bind bindable there."""
        st = state.get(_STATE_KEY)
        if not isinstance(st, _StateData):
            return missing_pre_filter_state(_STATE_KEY, self.name)
        try:
            found, reasons = self.binder.find_pod_volumes(st.claims, node)
        except VolumeBindingError as e:
            return Status.error(str(e), plugin=self.name)
        if reasons:
            return Status.unresolvable(*(REASONS[r] for r in reasons), plugin=self.name)
        st.by_node[node.name] = found
        return Status.success()

    async def reserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Assume the node's bindings and provisions."""
        st = state.get(_STATE_KEY)
        if not isinstance(st, _StateData):
            return Status.success()  # PreFilter skipped the pod: no claims
        found = st.by_node.get(node.name)
        st.all_bound = found is None or self.binder.assume_pod_volumes(node.name, found)
        return Status.success()

    async def unreserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> None:
        """Drop this pod's assumptions (idempotent)."""
        st = state.get(_STATE_KEY)
        found = st.by_node.get(node.name) if isinstance(st, _StateData) else None
        if found is not None:
            self.binder.revert_assumed_pod_volumes(found)

    async def pre_bind(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Bind the pod's volumes and wait for their claims to be bound."""
        st = state.get(_STATE_KEY)
        if not isinstance(st, _StateData) or st.all_bound:
            return Status.success()
        found = st.by_node.get(node.name)
        if found is None:
            return Status.error(f'no pod volumes found for node "{node.name}"', plugin=self.name)
        try:
            await self.binder.bind_pod_volumes(pod, node, found)
        except VolumeBindingError as e:
            return Status.error(str(e), plugin=self.name)
        except Exception as e:  # upstream's AsStatus(err): any failure is an Error, the pod retried
            return Status.error(f"{type(e).__name__}: {e}", plugin=self.name)
        return Status.success()

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """Claims added or updated and volumes added or updated (hint: the pod has claims),
        StorageClasses added or updated, nodes added or their labels or taints changed,
        CSINodes added or updated (upstream's list, less CSIDriver and CSIStorageCapacity)."""
        return [
            ClusterEventWithHint(events.PVC_ADD_OR_UPDATE, _pod_has_claims),
            ClusterEventWithHint(events.PV_ADD_OR_UPDATE, _pod_has_claims),
            ClusterEventWithHint(events.STORAGE_CLASS_ADD),
            ClusterEventWithHint(events.STORAGE_CLASS_UPDATE),
            ClusterEventWithHint(events.NODE_ADD_OR_LABEL_OR_TAINT_CHANGE),
            ClusterEventWithHint(events.CSI_NODE_ADD_OR_UPDATE),
        ]


def _pod_has_claims(pod: PodInfo, old: object, new: object) -> QueueingHint:
    """``isSchedulableAfterPersistentVolumeChange`` (and the claim's, narrowed to claims of the
    pod's namespace that it names)."""
    if isinstance(new, PVCInfo):
        mine = new.namespace == pod.namespace and new.name in (*pod.pvc_names, *pod.ephemeral_pvc_names)
        return QueueingHint.QUEUE if mine else QueueingHint.SKIP
    return QueueingHint.QUEUE if pod.pvc_names or pod.ephemeral_pvc_names else QueueingHint.SKIP


def new(args: VolumeBindingArgs | None, handle: Handle) -> VolumeBinding:
    """The plugin's factory (registered as :data:`NAME` with :class:`VolumeBindingArgs`): a
    :class:`~ipscheduler.plugins.volumebinding.binder.VolumeBinder` over the handle's listers,
    writing with its client (None in tests and ``explain``)."""
    timeout = args.bind_timeout_seconds if args is not None else DEFAULT_BIND_TIMEOUT_SECONDS
    return VolumeBinding(handle.volumes, VolumeBinder(handle.volumes, handle.client, timeout))
