"""A pod's further underlay interfaces, each from its own pools (pure, no I/O).

A pod's first underlay interface takes its address as always (its ``ipscheduler.io/pools``,
its namespace's default pools, :mod:`ipscheduler.underlayip.selection`). A multi-homed pod
(storage, RoCE, telco) attaches further underlay networks; each gets its addresses from its
own NodeIPPools, decided in the same scheduling cycle, on the same node, before bind:

- **a Multus network-selection element** (``k8s.v1.cni.cncf.io/networks``, either form)
  naming ``ipscheduler.io/pools`` in the element, e.g. ``[{"name": "rdma-a",
  "ipscheduler.io/pools": "rdma-a"}]``: its interface is the element's ``interface``, or
  Multus' own name for it, ``net<position>`` (``pkg/multus/multus.go``, ``getIfname``: the
  first additional network is ``net1``). Multus passes unknown element keys by (its
  ``NetworkSelectionElement`` ignores them). The element may name
  ``ipscheduler.io/ip-family-policy`` and ``ipscheduler.io/ip-families`` too
  (:mod:`ipscheduler.underlayip.families`).
- **a NetworkAttachmentDefinition** (``k8s.cni.cncf.io/v1``) carrying ``ipscheduler.io/pools``
  (and the family annotations) in its ``metadata.annotations``: every Multus element naming
  it (its ``name``, in its ``namespace``, else the pod's, as Multus looks it up:
  ``pkg/k8sclient/k8sclient.go``, ``getKubernetesDelegate``) is a further interface with
  those pools and families, as if the element named them. The element's own keys win: its
  ``ipscheduler.io/pools`` over the NAD's, and its family keys (either of the two) over the
  NAD's family keys (both). A NAD without any of the three annotations is not ours. The NADs
  come to :func:`further_interfaces` as a view, :data:`NetworkView` (namespace/name → the
  NAD's :class:`NetworkPools`), which the wing's informer keeps
  (:mod:`ipscheduler.underlayip.informers`).
- **the pod annotation** ``ipscheduler.io/interface-pools``, JSON, interface → pool list:
  ``{"net1": "rdma-a", "net2": "storage-a,storage-b"}`` (single-stack, any family), for
  runtimes that call the IPAM plugin for several interfaces without Multus.

Each further interface gets one allocation, in a pool of the node it may use (the list,
and the pool's ``spec.namespaces``), recording the interface; a pod holds at most one
allocation per pool, so each interface takes its own pool. The Binding writes them in
``ipscheduler.io/interfaces`` (interface → pool, addresses, network); the CNI plugin picks
its entry by ``CNI_IFNAME``. A further interface never carries the default route.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ipscheduler.framework.types import PodInfo
from ipscheduler.underlayip.families import ANY_FAMILY, FamilyNeed, annotated_ips, canonical_each, family_need
from ipscheduler.underlayip.models import (
    ANNOTATION_INTERFACE_POOLS,
    ANNOTATION_INTERFACES,
    ANNOTATION_IP_FAMILIES,
    ANNOTATION_IP_FAMILY_POLICY,
    ANNOTATION_POOL,
    ANNOTATION_POOLS,
    IFNAME_PATTERN,
)
from ipscheduler.underlayip.multus import NETWORKS_ANNOTATION, MultusError, parse_selection
from ipscheduler.underlayip.selection import PoolChoice, parse_pool_list

DEFAULT_INTERFACE = "eth0"
"""The pod's first interface, as the kubelet's runtime names it (``CNI_IFNAME``)."""

_IFNAME = re.compile(IFNAME_PATTERN)


@dataclass(frozen=True)
class InterfaceNeed:
    """One further interface of a pod: its name (``interface``), the pools it may use
    (``choice``; never empty), its families (``family``), and where it comes from: the
    Multus element at ``element`` (its position; -1: the ``ipscheduler.io/interface-pools``
    annotation) for network ``network`` (``namespace/name``; "" for none)."""

    interface: str
    choice: PoolChoice
    family: FamilyNeed = ANY_FAMILY
    network: str = ""
    element: int = -1


@dataclass(frozen=True)
class InterfaceList:
    """A pod's further interfaces in order (``interfaces``), or why they cannot be read
    (``problem``: the pod is then unschedulable with it)."""

    interfaces: tuple[InterfaceNeed, ...] = ()
    problem: str = ""


NONE = InterfaceList()

_FAMILY_KEYS = (ANNOTATION_IP_FAMILY_POLICY, ANNOTATION_IP_FAMILIES)


@dataclass(frozen=True)
class NetworkPools:
    """What a NetworkAttachmentDefinition's annotations give the Multus elements that name it
    (module doc): ``pools``, its ``ipscheduler.io/pools`` as written (None: none; read, and
    found wrong, only when an element uses it), and ``families``, the
    ``ipscheduler.io/ip-family-policy`` and ``ipscheduler.io/ip-families`` it carries, as
    (key, value) pairs."""

    pools: str | None = None
    families: tuple[tuple[str, str], ...] = ()


NetworkView = Mapping[str, NetworkPools]
"""The NetworkAttachmentDefinitions that carry our annotations: ``namespace/name`` → their
:class:`NetworkPools`."""

NO_NETWORKS: NetworkView = MappingProxyType({})
"""No NetworkAttachmentDefinition of ours (none watched, or the API is not served)."""


def network_pools(body: Mapping[str, Any]) -> NetworkPools | None:
    """A NetworkAttachmentDefinition body's :class:`NetworkPools` (None: it carries none of
    ``ipscheduler.io/pools``, ``ipscheduler.io/ip-family-policy``,
    ``ipscheduler.io/ip-families``, so it is not ours; values that are not strings are
    ignored, as an API server never serves them)."""
    meta = body.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(annotations, Mapping):
        return None
    pools = annotations.get(ANNOTATION_POOLS)
    families = tuple((k, v) for k in _FAMILY_KEYS if isinstance(v := annotations.get(k), str))
    if not isinstance(pools, str):
        pools = None
    return NetworkPools(pools, families) if pools is not None or families else None


def _bad(what: str, why: str) -> InterfaceList:
    return InterfaceList(problem=f"{what}: {why}")


def _interface_name(name: object) -> str | None:
    """``name`` when it is a Linux interface name CNI accepts (not ``.``/``..``), else None."""
    if isinstance(name, str) and _IFNAME.fullmatch(name) and name not in (".", ".."):
        return name
    return None


def _from_multus(pod: PodInfo, raw: str, networks: NetworkView) -> InterfaceList:
    where = f"annotation {NETWORKS_ANNOTATION}"
    try:
        elements = parse_selection(raw)
    except MultusError as e:
        # Naming no pool in it, the pod asks for nothing here that we can tell; Multus refuses it.
        return _bad(where, str(e)) if ANNOTATION_POOLS in raw else NONE
    out: list[InterfaceNeed] = []
    for position, element in enumerate(elements):
        network = f"{element.get('namespace') or pod.namespace}/{element['name']}"
        nad = networks.get(network) if networks else None
        pools = element.get(ANNOTATION_POOLS)
        nad_pools = nad.pools if nad is not None and pools is None else None
        if pools is None and nad_pools is None:
            continue
        what = f"{where}[{position}] ({element['name']})"
        if nad_pools is not None:
            choice = parse_pool_list(
                nad_pools, f"NetworkAttachmentDefinition {network} annotation {ANNOTATION_POOLS}"
            )
        elif not isinstance(pools, str):
            return _bad(what, f"{ANNOTATION_POOLS} must be a string (a comma-separated list of pools)")
        else:
            choice = parse_pool_list(pools, f"{what} {ANNOTATION_POOLS}")
        interface = _interface_name(element.get("interface") or f"net{position + 1}")
        if interface is None:
            return _bad(what, f"interface {element.get('interface')!r} is not an interface name")
        if choice.problem:
            return InterfaceList(problem=choice.problem)
        keys = {k: v for k in _FAMILY_KEYS if isinstance(v := element.get(k), str)}
        if not keys and nad is not None and nad.families:
            keys, what = dict(nad.families), f"NetworkAttachmentDefinition {network}"
        family = family_need(keys)
        if family.problem:
            return _bad(what, family.problem)
        out.append(InterfaceNeed(interface, choice, family, network, position))
    return InterfaceList(tuple(out))


def _from_annotation(raw: str) -> InterfaceList:
    where = f"annotation {ANNOTATION_INTERFACE_POOLS}"
    try:
        value: Any = json.loads(raw)
    except ValueError as e:
        return _bad(where, f"not JSON: {e}")
    if not isinstance(value, dict):
        return _bad(where, 'must be a JSON object, interface → pools: {"net1": "pool-a,pool-b"}')
    out: list[InterfaceNeed] = []
    for name, pools in value.items():
        interface = _interface_name(name)
        if interface is None:
            return _bad(where, f"{name!r} is not an interface name")
        if not isinstance(pools, str):
            return _bad(where, f"{name}: the pools must be a string (a comma-separated list of pools)")
        choice = parse_pool_list(pools, f"{where} ({name})")
        if choice.problem:
            return InterfaceList(problem=choice.problem)
        out.append(InterfaceNeed(interface, choice))
    return InterfaceList(tuple(out))


def bound_pools(annotations: Mapping[str, str]) -> frozenset[str]:
    """The pools a bound pod's annotations say it holds addresses of: its
    ``ipscheduler.io/pool`` ("" when it has none: a count-only slot, or no address) and the
    pool of each entry of its ``ipscheduler.io/interfaces`` (entries that cannot be read are
    left out: the CNI plugin refuses such a pod)."""
    pools = {annotations.get(ANNOTATION_POOL) or ""}
    pools.update(e["pool"] for e in interface_entries(annotations).values() if isinstance(e.get("pool"), str))
    return frozenset(pools)


@dataclass(frozen=True)
class BoundInterface:
    """One entry of a bound pod's ``ipscheduler.io/interfaces``, as adoption reads it: its
    ``interface``, ``pool`` and addresses (``ips``, as written: never empty), its ``network``
    (the entry's CNI IPAM result, None when absent); or why it cannot be read (``problem``,
    with whatever could be: ``interface`` "" when the annotation itself cannot be read)."""

    interface: str
    pool: str = ""
    ips: tuple[str, ...] = ()
    network: Any = None
    problem: str = ""


def bound_interfaces(annotations: Mapping[str, str]) -> tuple[BoundInterface, ...]:
    """Every entry of a bound pod's ``ipscheduler.io/interfaces`` (none when absent), each
    read or with its problem (:class:`BoundInterface`): the annotation is not a JSON object;
    an entry's name is not an interface name (or is ``eth0``, the first, unless it is the
    first interface's :func:`second_family`); an entry is not an
    object, names no pool (a non-empty string), or its ``ips`` are not a non-empty list of
    strings. Whether each address is one is left to who records it."""
    raw = annotations.get(ANNOTATION_INTERFACES)
    if raw is None:
        return ()
    where = f"annotation {ANNOTATION_INTERFACES}"
    try:
        value: Any = json.loads(raw)
    except ValueError as e:
        return (BoundInterface("", problem=f"{where} is not JSON: {e}"),)
    if not isinstance(value, dict):
        return (BoundInterface("", problem=f"{where} is not a JSON object (interface → entry)"),)
    out: list[BoundInterface] = []
    for name, entry in value.items():
        what = f"{where} entry {name!r}"
        if _interface_name(name) is None or (
            name == DEFAULT_INTERFACE and second_family(annotations) is None
        ):
            out.append(BoundInterface("", problem=f"{what}: not a further interface's name"))
            continue
        if not isinstance(entry, dict):
            out.append(BoundInterface(name, problem=f"{what} is not an object"))
            continue
        pool = entry.get("pool")
        if not isinstance(pool, str) or not pool:
            out.append(BoundInterface(name, problem=f"{what} names no pool"))
            continue
        ips = entry.get("ips")
        if not isinstance(ips, list) or not ips or not all(isinstance(ip, str) for ip in ips):
            out.append(
                BoundInterface(name, pool, problem=f"{what}: ips must be a non-empty list of addresses")
            )
            continue
        out.append(BoundInterface(name, pool, tuple(ips), entry.get("network")))
    return tuple(out)


def interface_entries(annotations: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The readable entries of a bound pod's ``ipscheduler.io/interfaces`` (interface →
    entry; none when absent or not a JSON object)."""
    raw = annotations.get(ANNOTATION_INTERFACES)
    if not raw:
        return {}
    try:
        value: Any = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(v, dict)}


