"""``ipscheduler check``: every violation of the allocation invariants, from live state.

Invariants (each violation is one line of output):

- no address is held by two allocations (across all pools);
- no address is carried by two running pods (their ``ipscheduler.io/ip``
  annotations, whatever the pools record);
- every allocation's pod exists and is not terminal, except a Retained one (kept for the
  pod's identity after it ended), whose pod must not run;
- every bound, live, non-hostNetwork pod of ours has an allocation (and when it has none
  because it may not use the pool its annotation names, the line says which rule refuses
  it: :func:`~ipscheduler.underlayip.selection.tenancy_problem`);
- every allocation's pod may use its pool (``spec.namespaces``, ``ipscheduler.io/pools``,
  the namespace's ``ipscheduler.io/default-pools``);
- an allocation's pool serves the node its (bound) pod runs on;
- a pool's ``allocated`` does not exceed its ``capacity``;
- a pod identity (release policy StatefulSet or Never) holds at most one allocation, across
  all pools (its next pod takes that one back; a second is an address leaked to it);
- a bound pod's ``ipscheduler.io/ip`` / ``ipscheduler.io/pool`` annotations
  match its allocation, and its ``ipscheduler.io/network`` (when present) the
  network facts its pool gives that address (:func:`~ipscheduler.underlayip.pool.network_of_all`:
  every address of a dual-stack pod, whose ``ipscheduler.io/ips`` lists what the allocation
  holds).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes_asyncio import client

from ipscheduler.framework.types import PodInfo
from ipscheduler.kube.client import KubeApi, load_client_config
from ipscheduler.underlayip.addresses import AddressError, canonical
from ipscheduler.underlayip.addresstool import read_default_pools
from ipscheduler.underlayip.families import annotated_ips
from ipscheduler.underlayip.interfaces import bound_interfaces, second_family
from ipscheduler.underlayip.models import (
    ANNOTATION_INTERFACES,
    ANNOTATION_IP,
    ANNOTATION_IPS,
    ANNOTATION_NETWORK,
    ANNOTATION_POOL,
    BOUND,
    NEVER,
    NOMINATED,
    POOLS,
    RELEASING,
    RETAINED,
    Allocation,
)
from ipscheduler.underlayip.pool import PoolView, network_of_all
from ipscheduler.underlayip.selection import is_ours, tenancy_problem


def _canon(ip: str) -> str:
    try:
        return canonical(ip)
    except AddressError:
        return ip


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def find_violations(
    pools: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    default_pools: Mapping[str, str] | None = None,
) -> list[str]:
    """Violations between NodeIPPool bodies and the pod bodies of our scheduler (all phases);
    ``default_pools``: namespace → its ``ipscheduler.io/default-pools`` (the namespaces
    that carry one)."""
    defaults = default_pools or {}
    by_uid: dict[str, PodInfo] = {}
    raw_pods: dict[str, Mapping[str, Any]] = {}
    for body in pods:
        try:
            info = PodInfo.from_obj(body)
        except ValueError:
            continue
        by_uid[info.uid] = info
        raw_pods[info.uid] = body
    problems: list[str] = []
    holders: dict[str, str] = {}
    allocated: set[str] = set()
    allocated_on: set[tuple[str, str]] = set()  # (uid, interface) of the further interfaces'
    by_name: dict[str, PoolView] = {}
    for body in pools:
        try:
            pool = PoolView.from_obj(body)
        except ValueError:
            continue
        by_name[pool.name] = pool
        raw_status = body.get("status") or {}
        capacity, count = raw_status.get("capacity"), raw_status.get("allocated")
        held = sum(1 for a in pool.allocations.values() if a.phase == NOMINATED)  # over a victim's place
        if isinstance(capacity, int) and isinstance(count, int) and count - held > capacity:
            problems.append(f"pool {pool.name}: allocated {count} > capacity {capacity}")
        for uid, a in pool.allocations.items():
            if a.interface is None:  # the first interface's: "holds no allocation" below
                allocated.add(uid)
            else:
                allocated_on.add((uid, a.interface))
            where = f"pool {pool.name}: {a.pod} ({uid})"
            for text in a.addresses:
                ip = _canon(text)
                if ip in holders:
                    problems.append(f"address {ip} held twice: {holders[ip]} and {a.pod} (pool {pool.name})")
                holders[ip] = f"{a.pod} (pool {pool.name})"
            pod = by_uid.get(uid)
            if a.phase in (RETAINED, RELEASING):
                if pod is not None and pod.bound and not pod.terminal:
                    problems.append(f"{where}: {a.phase}, but its pod runs on {pod.node_name}")
                continue  # kept for the pod's identity, or until its node let it go, after the pod ended
            if pod is None:
                problems.append(f"{where}: allocation of a pod that no longer exists")
                continue
            if a.phase == NOMINATED:
                if pod.bound:
                    problems.append(f"{where}: Nominated, but its pod is bound to {pod.node_name}")
                continue  # a place held while preemption's victims terminate
            if pod.terminal:
                problems.append(f"{where}: allocation of a {pod.phase} pod")
            if pod.bound and pod.node_name != pool.node_name:
                problems.append(f"{where}: pod runs on {pod.node_name} but the pool serves {pool.node_name}")
            if a.interface is not None:
                problems.extend(_interface_problems(where, pod, pool, a))
                continue
            if a.phase == BOUND and (why := tenancy_problem(pod, pool, defaults.get(pod.namespace))):
                problems.append(f"{where}: the pod may not use the pool: {why}")
            if pod.bound and not pod.terminal:
                ann_ip = pod.annotations.get(ANNOTATION_IP) or None  # "" means "no address"
                ann_pool = pod.annotations.get(ANNOTATION_POOL) or None
                # A count-only slot's Binding writes no pool annotation (older ones named it).
                pool_ok = ann_pool == pool.name or (ann_pool is None and not a.ip)
                if not pool_ok or (ann_ip and _canon(ann_ip)) != (a.ip and _canon(a.ip)):
                    problems.append(
                        f"{where}: annotations ip={ann_ip} pool={ann_pool} differ from allocation ip={a.ip}"
                    )
                ann_ips = pod.annotations.get(ANNOTATION_IPS)
                second = second_family(pod.annotations)  # its second family from a second pool
                held_ips = tuple(_canon(ip) for ip in a.addresses) + (second[1] if second else ())
                if ann_ips and annotated_ips(pod.annotations) != held_ips:
                    problems.append(
                        f"{where}: annotation {ANNOTATION_IPS}={ann_ips} differs from allocation "
                        f"ips={','.join(held_ips)}"
                    )
                ann_net = pod.annotations.get(ANNOTATION_NETWORK)
                want = network_of_all(pool, a.addresses if ann_ips else (a.ip,)) if a.ip else {}
                have = _json(ann_net) if ann_net is not None else None
                if second and isinstance(have, dict) and isinstance(have.get("ips"), list):
                    have = {"ips": have["ips"][: len(a.addresses)]}  # this pool's part
                    want = {"ips": want.get("ips")}
                if a.ip and ann_net is not None and have != want:
                    problems.append(
                        f"{where}: annotation {ANNOTATION_NETWORK}={ann_net} differs from the pool's "
                        f"network for {a.ip}: {json.dumps(want, separators=(',', ':'))}"
                    )
    problems.extend(_identities_held_twice(by_name.values()))
    problems.extend(_shared_by_running_pods(by_uid.values()))
    for uid, pod in by_uid.items():
        spec = raw_pods[uid].get("spec") or {}
        if (
            pod.bound
            and not pod.terminal
            and not pod.deleting
            and not spec.get("hostNetwork")
            and uid not in allocated
        ):
            line = f"pod {pod.key} ({uid}) is bound to {pod.node_name} but holds no allocation"
            named = by_name.get(pod.annotations.get(ANNOTATION_POOL) or "")
            if named is not None and (why := tenancy_problem(pod, named, defaults.get(pod.namespace))):
                line += f": it may not use NodeIPPool {named.name}: {why}"
            problems.append(line)
        if pod.bound and not pod.terminal and not pod.deleting:
            problems.extend(_unrecorded_interfaces(pod, allocated_on))
    return problems


def _unrecorded_interfaces(pod: PodInfo, allocated_on: set[tuple[str, str]]) -> list[str]:
    """One line per entry of bound ``pod``'s ``ipscheduler.io/interfaces`` whose interface no
    pool records for it (``allocated_on``: ``(uid, interface)`` of the further interfaces'
    allocations): its addresses look free and may be handed out again."""
    return [
        f"pod {pod.key} ({pod.uid}) is bound to {pod.node_name} but holds no allocation for "
        f"interface {e.interface} ({','.join(e.ips)} of pool {e.pool})"
        for e in bound_interfaces(pod.annotations)
        if e.interface and not e.problem and (pod.uid, e.interface) not in allocated_on
    ]


def _interface_problems(where: str, pod: PodInfo, pool: PoolView, a: Allocation) -> list[str]:
    """What is wrong with allocation ``a`` of a further interface of ``pod`` in ``pool``: the
    pool reserved for other namespaces (its ``spec.namespaces``: the interface's own pool list
    is the pod's choice), or, once the pod is bound, its ``ipscheduler.io/interfaces`` entry
    for the interface naming another pool or other addresses."""
    out = []
    if not pool.serves(pod.namespace):
        out.append(f"{where}: interface {a.interface}: pool reserved for other namespaces")
    if pod.bound and not pod.terminal:
        entry = _json(pod.annotations.get(ANNOTATION_INTERFACES) or "{}")
        got = entry.get(a.interface) if isinstance(entry, dict) else None
        held = [_canon(ip) for ip in a.addresses]
        if not isinstance(got, dict) or got.get("pool") != pool.name or got.get("ips") != held:
            out.append(
                f"{where}: interface {a.interface}: annotation {ANNOTATION_INTERFACES} says {got}, "
                f"the allocation {','.join(held)}"
            )
    return out


def _identities_held_twice(pools: Iterable[PoolView]) -> list[str]:
    """One line per pod identity that two or more allocations are recorded for: its pods take
    back one address (:func:`~ipscheduler.underlayip.retention.takes_back`: policy Never for
    any pod of that name, StatefulSet for the same StatefulSet UID), so any other is leaked."""
    kept: dict[tuple[str, str, str], list[str]] = {}
    for pool in pools:
        for uid, a in pool.allocations.items():
            if a.identity:
                owner = "" if a.release_policy == NEVER else (a.owner_uid or "")
                kept.setdefault((a.identity, owner, a.interface or ""), []).append(
                    f"{a.ip or '(slot)'} ({a.phase}, {a.pod} ({uid}), pool {pool.name})"
                )
    return [
        f"identity {identity} holds {len(held)} allocations: " + ", ".join(sorted(held))
        for (identity, _, _), held in sorted(kept.items())
        if len(held) > 1
    ]


def _shared_by_running_pods(pods: Iterable[PodInfo]) -> list[str]:
    """One line per address that two or more running (bound, not terminal) pods carry in
    their ``ipscheduler.io/ip`` annotation: they would share it on the wire."""
    carriers: dict[str, list[PodInfo]] = {}
    for pod in pods:
        if pod.bound and not pod.terminal:
            for ip in annotated_ips(pod.annotations):
                carriers.setdefault(ip, []).append(pod)
    return [
        f"address {ip} used by {len(holders)} running pods: "
        + ", ".join(f"{p.key} ({p.uid}) on {p.node_name}" for p in sorted(holders, key=lambda p: p.key))
        for ip, holders in sorted(carriers.items())
        if len(holders) > 1
    ]


async def live_violations(
    kubeconfig: str | None,
    scheduler_name: str,
    namespace: str | None = None,
    context: str | None = None,
) -> list[str]:
    """Read pools and our pods from the API server (the kubeconfig's ``context``; None: its
    current one) and return :func:`find_violations`; with ``namespace``, only the violations
    that name a pod of that namespace (every pool and pod is still read: an address two
    namespaces share is a violation of both). Raises what the reads raise (``ApiException``,
    ``ConfigException``)."""
    api = KubeApi(client.ApiClient(await load_client_config(kubeconfig, context)))
    try:
        pools = await api.list_cluster_objects(POOLS)
        pods = [body for body in await api.list_pods("") if _ours(body, scheduler_name)]
        defaults = await read_default_pools(api)
    finally:
        await api.close()
    problems = find_violations(pools, pods, defaults)
    return problems if namespace is None else naming_namespace(problems, namespace)


def _ours(body: Mapping[str, Any], scheduler_name: str) -> bool:
    """:func:`~ipscheduler.underlayip.selection.is_ours` of a raw pod (an unreadable one is not)."""
    try:
        return is_ours(PodInfo.from_obj(body), scheduler_name)
    except ValueError:
        return False


def naming_namespace(problems: Iterable[str], namespace: str) -> list[str]:
    """The lines of :func:`find_violations` that name a pod (``namespace/name``) of
    ``namespace``; a pool's own lines (``allocated > capacity``) name none."""
    # Pod keys in the lines follow a space or "(": "pool p: ns/name (uid)", "held twice: ns/a ...".
    names_a_pod = re.compile(rf"(?:^|[\s(]){re.escape(namespace)}/[a-z0-9]")
    return [line for line in problems if names_a_pod.search(line)]
