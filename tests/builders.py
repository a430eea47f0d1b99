"""The objects tests are made of, built in one place (in the spirit of upstream's
``st.MakePod().Name(..).Node(..).Obj()`` wrappers in ``pkg/scheduler/testing``, with
keyword arguments instead of chained setters).

Raw bodies (``*_body``) are dicts as the API server returns them; ``pod``, ``node`` and
``pool`` are the scheduler's parsed views of them. Every argument left out is left out of
the body too, so a test names exactly the fields it is about.
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
import socket
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ipscheduler.framework.quantity import parse_quantity
from ipscheduler.framework.types import NodeInfo, PodInfo, Taint
from ipscheduler.underlayip.addresses import AddressSet
from ipscheduler.underlayip.models import ANNOTATION_IP, ANNOTATION_NETWORK, ANNOTATION_POOL, NodeIPPoolStatus
from ipscheduler.underlayip.pool import PoolContext, PoolView

SINCE = "2024-01-01T00:00:00Z"
"""The timestamp of every allocation and deletion a test does not date itself."""
SINCE_TIME = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
""":data:`SINCE` as the status models parse it."""
NOW = datetime.datetime(2024, 6, 1, 12, 0, 0, tzinfo=datetime.UTC)
"""The present of the tests that age allocations."""


def ago(seconds: float) -> str:
    """The RFC 3339 timestamp ``seconds`` before :data:`NOW` (negative: after)."""
    return (NOW - datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


_uids = itertools.count()


def _given(**fields: Any) -> dict[str, Any]:
    """The fields that are not None (a body names only what a test gives)."""
    return {k: v for k, v in fields.items() if v is not None}


def _copy(mapping: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return dict(mapping) if mapping is not None else None


# --------------------------------------------------------------------------- pods


def container(
    requests: Mapping[str, str | int] | None = None,
    limits: Mapping[str, str | int] | None = None,
    *,
    ports: list[dict[str, Any]] | None = None,
    sidecar: bool = False,
    name: str | None = None,
) -> dict[str, Any]:
    """A raw container (named ``c<n>`` unless ``name``); ``sidecar`` sets ``restartPolicy:
    Always`` (for initContainers)."""
    resources = _given(requests=_copy(requests), limits=_copy(limits))
    return _given(
        name=name if name is not None else f"c{next(_uids)}",
        resources=resources or None,
        ports=ports,
        restartPolicy="Always" if sidecar else None,
    )


def pod_body(
    *containers: dict[str, Any],
    uid: str | None = None,
    name: str | None = None,
    namespace: str = "ns",
    node: str | None = None,
    scheduler: str | None = None,
    phase: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    deleting: bool = False,
    init: Iterable[dict[str, Any]] = (),
    node_selector: Mapping[str, str] | None = None,
    tolerations: list[dict[str, str]] | None = None,
    spread: Iterable[Mapping[str, Any]] = (),
    **spec: Any,
) -> dict[str, Any]:
    """A raw Pod with these app containers (none if not given) and init containers.

    ``uid`` defaults to a fresh ``uid-<n>``, ``name`` to ``pod-<uid>``; ``node`` is
    ``spec.nodeName`` ("" is kept: a pending pod as kopf's watch sends it), ``phase`` the
    ``status.phase``, ``deleting`` sets ``deletionTimestamp``; ``node_selector``,
    ``tolerations`` and ``spread`` (topologySpreadConstraints) are set when not empty. Other
    keyword arguments are spec fields as the API spells them (``affinity=...``,
    ``hostNetwork=True``).
    """
    uid = uid if uid is not None else f"uid-{next(_uids)}"
    meta = _given(
        uid=uid,
        namespace=namespace,
        name=name if name is not None else f"pod-{uid}",
        labels=_copy(labels),
        annotations=_copy(annotations),
        deletionTimestamp=SINCE if deleting else None,
    )
    body_spec = _given(
        schedulerName=scheduler,
        nodeName=node,
        containers=list(containers),
        initContainers=list(init) or None,
        nodeSelector=dict(node_selector) if node_selector else None,
        tolerations=tolerations or None,
        topologySpreadConstraints=list(spread) or None,
    )
    body_spec.update(spec)
    status = {"phase": phase} if phase is not None else None
    return _given(apiVersion="v1", kind="Pod", metadata=meta, spec=body_spec, status=status)


def pod(*containers: dict[str, Any], **kw: Any) -> PodInfo:
    """:func:`pod_body`, parsed as the informers parse it."""
    return PodInfo.from_obj(pod_body(*containers, **kw))


def workload_pod(name: str = "p", ns: str = "default", terminating: bool = False, **kw: Any) -> PodInfo:
    """A pod as the affinity and spread cases write them: one container ``c``, in namespace
    ``ns``, always labelled (``labels={}`` unless given), ``terminating`` or not; ``kw`` as for
    :func:`pod_body` (``affinity``, ``spread``, ``node_selector``, ``tolerations``)."""
    labels = kw.pop("labels", None) or {}
    return pod(container(name="c"), name=name, namespace=ns, labels=labels, deleting=terminating, **kw)


def pod_info(name: str = "pod", *, uid: str | None = None, namespace: str = "ns", **fields: Any) -> PodInfo:
    """A PodInfo built directly (no API body, nothing derived from a spec): the identity
    (``uid`` defaults to ``uid-<name>``) and the fields a test names."""
    return PodInfo(uid=uid if uid is not None else f"uid-{name}", namespace=namespace, name=name, **fields)


SCHEDULER = "ip-scheduler"
"""The schedulerName of the pods the unit tests schedule (``run``'s default)."""


def pending_pod_body(
    uid: str = "u1", name: str | None = None, *, node: str = "", phase: str = "Pending", **kw: Any
) -> dict[str, Any]:
    """A pod of our scheduler as kopf's pending-pod watch sends it: one container, ``nodeName``
    "" and Pending unless told; ``kw`` as for :func:`pod_body`."""
    return pod_body(
        container(name="c"), uid=uid, name=name, node=node, phase=phase, scheduler=SCHEDULER, **kw
    )


def ours(pool: str | None = None, ip: str | None = None, network: str | None = None) -> dict[str, str]:
    """The annotations UnderlayIP's PreBind writes on a pod (those given)."""
    return _given(**{ANNOTATION_POOL: pool, ANNOTATION_IP: ip, ANNOTATION_NETWORK: network})


def label_selector(**match_labels: str) -> dict[str, Any]:
    """A LabelSelector of ``matchLabels``."""
    return {"matchLabels": match_labels}


def label_selector_exprs(*items: tuple[str, str, list[str]]) -> dict[str, Any]:
    """A LabelSelector of ``matchExpressions``: ``(key, operator, values)`` each."""
    return {"matchExpressions": [{"key": k, "operator": op, "values": v} for k, op, v in items]}


def affinity_term(
    selector: Any, key: str, namespaces: list[str] | None = None, ns_selector: Any = "absent"
) -> dict[str, Any]:
    """A PodAffinityTerm (``ns_selector`` None is a null namespaceSelector; left out by default)."""
    t = _given(labelSelector=selector, topologyKey=key, namespaces=namespaces)
    if ns_selector != "absent":
        t["namespaceSelector"] = ns_selector
    return t


def pod_affinity(
    required: list[dict[str, Any]] | None = None,
    anti: list[dict[str, Any]] | None = None,
    preferred: list[tuple[int, dict[str, Any]]] | None = None,
    preferred_anti: list[tuple[int, dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """A pod's ``affinity`` with podAffinity / podAntiAffinity terms, required and
    ``(weight, term)`` preferred."""

    def terms(hard: list[dict[str, Any]] | None, soft: list[tuple[int, dict[str, Any]]] | None) -> Any:
        weighted = None if soft is None else [{"weight": w, "podAffinityTerm": t} for w, t in soft]
        return _given(
            requiredDuringSchedulingIgnoredDuringExecution=hard,
            preferredDuringSchedulingIgnoredDuringExecution=weighted,
        )

    return _given(
        podAffinity=terms(required, preferred) or None, podAntiAffinity=terms(anti, preferred_anti) or None
    )


# --------------------------------------------------------------------------- nodes


def node(
    name: str = "node-a",
    labels: Mapping[str, str] | None = None,
    pods: Iterable[PodInfo] = (),
    *,
    ready: bool = True,
    unschedulable: bool = False,
    taints: Iterable[Taint] = (),
    allocatable: Mapping[str, str | int | Decimal] | None = None,
) -> NodeInfo:
    """A NodeInfo built directly (no API body), Ready unless told; ``allocatable`` values
    may be quantities (``"4Gi"``, ``8``)."""
    return NodeInfo(
        name=name,
        labels=dict(labels or {}),
        ready=ready,
        unschedulable=unschedulable,
        taints=tuple(taints),
        allocatable={
            k: v if isinstance(v, Decimal) else parse_quantity(v) for k, v in (allocatable or {}).items()
        },
        pods=tuple(pods),
    )


def node_selector_expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    """A NodeSelectorRequirement (of a node affinity term)."""
    return {"key": key, "operator": operator, "values": list(values)}


def node_selector_term(*exprs: dict[str, Any], fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A NodeSelectorTerm: these matchExpressions, and matchFields if given."""
    return _given(matchExpressions=list(exprs), matchFields=fields)


# --------------------------------------------------------------------------- NodeIPPools


def alloc(ip: str | None, pod: str = "ns/p", phase: str = "Reserved", since: str = SINCE) -> dict[str, Any]:
    """A wire-form allocation, Reserved (as Reserve writes it) unless told (``ip`` None: a
    count-only slot)."""
    return _given(ip=ip, pod=pod, phase=phase, since=since)


def bound_allocs(n: int, prefix: str = "10.0.0.") -> dict[str, Any]:
    """``n`` Bound allocations: ``u<i>`` of pod ``ns/p<i>`` at ``<prefix><i>``, from 1."""
    return {f"u{i}": alloc(f"{prefix}{i}", pod=f"ns/p{i}", phase="Bound") for i in range(1, n + 1)}


def pool_body(
    name: str = "pool-a",
    node: str | None = "node-a",
    *,
    addresses: list[str] | None = None,
    exclude: list[str] | None = None,
    capacity: int | None = None,
    subnets: list[dict[str, Any]] | None = None,
    namespaces: list[str] | None = None,
    allocations: Mapping[str, Any] | None = None,
    status: Mapping[str, Any] | None = None,
    rv: str = "1",
    generation: int = 1,
    deleting: bool = False,
    finalizers: Any = None,
) -> dict[str, Any]:
    """A NodeIPPool as the API server would return it. ``status`` is left out unless
    ``allocations`` or ``status`` is given (``allocations={}``: an empty map)."""
    meta = _given(
        name=name,
        uid=f"uid-{name}",
        resourceVersion=rv,
        generation=generation,
        deletionTimestamp=SINCE if deleting else None,
        finalizers=finalizers,
    )
    spec = _given(nodeName=node, addresses=addresses, exclude=exclude, capacity=capacity)
    spec.update(_given(subnets=subnets, namespaces=namespaces))
    status_given = allocations is not None or status is not None
    st = {**(status or {}), **_given(allocations=_copy(allocations))} if status_given else None
    return _given(
        apiVersion="ipscheduler.io/v1alpha1", kind="NodeIPPool", metadata=meta, spec=spec, status=st
    )


def pool(name: str = "pool-a", node: str | None = "node-a", **kw: Any) -> PoolView:
    """:func:`pool_body`, parsed as the pool informer parses it."""
    return PoolView.from_obj(pool_body(name, node, **kw))


ALONE = PoolContext()
"""The context of a pool seen alone: no address shared with or held by another pool, none
held by a pod outside the pool's allocations."""


def address_set(*entries: str) -> AddressSet:
    """The addresses of these ``spec.addresses`` entries."""
    return AddressSet.from_entries(list(entries))


def with_status(body: dict[str, Any], status: NodeIPPoolStatus) -> PoolView:
    """Write ``status`` into ``body`` as the API server would, bump the RV, re-parse."""
    body["status"] = status.to_wire()
    body["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)
    return PoolView.from_obj(body)


# --------------------------------------------------------------------------- files and processes


CUSTOM_PROFILE = """
profiles:
  - schedulerName: custom
    plugins:
      filter: {disabled: [{name: NodeUnschedulable}]}
      score:
        enabled: [{name: UnderlayIP, weight: 7}]
        disabled: [{name: NodeResourcesBalancedAllocation}]
    pluginConfig:
      - {name: UnderlayIP, args: {strategy: binpack}}
"""
"""A ``--config`` with a profile of its own: a filter disabled, UnderlayIP's score weight 7 and
strategy binpack (what ``run`` and ``explain`` must both evaluate)."""


def config_file(tmp_path: Path, text: str) -> Path:
    """A ``--config`` file holding ``text``."""
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def kubeconfig_file(tmp_path: Path, namespaces: Mapping[str, str | None], current: str | None = None) -> Path:
    """A kubeconfig with one context per key of ``namespaces`` (its namespace: the value; None:
    none), each with its own cluster at ``https://127.0.0.1:<6443 + its index>``; ``current``:
    the current context (default: the first)."""
    names = list(namespaces)
    contexts = []
    for name, ns in namespaces.items():
        contexts.append({"name": name, "context": {"cluster": name, "user": "u", **_given(namespace=ns)}})
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": n, "cluster": {"server": f"https://127.0.0.1:{6443 + i}"}} for i, n in enumerate(names)
        ],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": contexts,
        "current-context": current or names[0],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(cfg))
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bound_pods(pods: Iterable[dict[str, Any]], *, terminating: bool = False) -> list[dict[str, Any]]:
    """The pod bodies bound to a node; those being deleted only with ``terminating``."""
    return [
        p
        for p in pods
        if p["spec"].get("nodeName") and (terminating or not p["metadata"].get("deletionTimestamp"))
    ]


T = TypeVar("T")


def built_tool(ensure: Callable[[], T], what: str) -> T:
    """``ensure()`` (a ``hack/binaries.py`` ``ensure_*``: a binary built with Go on first
    use); when it cannot (its DevclusterError, a RuntimeError), the test is skipped locally
    and fails with CI=true."""
    try:
        return ensure()
    except RuntimeError as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{what} unavailable in CI: {e}")
        pytest.skip(f"{what} unavailable: {e}")


# --------------------------------------------------------------------------- storage


def claim_volume(claim: str, name: str | None = None) -> dict[str, Any]:
    """A pod volume from a PersistentVolumeClaim (``spec.volumes[]``)."""
    return {"name": name or f"v-{claim}", "persistentVolumeClaim": {"claimName": claim}}


def ephemeral_volume(name: str) -> dict[str, Any]:
    """A generic ephemeral pod volume (its claim is ``<pod>-<name>``)."""
    return {"name": name, "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}}


def volume_pod(*volumes: dict[str, Any], **kw: Any) -> PodInfo:
    """A pod (:func:`pod_body`'s ``kw``) with these ``spec.volumes``, parsed."""
    return pod(container(), volumes=list(volumes), **kw)


def pvc_body(
    name: str,
    namespace: str = "ns",
    *,
    modes: Iterable[str] = ("ReadWriteOnce",),
    volume: str = "",
    storage_class: str | None = None,
    owner_uid: str | None = None,
    storage: str = "1Gi",
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A raw PersistentVolumeClaim (``volume``: ``spec.volumeName``; ``owner_uid``: its
    controller's UID)."""
    owners = [{"kind": "Pod", "name": "p", "uid": owner_uid, "controller": True}] if owner_uid else None
    meta = _given(
        name=name,
        namespace=namespace,
        uid=f"pvc-uid-{name}",
        ownerReferences=owners,
        annotations=_copy(annotations),
    )
    spec = _given(
        accessModes=list(modes),
        volumeName=volume or None,
        storageClassName=storage_class,
        resources={"requests": {"storage": storage}},
    )
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


def pv_body(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    csi: tuple[str, str] | None = None,
    node_affinity: dict[str, Any] | None = None,
    storage_class: str | None = None,
    capacity: str = "1Gi",
    modes: Iterable[str] = ("ReadWriteOnce",),
    claim: str | None = None,
) -> dict[str, Any]:
    """A raw PersistentVolume (``csi``: ``(driver, volumeHandle)``, else a hostPath;
    ``node_affinity``: its required node selector; ``claim``: ``namespace/name`` of its
    claimRef)."""
    spec = _given(
        capacity={"storage": capacity},
        accessModes=list(modes),
        storageClassName=storage_class,
        nodeAffinity={"required": node_affinity} if node_affinity is not None else None,
    )
    if csi is not None:
        spec["csi"] = {"driver": csi[0], "volumeHandle": csi[1]}
    else:
        spec["hostPath"] = {"path": f"/data/{name}"}
    if claim is not None:
        ns, _, claim_name = claim.partition("/")
        spec["claimRef"] = {"namespace": ns, "name": claim_name}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": _given(name=name, labels=_copy(labels)),
        "spec": spec,
    }


def storage_class_body(
    name: str, mode: str | None = "Immediate", provisioner: str = "csi.example.com"
) -> dict[str, Any]:
    """A raw StorageClass (``mode``: its ``volumeBindingMode``, None: unset)."""
    return _given(
        apiVersion="storage.k8s.io/v1",
        kind="StorageClass",
        metadata={"name": name},
        provisioner=provisioner,
        volumeBindingMode=mode,
    )


def csi_node_body(name: str, **counts: int | None) -> dict[str, Any]:
    """A raw CSINode: a driver per keyword (``_`` reads ``.``), with that allocatable count
    (None: no allocatable)."""
    drivers = [
        _given(name=d.replace("_", "."), nodeID=name, allocatable={"count": c} if c is not None else None)
        for d, c in counts.items()
    ]
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": name},
        "spec": {"drivers": drivers},
    }