def second_family(annotations: Mapping[str, str]) -> tuple[str, tuple[str, ...]] | None:
    """The first interface's second family from a second pool (a dual-stack pod where no pool
    of its node gave both families): the pool and canonical addresses of the pod's
    ``ipscheduler.io/interfaces`` entry for ``eth0``, whose addresses are among its
    ``ipscheduler.io/ips`` (a further interface's never are; the CNI plugin's rule too).
    None when the pod has no such entry."""
    entry = interface_entries(annotations).get(DEFAULT_INTERFACE)
    if (
        entry is None
        or not isinstance(pool := entry.get("pool"), str)
        or not isinstance(ips := entry.get("ips"), list)
    ):
        return None
    mine = canonical_each(ip for ip in ips)
    listed = annotated_ips(annotations)
    if not mine or len(listed) < 2 or any(ip not in listed for ip in mine):
        return None
    return pool, mine


def first_pool_ips(annotations: Mapping[str, str]) -> tuple[str, ...]:
    """The canonical addresses a bound pod's first interface holds in its
    ``ipscheduler.io/pool``: its ``ipscheduler.io/ips`` (else ``ipscheduler.io/ip``) but
    those of its :func:`second_family`."""
    second = second_family(annotations)
    listed = annotated_ips(annotations)
    return listed if second is None else tuple(ip for ip in listed if ip not in second[1])


