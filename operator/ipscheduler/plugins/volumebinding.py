"""VolumeBinding: a pod's claims bound, or bindable, on the node; binding them before the pod.

Mirrors kube-scheduler 1.34's ``pkg/scheduler/framework/plugins/volumebinding/volume_binding.go``
and ``binder.go`` (with ``FindMatchingVolume`` and ``CheckNodeAffinity`` of
``k8s.io/component-helpers/storage/volume``):

* PreFilter (``podHasPVCs``, ``GetPodVolumeClaims``): Skip a pod without claims
  (``persistentVolumeClaim`` or generic ``ephemeral`` volumes). Each claim must exist
  (``persistentvolumeclaim "<name>" not found``; for an ephemeral one ``waiting for
  ephemeral volume controller to create the persistentvolumeclaim "<name>"``), not be
  ``Lost`` (``persistentvolumeclaim "<name>" bound to non-existent persistentvolume
  "<pv>"``) nor being deleted (``persistentvolumeclaim "<name>" is being deleted``), and an
  ephemeral claim must be the pod's: all UnschedulableAndUnresolvable. A claim is bound when
  it has ``spec.volumeName`` and the ``pv.kubernetes.io/bind-completed`` annotation; an
  unbound one of a ``WaitForFirstConsumer`` class without ``spec.volumeName`` is for the
  scheduler to bind; any other unbound claim → UnschedulableAndUnresolvable ``pod has unbound
  immediate PersistentVolumeClaims`` (a class without ``volumeBindingMode`` → Error, an
  unknown class counts as Immediate). The candidate volumes of each class are listed here.
* Filter (``FindPodVolumes``), reasons UnschedulableAndUnresolvable, several at once:

  - each bound claim's volume must exist (``node(s) unavailable due to one or more pvc(s)
    bound to non-existent pv(s)``) and its ``spec.nodeAffinity.required`` match the node's
    labels (``node(s) had volume node affinity conflict``);
  - a claim to bind that carries ``volume.kubernetes.io/selected-node`` fits only that node;
    the others, smallest request first, each take the smallest volume of their class not
    chosen yet (``FindMatchingVolume``): pre-bound to the claim (its node affinity must
    match, else no match), or ``Available``, unclaimed, not being deleted, as big as the
    request, of the claim's volume mode and class, with every access mode the claim asks
    for, the claim's ``selector`` matching its labels, and its node affinity matching;
  - a claim without a match is provisioned if its class has a provisioner (not
    ``kubernetes.io/no-provisioner``) whose ``allowedTopologies`` admit the node; otherwise
    ``node(s) didn't find available persistent volumes to bind``. A claim to provision
    without a class → Error ``no class for claim "<ns>/<name>"``; its class gone → Error
    ``failed to find storage class "<name>"``.

* Reserve (``AssumePodVolumes``): the chosen volumes are assumed claimed by their claims
  (other pods' cycles see them so), the claims to provision assumed annotated with the node.
* PreBind (``BindPodVolumes``): merge-patch each chosen volume's ``spec.claimRef`` (and
  ``pv.kubernetes.io/bound-by-controller: "yes"``), conditional on the resourceVersion
  seen; merge-patch each claim to provision with ``volume.kubernetes.io/selected-node``;
  then poll the informers every second, for ``bindTimeoutSeconds`` (600 s), until every
  claim is bound (kube-controller-manager's PV controller does it). A volume's claimRef
  reset, a ``selected-node`` annotation removed (the provisioner gave up), a node affinity
  that no longer matches, or the timeout → Error (the pod is retried). The assumptions are
  dropped once PreBind ends; Unreserve drops them too.

Not covered: CSI migration of in-tree volumes, storage capacity (``CSIStorageCapacity``:
``node(s) did not have enough free storage`` is never returned), the volume-capacity Score
(alpha upstream), PreFilterResult's node narrowing (an optimisation), ``VolumeAttributesClass``
matching, and the check that the pod still exists while PreBind waits.

Size: upstream's plugin and its binder (``volume_binding.go`` and ``binder.go``) share one
state, the assumed volumes and claims, which every extension point here reads or changes;
kept together so that Filter's matching and PreBind's checks stay side by side.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, cast

from pydantic import Field

from ipscheduler.framework import events
from ipscheduler.framework.interface import ClusterEventWithHint, CycleState, Handle, QueueingHint, Status
from ipscheduler.framework.labels import InvalidSelectorError, LabelSelector
from ipscheduler.framework.quantity import parse_quantity
from ipscheduler.framework.registry import PluginArgs
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.framework.volumes import (
    ANN_BIND_COMPLETED,
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    CLAIM_LOST,
    NOT_SUPPORTED_PROVISIONER,
    RESOURCE_PVC,
    VOLUME_AVAILABLE,
    WAIT_FOR_FIRST_CONSUMER,
    PVCInfo,
    PVInfo,
    StorageClassInfo,
    VolumeListers,
    VolumeWriter,
    not_found,
)
from ipscheduler.plugins.helper import match_node_selector_terms, missing_pre_filter_state

log = logging.getLogger(__name__)

NAME = "VolumeBinding"

ERR_REASON_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
ERR_REASON_NODE_CONFLICT = "node(s) had volume node affinity conflict"
ERR_REASON_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
ERR_REASON_UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"

DEFAULT_BIND_TIMEOUT_SECONDS = 600
POLL_SECONDS = 1.0

_STATE_KEY = "PreFilter" + NAME


class VolumeBindingArgs(PluginArgs):
    """``pluginConfig`` args (upstream ``VolumeBindingArgs``): ``bindTimeoutSeconds``, how long
    PreBind waits for the claims to be bound (seconds, > 0; default 600). ``shape`` (the
    alpha capacity score) is not supported."""

    bind_timeout_seconds: int = Field(DEFAULT_BIND_TIMEOUT_SECONDS, alias="bindTimeoutSeconds", gt=0)


@dataclass
class PodVolumes:
    """What a node needs for the pod (upstream ``PodVolumes``): ``static`` (claim, volume)
    bindings and the claims to ``provision`` there."""

    static: list[tuple[PVCInfo, PVInfo]] = field(default_factory=list)
    provision: list[PVCInfo] = field(default_factory=list)


@dataclass
class _State:
    """PreFilter's findings (``PodVolumeClaims``), and Filter's :class:`PodVolumes` per node."""

    bound: list[PVCInfo]
    to_bind: list[PVCInfo]
    candidates: dict[str, list[PVInfo]]
    """Class name → its volumes (with the assumed claimRefs), listed once per cycle."""
    by_node: dict[str, PodVolumes] = field(default_factory=dict)
    all_bound: bool = False


def fully_bound(pvc: PVCInfo) -> bool:
    """``isPVCFullyBound``: a volume name and the bind-completed annotation."""
    return bool(pvc.volume_name) and ANN_BIND_COMPLETED in pvc.annotations


def node_affinity_matches(pv: PVInfo, node: NodeInfo) -> bool:
    """``CheckNodeAffinity``: no required node affinity, or its terms match the node's labels
    (matched as a node known by its labels alone: ``matchFields`` are not checked)."""
    if pv.node_affinity is None:
        return True
    return match_node_selector_terms(
        pv.node_affinity.get("nodeSelectorTerms"), NodeInfo(name="", labels=node.labels)
    )


def topology_allows(cls: StorageClassInfo, node: NodeInfo) -> bool:
    """``MatchTopologySelectorTerms``: no ``allowedTopologies``, or a term each of whose
    ``matchLabelExpressions`` has the node's value of its key among its values."""
    if not cls.allowed_topologies:
        return True
    for term in cls.allowed_topologies:
        exprs = term.get("matchLabelExpressions")
        if not isinstance(exprs, list):
            continue
        if all(
            isinstance(e, dict)
            and isinstance(e.get("values"), list)
            and node.labels.get(str(e.get("key"))) in e["values"]
            for e in exprs
        ):
            return True
    return False


