"""Validated, immutable views of the Kubernetes objects the scheduler reads.

Raw watch bodies (``dict``) are parsed once here; every value is checked for
type before use, so a malformed object yields a clear ``ValueError`` (or a
safe default for optional fields) instead of a crash deep in a plugin.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import sys
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, TypeVar

from ipscheduler.framework.fields import as_dict, as_list, as_str
from ipscheduler.framework.quantity import parse_quantity, to_units
from ipscheduler.framework.resources import (
    QOS_RANK,
    is_sidecar,
    nonzero_requests_from_spec,
    pod_requests,
    qos_class,
)

POD_PENDING, POD_RUNNING, POD_SUCCEEDED, POD_FAILED = "Pending", "Running", "Succeeded", "Failed"
"""A pod's ``status.phase`` values (core/v1 ``PodPhase``) the scheduler reads."""
TERMINAL_PHASES = frozenset({POD_SUCCEEDED, POD_FAILED})

_V = TypeVar("_V")
_EMPTY_MAP: Mapping[str, Any] = types.MappingProxyType({})
_INTERNED: dict[frozenset[tuple[str, Any]], Mapping[str, Any]] = {}
_INTERNED_MAX = 65536
"""Distinct maps kept for sharing; past it the table starts over (maps already shared stay
shared; only new ones are not matched with old ones)."""


def intern_map(value: Mapping[str, _V]) -> Mapping[str, _V]:
    """One shared, read-only copy of each distinct map (as ``sys.intern`` for strings):
    label sets and request vectors repeat across the pods of a workload, and each dict of
    Decimals costs hundreds of bytes. Keys are interned too. Raises TypeError for
    unhashable values."""
    if not value:
        return _EMPTY_MAP
    k = frozenset(value.items())
    got = _INTERNED.get(k)
    if got is None:
        if len(_INTERNED) >= _INTERNED_MAX:
            _INTERNED.clear()
        got = _INTERNED[k] = types.MappingProxyType({sys.intern(a): b for a, b in value.items()})
    return got


def _str_map(value: Any) -> dict[str, str]:
    return {k: v for k, v in as_dict(value).items() if isinstance(k, str) and isinstance(v, str)}