def interface_ips(annotations: Mapping[str, str]) -> tuple[str, ...]:
    """The canonical addresses a bound pod's further interfaces carry
    (``ipscheduler.io/interfaces``; entries that cannot be read are left out)."""
    entries = interface_entries(annotations).values()
    return canonical_each(ip for e in entries if isinstance(ips := e.get("ips"), list) for ip in ips)


def further_interfaces(pod: PodInfo, networks: NetworkView = NO_NETWORKS) -> InterfaceList:
    """The further underlay interfaces ``pod`` asks for (module doc): its Multus elements
    naming ``ipscheduler.io/pools``, or naming a NetworkAttachmentDefinition of ``networks``
    that does, then its ``ipscheduler.io/interface-pools``. A pod that asks for none gets
    :data:`NONE`; the fast path, no parsing: neither annotation names a pool and ``networks``
    is empty, or the pod has neither annotation. An interface named twice, or named as the
    pod's first interface (``eth0``), is a problem; so is a NAD's malformed annotation, for
    the pods whose elements use it (the problem names the NAD)."""
    annotations: Mapping[str, str] = pod.annotations
    multus = annotations.get(NETWORKS_ANNOTATION)
    listed = annotations.get(ANNOTATION_INTERFACE_POOLS)
    selects = multus is not None and (bool(networks) or ANNOTATION_POOLS in multus)
    if listed is None and not selects:
        return NONE
    found: list[InterfaceNeed] = []
    for part in (
        _from_multus(pod, multus, networks) if multus is not None and selects else NONE,
        _from_annotation(listed) if listed is not None else NONE,
    ):
        if part.problem:
            return part
        found.extend(part.interfaces)
    if not found:
        return NONE
    seen: set[str] = set()
    for need in found:
        if need.interface == DEFAULT_INTERFACE:
            return InterfaceList(
                problem=f"interface {DEFAULT_INTERFACE} is the pod's first interface (its "
                f"{ANNOTATION_POOLS}), not a further one"
            )
        if need.interface in seen:
            return InterfaceList(problem=f"interface {need.interface} is asked for twice")
        seen.add(need.interface)
    return InterfaceList(tuple(found))