def _size(text: str) -> Decimal:
    try:
        return parse_quantity(text) if text else Decimal(0)
    except ValueError:
        return Decimal(0)


def bound_to_claim(pv: PVInfo, pvc: PVCInfo) -> bool:
    """``IsVolumeBoundToClaim``: the claimRef names the claim (and its UID, when set)."""
    return pv.claim_ref == pvc.key and (not pv.claim_uid or pv.claim_uid == pvc.uid)


def find_matching_volume(
    pvc: PVCInfo, volumes: list[PVInfo], node: NodeInfo, excluded: set[str]
) -> PVInfo | None:
    """``FindMatchingVolume`` (delayed binding, scheduler path): the volume pre-bound to the
    claim if its node affinity matches (None if it does not), else the smallest volume that
    fits as the module doc says."""
    requested = _size(pvc.storage)
    selector: LabelSelector | None = None
    if pvc.selector is not None:
        try:
            selector = LabelSelector.parse(pvc.selector)
        except InvalidSelectorError:
            return None
    best: PVInfo | None = None
    best_size = Decimal(0)
    for pv in volumes:
        if pv.name in excluded:
            continue
        if pv.claim_ref and not bound_to_claim(pv, pvc):
            continue
        size = _size(pv.capacity)
        if size < requested or pv.volume_mode != pvc.volume_mode or pv.deleting:
            continue
        affinity_ok = node_affinity_matches(pv, node)
        if bound_to_claim(pv, pvc):
            return pv if affinity_ok else None
        if pv.phase != VOLUME_AVAILABLE:
            continue
        if selector is not None and not selector.matches(pv.labels):
            continue
        if pv.storage_class != pvc.storage_class or not affinity_ok:
            continue
        if not all(m in pv.access_modes for m in pvc.access_modes):
            continue
        if best is None or size < best_size:
            best, best_size = pv, size
    return best