def parse_time(value: Any) -> datetime.datetime | None:
    """Parse an RFC 3339 timestamp as the API server writes it (``...Z``)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(frozen=True)
class Taint:
    """A node taint (``spec.taints[]``)."""

    key: str
    value: str = ""
    effect: str = ""

    @classmethod
    def from_obj(cls, obj: Any) -> Taint | None:
        d = as_dict(obj)
        if not isinstance(d.get("key"), str):
            return None
        return cls(d["key"], as_str(d.get("value")), as_str(d.get("effect")))

    def __str__(self) -> str:
        # kube-scheduler prints taints as {key: value}
        return f"{{{self.key}: {self.value}}}"


@dataclass(frozen=True)
class Toleration:
    """A pod toleration (``spec.tolerations[]``)."""

    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""

    @classmethod
    def from_obj(cls, obj: Any) -> Toleration | None:
        """None for a non-mapping entry (never an accidental match-all toleration)."""
        if not isinstance(obj, dict):
            return None
        d = obj
        return cls(
            as_str(d.get("key")), as_str(d.get("operator")), as_str(d.get("value")), as_str(d.get("effect"))
        )

    def tolerates(self, taint: Taint) -> bool:
        """Whether this toleration tolerates ``taint``.

        Rule copied from ``staging/src/k8s.io/api/core/v1/toleration.go``
        (ToleratesTaint): effect and key must match when set; operator
        ``Exists`` matches any value, ``Equal`` (or empty) needs equal values;
        an empty key with ``Exists`` matches every taint.
        """
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        return self.operator == "Exists"


@dataclass(frozen=True)
class NodeInfo:
    """What the filters need to know about a node.

    ``allocatable`` maps resource names to quantities (cpu in cores,
    memory in bytes) as Decimals.
    """

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    ready: bool = False
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    allocatable: Mapping[str, Decimal] = field(default_factory=dict)
    uid: str = ""
    pods: tuple[PodInfo, ...] = ()
    """Non-terminal pods bound to this node (any scheduler); filled per scheduling cycle."""
    memo: dict[int, Any] = field(default_factory=dict, init=False, compare=False, repr=False)
    """Results kept for this very object by :class:`~ipscheduler.framework.nodememo.NodeMemo`
    (shape id → result). Not copied by ``dataclasses.replace``: a changed node starts empty."""

    @functools.cached_property
    def requested(self) -> dict[str, Decimal]:
        """Sum of :func:`~ipscheduler.framework.resources.pod_requests` over :attr:`pods`,
        plus ``pods`` = their count."""
        total: dict[str, Decimal] = {"pods": Decimal(len(self.pods))}
        for p in self.pods:
            for k, v in p.requests.items():
                total[k] = total.get(k, Decimal(0)) + v
        return total

    @functools.cached_property
    def allocatable_units(self) -> dict[str, int]:
        """:attr:`allocatable` in the scheduler's integer units (:func:`to_units`: millicores
        for cpu), computed once per NodeInfo object, as upstream's ``NodeInfo.Allocatable``."""
        return {k: to_units(k, v) for k, v in self.allocatable.items()}

    @functools.cached_property
    def requested_units(self) -> dict[str, int]:
        """:attr:`requested` in the scheduler's integer units (:func:`to_units`), computed once
        per NodeInfo object, as upstream's ``NodeInfo.Requested``."""
        return {k: to_units(k, v) for k, v in self.requested.items()}

    @functools.cached_property
    def used_ports(self) -> frozenset[HostPort]:
        """Host ports taken by :attr:`pods`."""
        return frozenset(hp for p in self.pods for hp in p.host_ports)

    @classmethod
    def from_obj(cls, body: Mapping[str, Any]) -> NodeInfo:
        """Parse a Node. Raises ValueError if it has no name."""
        meta = as_dict(body.get("metadata"))
        spec = as_dict(body.get("spec"))
        status = as_dict(body.get("status"))
        name = as_str(meta.get("name"))
        if not name:
            raise ValueError("node without metadata.name")
        ready = any(
            as_dict(c).get("type") == "Ready" and as_dict(c).get("status") == "True"
            for c in as_list(status.get("conditions"))
        )
        taints = tuple(t for t in (Taint.from_obj(x) for x in as_list(spec.get("taints"))) if t)
        alloc: dict[str, Decimal] = {}
        for k, v in as_dict(status.get("allocatable")).items():
            try:
                alloc[str(k)] = parse_quantity(v)
            except ValueError:
                continue
        return cls(
            name=name,
            labels=_str_map(meta.get("labels")),
            ready=ready,
            unschedulable=spec.get("unschedulable") is True,
            taints=taints,
            allocatable=alloc,
            uid=as_str(meta.get("uid")),
        )


class Snapshot(dict[str, NodeInfo]):
    """The nodes of one scheduling cycle by name, with upstream's shortcut list
    ``HavePodsWithAffinityNodeInfoList`` (``pkg/scheduler/backend/cache/snapshot.go``):
    :attr:`have_pods_with_affinity` holds the nodes with at least one pod that
    :meth:`PodInfo.has_pod_affinity`, so InterPodAffinity visits only those for a pod
    without terms of its own. Kept by the cache's snapshot; a plain mapping works as well
    (every node is visited then)."""

    def __init__(self) -> None:
        super().__init__()
        self.have_pods_with_affinity: dict[str, NodeInfo] = {}

    def put(self, node: NodeInfo) -> None:
        """Add or replace ``node``, keeping :attr:`have_pods_with_affinity` in step."""
        self[node.name] = node
        if any(p.has_pod_affinity for p in node.pods):
            self.have_pods_with_affinity[node.name] = node
        else:
            self.have_pods_with_affinity.pop(node.name, None)

    def drop(self, name: str) -> None:
        """Remove node ``name`` (no error when absent)."""
        self.pop(name, None)
        self.have_pods_with_affinity.pop(name, None)


@dataclass(frozen=True)
class OwnerRef:
    """A pod's controller (the ``ownerReferences`` entry with ``controller: true``):
    ``kind`` (e.g. ``StatefulSet``), ``name`` and ``uid``."""

    kind: str
    name: str
    uid: str

    @classmethod
    def controller_of(cls, meta: Mapping[str, Any]) -> OwnerRef | None:
        """The controller reference of an object's ``metadata``; None when it has none or
        it lacks a kind, name or UID (as ``metav1.GetControllerOf``,
        ``staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/controller_ref.go``)."""
        for raw in as_list(meta.get("ownerReferences")):
            ref = as_dict(raw)
            if ref.get("controller") is True:
                kind, name, uid = as_str(ref.get("kind")), as_str(ref.get("name")), as_str(ref.get("uid"))
                return cls(sys.intern(kind), name, uid) if kind and name and uid else None
        return None


PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
"""``spec.preemptionPolicy`` default: the pod may preempt pods of lower priority."""
PREEMPT_NEVER = "Never"
"""``spec.preemptionPolicy: Never``: the pod waits instead of preempting."""
REASON_PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"
"""The ``DisruptionTarget`` condition's reason on a victim of preemption
(``v1.PodReasonPreemptionByScheduler``)."""


@dataclass(frozen=True)
class PodInfo:
    """What the scheduler needs to know about a pod.

    ``affinity`` is the raw ``spec.affinity`` mapping (plugins parse the
    parts they use); ``creation`` is the creation timestamp (UTC).
    """

    uid: str
    namespace: str
    name: str
    scheduler_name: str = "default-scheduler"
    node_name: str = ""
    phase: str = POD_PENDING
    deleting: bool = False
    priority: int = 0
    qos_class: str = "BestEffort"
    creation: datetime.datetime | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: Mapping[str, Any] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    host_network: bool = False
    annotations: Mapping[str, str] = field(default_factory=dict)
    scheduling_gates: tuple[str, ...] = ()
    resource_version: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    requests: Mapping[str, Decimal] = field(default_factory=dict)
    host_ports: tuple[HostPort, ...] = ()
    topology_spread: tuple[Mapping[str, Any], ...] = ()
    nonzero_requests: Mapping[str, Decimal] | None = None
    """cpu/memory with kube-scheduler's scoring defaults (100m / 200Mi per container lacking one)."""
    owner: OwnerRef | None = None
    """The pod's controller (e.g. its StatefulSet), kept in the lean form too."""
    generate_name: str = ""
    """``metadata.generateName``: set when the API server made up the pod's name."""
    start_time: datetime.datetime | None = None
    """``status.startTime`` (UTC): when a kubelet took the pod; preemption evicts the pods
    that started last first among equals."""
    preemption_policy: str = PREEMPT_LOWER_PRIORITY
    """``spec.preemptionPolicy``: ``PreemptLowerPriority`` (the default) or ``Never``."""
    nominated_node_name: str = ""
    """``status.nominatedNodeName``: the node a scheduler's preemption made room on."""
    preempted: bool = False
    """Being ended by a scheduler's preemption: the ``DisruptionTarget`` condition is True
    with reason ``PreemptionByScheduler`` (upstream ``podTerminatingByPreemption`` also
    asks for a deletionTimestamp, see :attr:`deleting`)."""
    pvc_names: tuple[str, ...] = ()
    """``claimName`` of each ``spec.volumes[].persistentVolumeClaim``, in order ("" kept: the
    volume plugins refuse a claim without a name); kept in the lean form (ReadWriteOncePod,
    attach limits)."""
    ephemeral_pvc_names: tuple[str, ...] = ()
    """The claim of each generic ephemeral volume (``spec.volumes[].ephemeral``): ``<pod
    name>-<volume name>`` (``ephemeral.VolumeClaimName``); kept in the lean form."""
    disk_volumes: tuple[DiskVolume, ...] = ()
    """The inline GCE PD, AWS EBS, RBD and iSCSI volumes (VolumeRestrictions' same-disk
    rules); kept in the lean form (rare, and small)."""

    @property
    def key(self) -> str:
        """``namespace/name``, the form kube-scheduler prints."""
        return f"{self.namespace}/{self.name}"

    @property
    def ref(self) -> dict[str, str]:
        """The pod as an object reference (an event's ``involvedObject``: kind, apiVersion,
        name, namespace, uid; an empty uid left out)."""
        ref = {"kind": "Pod", "apiVersion": "v1", "name": self.name, "namespace": self.namespace}
        if self.uid:
            ref["uid"] = self.uid
        return ref

    @property
    def has_pod_affinity(self) -> bool:
        """Whether ``spec.affinity`` has a ``podAffinity`` or ``podAntiAffinity`` (upstream
        ``PodInfo.RequiredAffinityTerms`` and friends are parsed from them)."""
        return bool(self.affinity) and bool(
            self.affinity.get("podAffinity") or self.affinity.get("podAntiAffinity")
        )

    def lean(self, keep_annotations: str | None = None) -> PodInfo:
        """The form the cache keeps for a pod bound to a node (any scheduler's): what the
        filters and the pool controller read of pods already placed, and no more.

        - annotations: only those whose key starts with ``keep_annotations`` (None: none;
          the wiring passes the prefix of the annotations an out-of-tree wing reads back);
        - tolerations, nodeSelector, topologySpreadConstraints and scheduling gates:
          dropped (only the pod being scheduled is asked for them);
        - labels, requests, non-zero requests and annotations maps, and the namespace,
          schedulerName, nodeName, phase and QoS strings: shared with every equal value
          (pods of one workload carry the same ones), see :func:`intern_map`.

        Each field kept is equal to the original's, so comparisons of lean forms work.
        """
        return dataclasses.replace(
            self,
            namespace=sys.intern(self.namespace),
            scheduler_name=sys.intern(self.scheduler_name),
            node_name=sys.intern(self.node_name),
            phase=sys.intern(self.phase),
            qos_class=sys.intern(self.qos_class),
            node_selector=_EMPTY_MAP,
            tolerations=(),
            annotations=intern_map(
                {
                    k: v
                    for k, v in self.annotations.items()
                    if keep_annotations and k.startswith(keep_annotations)
                }
            ),
            scheduling_gates=(),
            labels=intern_map(self.labels),
            requests=intern_map(self.requests),
            topology_spread=(),
            nonzero_requests=None if self.nonzero_requests is None else intern_map(self.nonzero_requests),
        )

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def bound(self) -> bool:
        return bool(self.node_name)

    @classmethod
    def from_obj(cls, body: Mapping[str, Any]) -> PodInfo:
        """Parse a Pod. Raises ValueError if uid, namespace or name is missing."""
        meta = as_dict(body.get("metadata"))
        spec = as_dict(body.get("spec"))
        status = as_dict(body.get("status"))
        uid, ns, name = as_str(meta.get("uid")), as_str(meta.get("namespace")), as_str(meta.get("name"))
        if not (uid and ns and name):
            raise ValueError("pod without metadata.uid/namespace/name")
        priority = spec.get("priority")
        qos = as_str(status.get("qosClass"))
        if qos not in QOS_RANK:
            qos = qos_class(spec)
        return cls(
            uid=uid,
            namespace=ns,
            name=name,
            scheduler_name=as_str(spec.get("schedulerName"), "default-scheduler"),
            node_name=as_str(spec.get("nodeName")),
            phase=as_str(status.get("phase"), POD_PENDING),
            deleting=meta.get("deletionTimestamp") is not None,
            priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
            qos_class=qos,
            creation=parse_time(meta.get("creationTimestamp")),
            node_selector=_str_map(spec.get("nodeSelector")),
            affinity=as_dict(spec.get("affinity")),
            tolerations=tuple(t for t in map(Toleration.from_obj, as_list(spec.get("tolerations"))) if t),
            host_network=spec.get("hostNetwork") is True,
            annotations=_str_map(meta.get("annotations")),
            scheduling_gates=tuple(
                as_str(as_dict(g).get("name")) for g in as_list(spec.get("schedulingGates"))
            ),
            resource_version=as_str(meta.get("resourceVersion")),
            labels=_str_map(meta.get("labels")),
            requests=pod_requests(spec),
            host_ports=host_ports(spec),
            topology_spread=tuple(as_dict(c) for c in as_list(spec.get("topologySpreadConstraints"))),
            nonzero_requests=nonzero_requests_from_spec(spec),
            owner=OwnerRef.controller_of(meta),
            generate_name=as_str(meta.get("generateName")),
            start_time=parse_time(status.get("startTime")),
            preemption_policy=PREEMPT_NEVER
            if spec.get("preemptionPolicy") == PREEMPT_NEVER
            else PREEMPT_LOWER_PRIORITY,
            nominated_node_name=as_str(status.get("nominatedNodeName")),
            preempted=any(
                as_dict(c).get("type") == "DisruptionTarget"
                and as_dict(c).get("status") == "True"
                and as_dict(c).get("reason") == REASON_PREEMPTION_BY_SCHEDULER
                for c in as_list(status.get("conditions"))
            ),
            **_volumes(name, spec),
        )


