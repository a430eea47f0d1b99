"""The volume binder under VolumeBinding: what a pod's claims need on a node, and the writes
that bind them.

Mirrors kube-scheduler 1.34's ``pkg/scheduler/framework/plugins/volumebinding/binder.go``
(with ``FindMatchingVolume`` and ``CheckNodeAffinity`` of
``k8s.io/component-helpers/storage/volume``). It knows nothing of the framework: it returns
plain results (:class:`PodVolumeClaims`, :class:`PodVolumes`, :class:`ConflictReason`) and
raises :class:`VolumeBindingError` where upstream returns an error; ``plugin.py`` makes the
statuses and their messages.

* :meth:`VolumeBinder.get_pod_volume_claims` (``GetPodVolumeClaims``): the pod's claims
  (``persistentVolumeClaim`` and generic ``ephemeral`` volumes) sorted. A claim is bound when
  it has ``spec.volumeName`` and the ``pv.kubernetes.io/bind-completed`` annotation; an
  unbound one of a ``WaitForFirstConsumer`` class without ``spec.volumeName`` is for the
  scheduler to bind; any other unbound claim is immediate (a class without
  ``volumeBindingMode`` → error, an unknown class counts as Immediate). The candidate volumes
  of each class of the claims to bind are listed here, once per cycle (not when a claim is
  immediate: the pod goes nowhere then).
* :meth:`VolumeBinder.find_pod_volumes` (``FindPodVolumes``): the node's
  :class:`PodVolumes` and the reasons it does not fit (one at a time):

  - each bound claim's volume must exist (:attr:`ConflictReason.PV_NOT_EXIST`) and its
    ``spec.nodeAffinity.required`` match the node's labels
    (:attr:`ConflictReason.NODE_CONFLICT`);
  - a claim to bind that carries ``volume.kubernetes.io/selected-node`` fits only that node;
    the others, smallest request first, each take the smallest volume of their class not
    chosen yet (:func:`find_matching_volume`): pre-bound to the claim (its node affinity must
    match, else no match), or ``Available``, unclaimed, not being deleted, as big as the
    request, of the claim's volume mode and class, with every access mode the claim asks
    for, the claim's ``selector`` matching its labels, and its node affinity matching;
  - a claim without a match is provisioned if its class has a provisioner (not
    ``kubernetes.io/no-provisioner``) whose ``allowedTopologies`` admit the node; otherwise
    :attr:`ConflictReason.BIND_CONFLICT`. A claim to provision without a class → error
    ``no class for claim "<ns>/<name>"``; its class gone → error
    ``failed to find storage class "<name>"``.

* :meth:`VolumeBinder.assume_pod_volumes` (``AssumePodVolumes``): the chosen volumes are
  assumed claimed by their claims, the claims to provision assumed annotated with the node;
  every later read of the binder (other pods' cycles) sees them so.
  :meth:`VolumeBinder.revert_assumed_pod_volumes` drops them (idempotent).
* :meth:`VolumeBinder.bind_pod_volumes` (``BindPodVolumes``): merge-patch each chosen
  volume's ``spec.claimRef`` (and ``pv.kubernetes.io/bound-by-controller: "yes"``),
  conditional on the resourceVersion seen; merge-patch each claim to provision with
  ``volume.kubernetes.io/selected-node``; then poll the listers every second, for
  ``bindTimeoutSeconds`` (600 s), until every claim is bound (kube-controller-manager's PV
  controller does it). A volume's claimRef reset, a ``selected-node`` annotation removed (the
  provisioner gave up), a node affinity that no longer matches, or the timeout → error.
  Whatever the outcome, the pod's assumptions are dropped when it ends.

The assumptions (upstream's ``assume_cache.go``) are two maps here, :attr:`VolumeBinder.assumed_pvs`
and :attr:`VolumeBinder.assumed_pvcs`, laid over the listers' views by the binder's own reads.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

from ipscheduler.framework.labels import InvalidSelectorError, LabelSelector
from ipscheduler.framework.quantity import parse_quantity
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.framework.volumes import (
    ANN_BIND_COMPLETED,
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
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
from ipscheduler.plugins.helper import match_node_selector_terms

log = logging.getLogger(__name__)

DEFAULT_BIND_TIMEOUT_SECONDS = 600
POLL_SECONDS = 1.0


class VolumeBindingError(Exception):
    """What stops the binder (upstream's returned ``error``); its text is the message."""


class ConflictReason(enum.Enum):
    """Why a node does not fit the pod's claims (upstream's ``ConflictReason``; the plugin
    words them)."""

    BIND_CONFLICT = enum.auto()
    """A claim to bind finds no volume and cannot be provisioned there."""
    NODE_CONFLICT = enum.auto()
    """A bound claim's volume's node affinity does not match the node."""
    PV_NOT_EXIST = enum.auto()
    """A bound claim's volume does not exist."""


@dataclass
class PodVolumeClaims:
    """The pod's claims, sorted (upstream ``PodVolumeClaims``)."""

    bound: list[PVCInfo] = field(default_factory=list)
    """``boundClaims``."""
    to_bind: list[PVCInfo] = field(default_factory=list)
    """``unboundClaimsDelayBinding``: for the scheduler to bind."""
    immediate: list[PVCInfo] = field(default_factory=list)
    """``unboundClaimsImmediate``: unbound, and not the scheduler's to bind."""
    candidates: dict[str, list[PVInfo]] = field(default_factory=dict)
    """``unboundVolumesDelayBinding``: class name → its volumes (with the assumed claimRefs)."""


@dataclass
class PodVolumes:
    """What a node needs for the pod (upstream ``PodVolumes``): ``static`` (claim, volume)
    bindings and the claims to ``provision`` there."""

    static: list[tuple[PVCInfo, PVInfo]] = field(default_factory=list)
    provision: list[PVCInfo] = field(default_factory=list)


class SchedulerVolumeBinder(Protocol):
    """What VolumeBinding asks of a binder (upstream's ``SchedulerVolumeBinder``). What stops
    one raises :class:`VolumeBindingError` (upstream's returned error); the binding also lets
    what a write raised through."""

    def get_pod_volume_claims(self, pod: PodInfo) -> PodVolumeClaims:
        """The pod's claims sorted, with the candidate volumes of the claims to bind."""
        ...

    def find_pod_volumes(
        self, claims: PodVolumeClaims, node: NodeInfo
    ) -> tuple[PodVolumes, list[ConflictReason]]:
        """What ``node`` needs for the claims, and why it does not fit (empty: it fits)."""
        ...

    def assume_pod_volumes(self, node: str, volumes: PodVolumes) -> bool:
        """Assume ``volumes`` taken on ``node``; whether the pod's claims were all bound."""
        ...

    def revert_assumed_pod_volumes(self, volumes: PodVolumes) -> None:
        """Drop the assumptions of :meth:`assume_pod_volumes` (idempotent)."""
        ...

    async def bind_pod_volumes(self, pod: PodInfo, node: NodeInfo, volumes: PodVolumes) -> None:
        """Write the bindings and provisions, and wait until every claim is bound."""
        ...


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


class VolumeBinder:
    """The :class:`SchedulerVolumeBinder` over the storage listers and writes (see the module
    doc). One per profile: its assumptions are shared by every cycle."""

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

    def get_pod_volume_claims(self, pod: PodInfo) -> PodVolumeClaims:
        """Sort the pod's claims into bound, to bind and immediate; list the candidates."""
        out = PodVolumeClaims()
        for name in (*pod.pvc_names, *pod.ephemeral_pvc_names):
            pvc = self._claim(pod.namespace, name)
            if pvc is None:
                raise VolumeBindingError(not_found(RESOURCE_PVC, name))
            if fully_bound(pvc):
                out.bound.append(pvc)
                continue
            delayed = False
            if pvc.storage_class:
                cls = self.volumes.storage_class(pvc.storage_class)
                if cls is not None:
                    if cls.volume_binding_mode is None:
                        raise VolumeBindingError(
                            f'VolumeBindingMode not set for StorageClass "{pvc.storage_class}"'
                        )
                    delayed = cls.volume_binding_mode == WAIT_FOR_FIRST_CONSUMER
            (out.to_bind if delayed and not pvc.volume_name else out.immediate).append(pvc)
        if out.immediate:
            return out
        out.candidates = {pvc.storage_class: [] for pvc in out.to_bind}
        if out.candidates:
            for pv in self.volumes.list_pvs():
                if pv.storage_class in out.candidates:
                    out.candidates[pv.storage_class].append(self._volume(pv))
        return out

    # -- Filter -------------------------------------------------------------------------------

    def find_pod_volumes(
        self, claims: PodVolumeClaims, node: NodeInfo
    ) -> tuple[PodVolumes, list[ConflictReason]]:
        """``FindPodVolumes``: the node's :class:`PodVolumes` and the reasons it does not fit
        (empty: it fits)."""
        found = PodVolumes()
        for pvc in claims.bound:
            pv = self.volumes.pv(pvc.volume_name)
            if pv is None:
                return found, [ConflictReason.PV_NOT_EXIST]
            if not node_affinity_matches(pv, node):
                return found, [ConflictReason.NODE_CONFLICT]
        if not claims.to_bind:
            return found, []
        to_match: list[PVCInfo] = []
        to_provision: list[PVCInfo] = []
        for pvc in claims.to_bind:
            selected = pvc.annotations.get(ANN_SELECTED_NODE)
            if selected is not None:
                if selected != node.name:
                    return found, [ConflictReason.BIND_CONFLICT]
                to_provision.append(pvc)
            else:
                to_match.append(pvc)
        chosen: set[str] = set()
        for pvc in sorted(to_match, key=lambda c: _size(c.storage)):
            pv = find_matching_volume(pvc, claims.candidates.get(pvc.storage_class, []), node, chosen)
            if pv is None:
                to_provision.append(pvc)
                continue
            chosen.add(pv.name)
            found.static.append((pvc, pv))
        for pvc in to_provision:
            if not pvc.storage_class:
                raise VolumeBindingError(f'no class for claim "{pvc.key}"')
            cls = self.volumes.storage_class(pvc.storage_class)
            if cls is None:
                raise VolumeBindingError(f'failed to find storage class "{pvc.storage_class}"')
            if cls.provisioner in ("", NOT_SUPPORTED_PROVISIONER) or not topology_allows(cls, node):
                return found, [ConflictReason.BIND_CONFLICT]
            found.provision.append(pvc)
        return found, []

    # -- Reserve, Unreserve -------------------------------------------------------------------

    def assume_pod_volumes(self, node: str, volumes: PodVolumes) -> bool:
        """``AssumePodVolumes``: assume the node's bindings and provisions; True when there is
        nothing to bind (every claim of the pod was bound)."""
        for pvc, pv in volumes.static:
            self.assumed_pvs[pv.name] = pvc
        for pvc in volumes.provision:
            self.assumed_pvcs[pvc.key] = node
        return not volumes.static and not volumes.provision

    def revert_assumed_pod_volumes(self, volumes: PodVolumes) -> None:
        """``RevertAssumedPodVolumes``: drop these assumptions, those still held for these
        claims only (idempotent)."""
        for pvc, pv in volumes.static:
            if self.assumed_pvs.get(pv.name) == pvc:
                del self.assumed_pvs[pv.name]
        for pvc in volumes.provision:
            self.assumed_pvcs.pop(pvc.key, None)

    # -- PreBind ------------------------------------------------------------------------------

    async def bind_pod_volumes(self, pod: PodInfo, node: NodeInfo, volumes: PodVolumes) -> None:
        """``BindPodVolumes``: the API writes, then wait until every claim is bound; the
        assumptions are dropped whatever the outcome. Raises :class:`VolumeBindingError` when
        the binding fails, and what a write raised."""
        written: dict[str, str] = {}
        try:
            if self.writer is None:
                raise RuntimeError("no API client to bind volumes with")
            for pvc, pv in volumes.static:
                got = await self.writer.patch_persistent_volume(pv.name, _claim_ref_patch(pv, pvc))
                written[pv.name] = _resource_version(got)
                log.debug("PersistentVolume %s bound to claim %s for pod %s", pv.name, pvc.key, pod.key)
            for pvc in volumes.provision:
                claim_meta: dict[str, Any] = {"annotations": {ANN_SELECTED_NODE: node.name}}
                if pvc.resource_version:
                    claim_meta["resourceVersion"] = pvc.resource_version
                got = await self.writer.patch_persistent_volume_claim(
                    pvc.namespace, pvc.name, {"metadata": claim_meta}
                )
                written[pvc.key] = _resource_version(got)
            await self._wait_bound(volumes, node, written)
        finally:
            self.revert_assumed_pod_volumes(volumes)

    async def _wait_bound(self, volumes: PodVolumes, node: NodeInfo, written: Mapping[str, str]) -> None:
        """Poll :meth:`check_bindings` every :attr:`poll` seconds up to :attr:`bind_timeout`."""
        deadline = time.monotonic() + self.bind_timeout
        while True:
            done, error = self.check_bindings(volumes, node, written)
            if error is not None:
                raise VolumeBindingError(f"binding volumes: {error}")
            if done:
                return
            if time.monotonic() >= deadline:
                raise VolumeBindingError("binding volumes: context deadline exceeded")
            await asyncio.sleep(self.poll)

    def check_bindings(
        self, volumes: PodVolumes, node: NodeInfo, written: Mapping[str, str]
    ) -> tuple[bool, str | None]:
        """``checkBindings`` against the listers: ``(all bound, error)``; ``written``: the
        resourceVersion of each object PreBind wrote (by volume name or claim key), so that an
        informer that has not seen the write yet is waited for."""
        for pvc, chosen in volumes.static:
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
        for pvc in volumes.provision:
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