class VolumeBinding:
    """PreFilter, Filter, Reserve/Unreserve and PreBind over the storage listers and writes
    (see the module doc). The assumptions are shared by every cycle of the profile."""

    name: str = NAME

    def __init__(
        self,
        volumes: VolumeListers,
        writer: VolumeWriter | None,
        bind_timeout: float = DEFAULT_BIND_TIMEOUT_SECONDS,
        poll: float = POLL_SECONDS,
    ) -> None:
        self.volumes = volumes
        self.writer = writer
        self.bind_timeout = bind_timeout
        self.poll = poll
        self.assumed_pvs: dict[str, PVCInfo] = {}
        """Volume name → the claim a reserved pod will bind it to."""
        self.assumed_pvcs: dict[str, str] = {}
        """Claim key → the node a reserved pod has it provisioned on."""

    # -- the views, with the assumptions -----------------------------------------------------

    def _claim(self, namespace: str, name: str) -> PVCInfo | None:
        pvc = self.volumes.pvc(namespace, name)
        if pvc is None:
            return None
        node = self.assumed_pvcs.get(pvc.key)
        if node is not None and pvc.annotations.get(ANN_SELECTED_NODE) != node:
            pvc = dataclasses.replace(pvc, annotations={**pvc.annotations, ANN_SELECTED_NODE: node})
        return pvc

    def _volume(self, pv: PVInfo) -> PVInfo:
        claim = self.assumed_pvs.get(pv.name)
        if claim is None or bound_to_claim(pv, claim):
            return pv
        return dataclasses.replace(pv, claim_ref=claim.key, claim_uid=claim.uid)

    # -- PreFilter ----------------------------------------------------------------------------

    def _claims(self, pod: PodInfo) -> list[PVCInfo] | Status:
        """``podHasPVCs``: the pod's claims, or the UnschedulableAndUnresolvable status."""
        out = []
        for name, ephemeral in [(c, False) for c in pod.pvc_names] + [
            (c, True) for c in pod.ephemeral_pvc_names
        ]:
            pvc = self._claim(pod.namespace, name)
            if pvc is None:
                why = (
                    f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{name}"'
                    if ephemeral
                    else not_found(RESOURCE_PVC, name)
                )
                return Status.unresolvable(why, plugin=self.name)
            if pvc.phase == CLAIM_LOST:
                lost = f'persistentvolumeclaim "{pvc.name}" bound to non-existent persistentvolume'
                return Status.unresolvable(f'{lost} "{pvc.volume_name}"', plugin=self.name)
            if pvc.deleting:
                return Status.unresolvable(
                    f'persistentvolumeclaim "{pvc.name}" is being deleted', plugin=self.name
                )
            if ephemeral and pvc.owner_uid != pod.uid:
                return Status.unresolvable(
                    f"PVC {pvc.namespace}/{pvc.name} was not created for pod {pod.key} (pod is not owner)",
                    plugin=self.name,
                )
            out.append(pvc)
        return out

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Status:
        """Sort the pod's claims into bound and to-bind; refuse unbound Immediate ones."""
        claims = self._claims(pod)
        if isinstance(claims, Status):
            return claims
        if not claims:
            return Status.skip()
        bound: list[PVCInfo] = []
        to_bind: list[PVCInfo] = []
        immediate = False
        for pvc in claims:
            if fully_bound(pvc):
                bound.append(pvc)
                continue
            delayed = False
            if pvc.storage_class:
                cls = self.volumes.storage_class(pvc.storage_class)
                if cls is not None:
                    if cls.volume_binding_mode is None:
                        return Status.error(
                            f'VolumeBindingMode not set for StorageClass "{pvc.storage_class}"',
                            plugin=self.name,
                        )
                    delayed = cls.volume_binding_mode == WAIT_FOR_FIRST_CONSUMER
            if delayed and not pvc.volume_name:
                to_bind.append(pvc)
            else:
                immediate = True
        if immediate:
            return Status.unresolvable(ERR_REASON_UNBOUND_IMMEDIATE, plugin=self.name)
        classes = {pvc.storage_class for pvc in to_bind}
        candidates: dict[str, list[PVInfo]] = {c: [] for c in classes}
        if classes:
            for pv in self.volumes.list_pvs():
                if pv.storage_class in candidates:
                    candidates[pv.storage_class].append(self._volume(pv))
        state.write(_STATE_KEY, _State(bound, to_bind, candidates))
        return Status.success()

    # -- Filter -------------------------------------------------------------------------------

    def find_pod_volumes(self, st: _State, node: NodeInfo) -> tuple[PodVolumes, list[str]] | Status:
        """``FindPodVolumes``: the node's :class:`PodVolumes` and the reasons it does not fit
        (empty: it fits), or an Error status."""
        found = PodVolumes()
        reasons: list[str] = []
        for pvc in st.bound:
            pv = self.volumes.pv(pvc.volume_name)
            if pv is None:
                return found, [ERR_REASON_PV_NOT_EXIST]
            if not node_affinity_matches(pv, node):
                return found, [ERR_REASON_NODE_CONFLICT]
        if not st.to_bind:
            return found, reasons
        to_match: list[PVCInfo] = []
        to_provision: list[PVCInfo] = []
        for pvc in st.to_bind:
            selected = pvc.annotations.get(ANN_SELECTED_NODE)
            if selected is not None:
                if selected != node.name:
                    return found, [ERR_REASON_BIND_CONFLICT]
                to_provision.append(pvc)
            else:
                to_match.append(pvc)
        chosen: set[str] = set()
        for pvc in sorted(to_match, key=lambda c: _size(c.storage)):
            pv = find_matching_volume(pvc, st.candidates.get(pvc.storage_class, []), node, chosen)
            if pv is None:
                to_provision.append(pvc)
                continue
            chosen.add(pv.name)
            found.static.append((pvc, pv))
        for pvc in to_provision:
            if not pvc.storage_class:
                return Status.error(f'no class for claim "{pvc.key}"', plugin=self.name)
            cls = self.volumes.storage_class(pvc.storage_class)
            if cls is None:
                return Status.error(f'failed to find storage class "{pvc.storage_class}"', plugin=self.name)
            if cls.provisioner in ("", NOT_SUPPORTED_PROVISIONER) or not topology_allows(cls, node):
                return found, [ERR_REASON_BIND_CONFLICT]
            found.provision.append(pvc)
        return found, reasons

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Every bound claim's volume usable on ``node``, every claim to bind bindable there."""
        st = state.get(_STATE_KEY)
        if not isinstance(st, _State):
            return missing_pre_filter_state(_STATE_KEY, self.name)
        got = self.find_pod_volumes(st, node)
        if isinstance(got, Status):
            return got
        found, reasons = got
        if reasons:
            return Status.unresolvable(*reasons, plugin=self.name)
        st.by_node[node.name] = found
        return Status.success()

    # -- Reserve, PreBind ---------------------------------------------------------------------

    async def reserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """``AssumePodVolumes``: assume the node's bindings and provisions."""
        st = state.get(_STATE_KEY)
        if not isinstance(st, _State):
            return Status.success()  # PreFilter skipped the pod: no claims
        found = st.by_node.get(node.name)
        st.all_bound = found is None or (not found.static and not found.provision)
        if found is None:
            return Status.success()
        for pvc, pv in found.static:
            self.assumed_pvs[pv.name] = pvc
        for pvc in found.provision:
            self.assumed_pvcs[pvc.key] = node.name
        return Status.success()

    async def unreserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> None:
        """``RevertAssumedPodVolumes``: drop this pod's assumptions (idempotent)."""
        st = state.get(_STATE_KEY)
        found = st.by_node.get(node.name) if isinstance(st, _State) else None
        if found is not None:
            self._revert(found)

    def _revert(self, found: PodVolumes) -> None:
        for pvc, pv in found.static:
            if self.assumed_pvs.get(pv.name) == pvc:
                del self.assumed_pvs[pv.name]
        for pvc in found.provision:
            self.assumed_pvcs.pop(pvc.key, None)

    async def pre_bind(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """``BindPodVolumes``: the API writes, then wait until every claim is bound."""
        st = state.get(_STATE_KEY)
        if not isinstance(st, _State) or st.all_bound:
            return Status.success()
        found = st.by_node.get(node.name)
        if found is None:
            return Status.error(f'no pod volumes found for node "{node.name}"', plugin=self.name)
        written: dict[str, str] = {}
        try:
            if self.writer is None:
                raise RuntimeError("no API client to bind volumes with")
            for pvc, pv in found.static:
                got = await self.writer.patch_persistent_volume(pv.name, _claim_ref_patch(pv, pvc))
                written[pv.name] = _resource_version(got)
                log.debug("PersistentVolume %s bound to claim %s for pod %s", pv.name, pvc.key, pod.key)
            for pvc in found.provision:
                claim_meta: dict[str, Any] = {"annotations": {ANN_SELECTED_NODE: node.name}}
                if pvc.resource_version:
                    claim_meta["resourceVersion"] = pvc.resource_version
                got = await self.writer.patch_persistent_volume_claim(
                    pvc.namespace, pvc.name, {"metadata": claim_meta}
                )
                written[pvc.key] = _resource_version(got)
            error = await self._wait_bound(found, node, written)
        except Exception as e:  # upstream's AsStatus(err): any failure is an Error, the pod retried
            error = f"{type(e).__name__}: {e}"
        finally:
            self._revert(found)
        return Status.success() if error is None else Status.error(error, plugin=self.name)

    async def _wait_bound(self, found: PodVolumes, node: NodeInfo, written: Mapping[str, str]) -> str | None:
        """Poll ``checkBindings`` every :attr:`poll` seconds up to :attr:`bind_timeout`; the
        error that stops it (None: all bound)."""
        deadline = time.monotonic() + self.bind_timeout
        while True:
            done, error = self.check_bindings(found, node, written)
            if error is not None:
                return f"binding volumes: {error}"
            if done:
                return None
            if time.monotonic() >= deadline:
                return "binding volumes: context deadline exceeded"
            await asyncio.sleep(self.poll)

    def check_bindings(
        self, found: PodVolumes, node: NodeInfo, written: Mapping[str, str]
    ) -> tuple[bool, str | None]:
        """``checkBindings`` against the informers: ``(all bound, error)``; ``written``: the
        resourceVersion of each object PreBind wrote (by volume name or claim key), so that an
        informer that has not seen the write yet is waited for."""
        for pvc, chosen in found.static:
            pv = self.volumes.pv(chosen.name)
            claim = self.volumes.pvc(pvc.namespace, pvc.name)
            if pv is None or claim is None:
                missing = chosen.name if pv is None else pvc.key
                return False, f'failed to check binding: "{missing}" not found'
            if _older(pv.resource_version, written.get(pv.name, "")):
                return False, None  # our write not seen yet
            if not pv.claim_ref or not pv.claim_uid:
                return False, f'ClaimRef got reset for pv "{pv.name}"'
            if not node_affinity_matches(pv, node):
                return False, f"pv {pv.name!r} node affinity doesn't match node {node.name!r}"
            if not fully_bound(claim):
                return False, None
        for pvc in found.provision:
            claim = self.volumes.pvc(pvc.namespace, pvc.name)
            if claim is None:
                return False, f'failed to check provisioning pvc: "{pvc.key}" not found'
            if _older(claim.resource_version, written.get(pvc.key, "")):
                return False, None  # our write not seen yet
            if claim.annotations.get(ANN_SELECTED_NODE) != node.name:
                return False, f'provisioning failed for PVC "{claim.name}"'
            if claim.volume_name:
                pv = self.volumes.pv(claim.volume_name)
                if pv is None:
                    return False, None
                if not node_affinity_matches(pv, node):
                    return False, f"pv {pv.name!r} node affinity doesn't match node {node.name!r}"
            if not fully_bound(claim):
                return False, None
        return True, None

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


def _claim_ref_patch(pv: PVInfo, pvc: PVCInfo) -> dict[str, Any]:
    """The merge patch binding ``pv`` to ``pvc`` (``volume.GetBindVolumeToClaim``): the claim's
    reference, ``pv.kubernetes.io/bound-by-controller: "yes"`` unless the volume was already
    bound to the claim (by a user) or carries it, and the volume's resourceVersion as a
    precondition."""
    meta: dict[str, Any] = {}
    if not bound_to_claim(pv, pvc) and ANN_BOUND_BY_CONTROLLER not in pv.annotations:
        meta["annotations"] = {ANN_BOUND_BY_CONTROLLER: "yes"}
    if pv.resource_version:
        meta["resourceVersion"] = pv.resource_version
    ref = {
        "kind": "PersistentVolumeClaim",
        "apiVersion": "v1",
        "namespace": pvc.namespace,
        "name": pvc.name,
        "uid": pvc.uid,
        "resourceVersion": pvc.resource_version,
    }
    return {"metadata": meta, "spec": {"claimRef": ref}}


def _resource_version(obj: Any) -> str:
    """``metadata.resourceVersion`` of an object as written ("" when it has none)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return rv if isinstance(rv, str) else ""


def _older(seen: str, written: str) -> bool:
    """Whether the informer's ``seen`` resourceVersion predates our ``written`` one (upstream
    compares them as numbers, ``APIObjectVersioner.CompareResourceVersion``); one that is not a
    number is older when it differs. Nothing written: not older."""
    if not written:
        return False
    try:
        return int(seen) < int(written)
    except ValueError:
        return seen != written


def _pod_has_claims(pod: PodInfo, old: object, new: object) -> QueueingHint:
    """``isSchedulableAfterPersistentVolumeChange`` (and the claim's, narrowed to claims of the
    pod's namespace that it names)."""
    if isinstance(new, PVCInfo):
        mine = new.namespace == pod.namespace and new.name in (*pod.pvc_names, *pod.ephemeral_pvc_names)
        return QueueingHint.QUEUE if mine else QueueingHint.SKIP
    return QueueingHint.QUEUE if pod.pvc_names or pod.ephemeral_pvc_names else QueueingHint.SKIP


def new(args: VolumeBindingArgs | None, handle: Handle) -> VolumeBinding:
    """The plugin's factory (registered as :data:`NAME` with :class:`VolumeBindingArgs`): the
    handle's listers, and its client for the writes (None in tests and ``explain``)."""
    timeout = args.bind_timeout_seconds if args is not None else DEFAULT_BIND_TIMEOUT_SECONDS
    client: Any = handle.client
    return VolumeBinding(handle.volumes, cast(VolumeWriter, client) if client is not None else None, timeout)