def _volumes(pod_name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The :class:`PodInfo` volume fields of ``spec.volumes`` (entries of the wrong type are
    left out)."""
    pvcs: list[str] = []
    ephemeral: list[str] = []
    disks: list[DiskVolume] = []
    for raw in as_list(spec.get("volumes")):
        vol = as_dict(raw)
        if "persistentVolumeClaim" in vol:
            pvcs.append(sys.intern(as_str(as_dict(vol.get("persistentVolumeClaim")).get("claimName"))))
        elif "ephemeral" in vol:
            ephemeral.append(f"{pod_name}-{as_str(vol.get('name'))}")
        else:
            disk = DiskVolume.from_volume(vol)
            if disk is not None:
                disks.append(disk)
    return {"pvc_names": tuple(pvcs), "ephemeral_pvc_names": tuple(ephemeral), "disk_volumes": tuple(disks)}


@dataclass(frozen=True)
class DiskVolume:
    """An inline volume VolumeRestrictions checks for a same-disk conflict: ``kind`` one of
    ``gcePersistentDisk`` (``disk`` its ``pdName``), ``awsElasticBlockStore`` (``volumeID``),
    ``iscsi`` (``iqn``), ``rbd`` (``disk`` ``<pool>/<image>``, ``monitors`` its
    ``monitors``); ``read_only`` its ``readOnly``."""

    kind: str
    disk: str
    read_only: bool = False
    monitors: tuple[str, ...] = ()

    KINDS = ("gcePersistentDisk", "awsElasticBlockStore", "iscsi", "rbd")

    @classmethod
    def from_volume(cls, vol: Mapping[str, Any]) -> DiskVolume | None:
        """The disk of one ``spec.volumes[]`` entry, None for any other kind of volume."""
        for kind in cls.KINDS:
            src = vol.get(kind)
            if not isinstance(src, dict):
                continue
            ro = src.get("readOnly") is True
            if kind == "gcePersistentDisk":
                return cls(kind, as_str(src.get("pdName")), ro)
            if kind == "awsElasticBlockStore":
                return cls(kind, as_str(src.get("volumeID")), ro)
            if kind == "iscsi":
                return cls(kind, as_str(src.get("iqn")), ro)
            monitors = tuple(m for m in as_list(src.get("monitors")) if isinstance(m, str))
            disk = f"{as_str(src.get('pool'), 'rbd')}/{as_str(src.get('image'))}"
            return cls(kind, disk, ro, monitors)
        return None

    def conflicts(self, other: DiskVolume) -> bool:
        """Whether two pods mounting ``self`` and ``other`` conflict (upstream
        ``isVolumeConflict``, ``pkg/scheduler/framework/plugins/volumerestrictions/
        volume_restrictions.go``): the same GCE PD unless both read-only; the same EBS volume
        ID always; the same iSCSI IQN unless both read-only; an RBD image of the same pool
        with a Ceph monitor in common unless both read-only."""
        if self.kind != other.kind or self.disk != other.disk:
            return False
        both_ro = self.read_only and other.read_only
        if self.kind == "awsElasticBlockStore":
            return True
        if self.kind == "rbd":
            return bool(set(self.monitors) & set(other.monitors)) and not both_ro
        return not both_ro


@dataclass(frozen=True)
class HostPort:
    """A container's ``hostPort`` (``hostIP`` "" means all addresses, 0.0.0.0)."""

    host_ip: str
    protocol: str
    port: int

    def conflicts(self, other: HostPort) -> bool:
        """Same port and protocol, and the addresses overlap.

        Rule from ``pkg/scheduler/framework/types.go`` (HostPortInfo.CheckConflict):
        0.0.0.0 (or "") conflicts with every address.
        """
        if self.port != other.port or self.protocol != other.protocol:
            return False
        wildcard = ("", "0.0.0.0")
        return self.host_ip in wildcard or other.host_ip in wildcard or self.host_ip == other.host_ip


def host_ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    """Host ports of app containers and sidecar init containers (``restartPolicy: Always``)."""
    containers = as_list(spec.get("containers")) + [
        c for c in as_list(spec.get("initContainers")) if is_sidecar(c)
    ]
    out = []
    for c in containers:
        for port in as_list(as_dict(c).get("ports")):
            d = as_dict(port)
            hp = d.get("hostPort")
            if isinstance(hp, int) and not isinstance(hp, bool) and 0 < hp < 65536:
                out.append(HostPort(as_str(d.get("hostIP")), as_str(d.get("protocol"), "TCP") or "TCP", hp))
    return tuple(out)
