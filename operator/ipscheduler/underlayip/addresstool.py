"""``ipscheduler ip`` and ``pools``: the addresses and pools as an operator sees them, and the
one way to release an address (also the kubectl plugin: ``kubectl ipscheduler ...``).

- ``ip show ADDRESS``: the pool, node, holder pod and UID, phase, release policy and since.
- ``ip list [-n NAMESPACE] [--pool P] [--node N] [--phase PHASE] [-o json]``: every
  allocation (of the namespace's pods), a table.
- ``ip release ADDRESS``: only an allocation no live pod holds: one whose pod is gone or
  has ended (a Retained allocation, or an orphan the GC sweep would release too). The pod
  is looked up by UID in a fresh LIST of every pod, never by the name or phase the status
  records, and no other live pod may carry the address in its own annotations; a live
  holder is a refusal that says why, whatever the status says. The release is a
  compare-and-swap on the pool's status that removes exactly the allocation that was read.
- ``pools [--node N] [-o json]``: ``kubectl get nodeippools`` with a total line: capacity,
  allocated, free and retained per pool as its status says, and whether it is Ready (and
  why not).

The tables and the release rule are pure (:func:`address_rows`, :func:`why_not_release`,
:func:`pool_rows`); the commands read the API server. Every command takes the kubeconfig
file and its ``context`` (None: the current one).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from kubernetes_asyncio import client

from ipscheduler.framework.types import PodInfo
from ipscheduler.kube.client import Conflict, KubeApi, lean_pods, load_client_config
from ipscheduler.underlayip import allocator
from ipscheduler.underlayip.addresses import AddressError, canonical
from ipscheduler.underlayip.families import annotated_ips
from ipscheduler.underlayip.interfaces import DEFAULT_INTERFACE
from ipscheduler.underlayip.models import ANNOTATION_IP, ANNOTATION_POOL, ANNOTATION_PREFIX, POOLS, RELEASING
from ipscheduler.underlayip.pool import PoolContext, PoolView
from ipscheduler.underlayip.selection import is_ours, namespace_default_pools, tenancy_problem

CAS_ATTEMPTS = 5


@dataclass(frozen=True)
class AddressRow:
    """One allocation: ``ip`` ("" for a count-only slot), its ``pool`` and ``node``, the
    holder ``pod`` (``namespace/name``) and ``uid``, ``phase``, release ``policy`` (``Pod``
    when the allocation names none), ``since`` (RFC 3339), ``holder``: ``running``,
    ``pending``, ``ended`` (Succeeded/Failed), or ``gone`` (no pod of that UID), and
    ``note``: why the running holder may not use the pool (the tenancy rules,
    :func:`~ipscheduler.underlayip.selection.tenancy_problem`; "" when it may), or, for a
    Releasing one, since when it waits for its node (:mod:`~ipscheduler.underlayip.teardown`);
    ``interface``: the pod's further interface it serves ("" for its first; the table says it
    in ``NOTE``)."""

    ip: str
    pool: str
    node: str
    pod: str
    uid: str
    phase: str
    policy: str
    since: str
    holder: str
    note: str = ""
    interface: str = ""
    """The pod's further interface the address is for ("" for its first interface)."""


def _holder(uid: str, pods: Mapping[str, PodInfo]) -> str:
    pod = pods.get(uid)
    if pod is None:
        return "gone"
    if pod.terminal:
        return "ended"
    return "running" if pod.bound else "pending"


def _note(uid: str, pool: PoolView, pods: Mapping[str, PodInfo], default_pools: Mapping[str, str]) -> str:
    a = pool.allocations[uid]
    if a.phase == RELEASING:
        since = (a.releasing_since or a.since).isoformat().replace("+00:00", "Z")
        return f"pod gone at {since}; waiting for node {pool.node_name} to let the address go"
    pod = pods.get(uid)
    if pod is None or pod.terminal or not pod.bound:
        return ""
    problem = tenancy_problem(pod, pool, default_pools.get(pod.namespace))
    return f"may not use the pool: {problem}" if problem else ""


def address_rows(
    pools: Iterable[PoolView], pods: Mapping[str, PodInfo], default_pools: Mapping[str, str] | None = None
) -> list[AddressRow]:
    """Every allocation of ``pools``, one row per address (a dual-stack pod's allocation
    gives two rows of the same UID) (``pods``: the pods by UID, to tell who still holds
    what; ``default_pools``: namespace → its ``ipscheduler.io/default-pools``, for the
    ``note``), sorted by pool then address."""
    defaults = default_pools or {}
    rows = [
        AddressRow(
            ip=ip,
            pool=p.name,
            node=p.node_name,
            pod=a.pod,
            uid=uid,
            phase=a.phase,
            policy=a.release_policy or "Pod",
            since=a.since.isoformat().replace("+00:00", "Z"),
            holder=_holder(uid, pods),
            note=_note(uid, p, pods, defaults),
            interface=a.interface or "",
        )
        for p in pools
        for uid, a in p.allocations.items()
        for ip in a.addresses or ("",)
    ]
    return sorted(rows, key=lambda r: (r.pool, r.ip, r.uid))


def select(
    rows: Iterable[AddressRow],
    *,
    pool: str | None = None,
    node: str | None = None,
    phase: str | None = None,
    namespace: str | None = None,
) -> list[AddressRow]:
    """The ``rows`` of that pool, node, phase and pod namespace (None: any), in order."""
    return [
        r
        for r in rows
        if (pool is None or r.pool == pool)
        and (node is None or r.node == node)
        and (phase is None or r.phase == phase)
        and (namespace is None or r.pod.partition("/")[0] == namespace)
    ]


def why_not_release(row: AddressRow) -> str | None:
    """Why ``row`` may not be released by an operator (None: it may): only an allocation
    whose pod (by UID: ``row.holder``) is gone or has ended may be, whatever phase the status
    records (a Retained allocation is its gone pod's; one whose pod is live is not to be
    released, even if someone edited its phase)."""
    if row.holder in ("gone", "ended"):
        return None
    return (
        f"{row.ip or 'the slot'} is held by {row.holder} pod {row.pod} (UID {row.uid}); "
        "delete the pod to release it"
    )


def carried_by(ip: str, pool: str, uid: str, pods: Mapping[str, PodInfo]) -> str | None:
    """Why address ``ip`` of ``pool``, recorded for pod ``uid``, may not be released because
    another live pod carries it in its own annotations (``ipscheduler.io/ip``, and
    ``ipscheduler.io/pool`` when set), e.g. a pod whose allocation's recorded name or UID
    was edited (None: no live pod carries it). ``pods``: the pods by UID, as just listed."""
    for pod in pods.values():
        if pod.uid == uid or pod.terminal or not ip:
            continue
        if ANNOTATION_IP not in pod.annotations or pod.annotations.get(ANNOTATION_POOL, pool) != pool:
            continue
        if ip in annotated_ips(pod.annotations):
            state = "running" if pod.bound else "pending"
            return (
                f"{ip} is carried by {state} pod {pod.key} (UID {pod.uid}) in its {ANNOTATION_IP} "
                "annotation; delete the pod to release it"
            )
    return None


def render_table(rows: Iterable[AddressRow]) -> str:
    """kubectl-style columns."""
    table: list[tuple[str, ...]] = [
        ("ADDRESS", "POOL", "NODE", "POD", "UID", "PHASE", "POLICY", "HOLDER", "SINCE", "NOTE")
    ]
    table += [
        (r.ip or "-", r.pool, r.node, r.pod, r.uid, r.phase, r.policy, r.holder, r.since, _table_note(r))
        for r in rows
    ]
    return _columns(table)


def _table_note(row: AddressRow) -> str:
    if not row.interface:
        return row.note
    return f"interface {row.interface}" + (f"; {row.note}" if row.note else "")


def _columns(table: list[tuple[str, ...]]) -> str:
    """Rows of cells as kubectl prints them: left-aligned columns three spaces apart."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return "".join(
        "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n" for row in table
    )


async def _pools(api: KubeApi) -> list[PoolView]:
    pools = []
    for body in await api.list_cluster_objects(POOLS):
        try:
            pools.append(PoolView.from_obj(body))
        except ValueError:
            continue
    return pools


async def _read(
    api: KubeApi, scheduler_name: str, namespace: str | None = None
) -> tuple[list[PoolView], dict[str, PodInfo]]:
    selector = f"metadata.namespace={namespace}" if namespace is not None else ""
    pods = await lean_pods(api, selector, ANNOTATION_PREFIX)
    return await _pools(api), {uid: p for uid, p in pods.items() if is_ours(p, scheduler_name)}


async def read_default_pools(api: KubeApi) -> dict[str, str]:
    """Namespace → its ``ipscheduler.io/default-pools``, for the namespaces that carry one
    (one LIST of namespaces, as the scheduler's informer reads them). Raises what the LIST
    raises."""
    out: dict[str, str] = {}
    for body in await api.list_namespaces():
        value = namespace_default_pools(body)
        name = (body.get("metadata") or {}).get("name")
        if value is not None and isinstance(name, str):
            out[name] = value
    return out


async def _api(kubeconfig: str | None, context: str | None) -> KubeApi:
    return KubeApi(client.ApiClient(await load_client_config(kubeconfig, context)))


async def ip_list(
    kubeconfig: str | None,
    scheduler_name: str,
    pool: str | None = None,
    node: str | None = None,
    phase: str | None = None,
    output: str = "table",
    namespace: str | None = None,
    context: str | None = None,
) -> tuple[int, str]:
    """``(exit status, text)`` of ``ip list``: the allocations, narrowed by pool, node, phase
    and the namespace of their pod (None: every namespace); a table, or JSON
    (``output="json"``: a list of objects with the row's fields). Raises what the reads
    raise (``ApiException``, ``ConfigException``)."""
    api = await _api(kubeconfig, context)
    try:
        pools, pods = await _read(api, scheduler_name, namespace)
        defaults = await read_default_pools(api)
    finally:
        await api.close()
    rows = select(address_rows(pools, pods, defaults), pool=pool, node=node, phase=phase, namespace=namespace)
    if output == "json":
        return 0, json.dumps([asdict(r) for r in rows], indent=2) + "\n"
    return 0, render_table(rows) if rows else "No allocations found.\n"


def _canonical(address: str) -> tuple[str, str]:
    """``(canonical address, "")``, or ``("", why it is not an address)``."""
    try:
        return canonical(address), ""
    except AddressError as e:
        return "", str(e)


def _find(rows: Iterable[AddressRow], address: str) -> list[AddressRow]:
    return [r for r in rows if r.ip == address]


async def ip_show(
    kubeconfig: str | None, scheduler_name: str, address: str, context: str | None = None
) -> tuple[int, str]:
    """``(exit status, text)`` of ``ip show``: 0 and the allocation(s) of ``address``; 1 when
    no pool holds it; 2 when it is not an address."""
    ip, error = _canonical(address)
    if error:
        return 2, f"ip show: {error}\n"
    api = await _api(kubeconfig, context)
    try:
        pools, pods = await _read(api, scheduler_name)
    finally:
        await api.close()
    found = _find(address_rows(pools, pods), ip)
    if not found:
        in_pools = [p.name for p in pools if p.addresses is not None and ip in p.addresses]
        where = f" (free in pool {', '.join(in_pools)})" if in_pools else " (in no pool)"
        return 1, f"address {ip} is not allocated{where}\n"
    return 0, "".join(
        f"Address:  {r.ip}\nPool:     {r.pool}\nNode:     {r.node}\nPod:      {r.pod}\nUID:      {r.uid}\n"
        f"Phase:    {r.phase}\nPolicy:   {r.policy}\nHolder:   {r.holder}\nSince:    {r.since}\n"
        + (f"Interface: {r.interface}\n" if r.interface else "")
        for r in found
    )


async def ip_release(
    kubeconfig: str | None, scheduler_name: str, address: str, context: str | None = None
) -> tuple[int, str]:
    """``(exit status, text)`` of ``ip release``: 0 when released; 1 when refused (a live
    holder, or not allocated); 2 when ``address`` is not an address. The holder is confirmed
    by a live read by UID; the write removes exactly the allocation read (CAS, retried on
    conflicts)."""
    ip, error = _canonical(address)
    if error:
        return 2, f"ip release: {error}\n"
    api = await _api(kubeconfig, context)
    try:
        for _ in range(CAS_ATTEMPTS):
            pools = await _pools(api)
            found = [(p, uid) for p in pools for uid, a in p.allocations.items() if ip in a.addresses]
            if not found:
                return 1, f"address {ip} is not allocated\n"
            if len(found) > 1:
                return (
                    1,
                    f"address {ip} is held by {len(found)} allocations; `ipscheduler check` tells more\n",
                )
            pool, uid = found[0]
            held = pool.allocations[uid]
            # Every pod as the API server has it now, by UID (never by the name the status
            # records, which may be edited), with the annotations they carry.
            pods = await lean_pods(api, "", ANNOTATION_PREFIX)
            mine = next(r for r in address_rows([pool], pods) if r.uid == uid)
            why = why_not_release(mine) or carried_by(ip, pool.name, uid, pods)
            if why is not None:
                return 1, f"ip release: refused: {why}\n"
            status = allocator.release(pool, PoolContext(), uid, expect=held)
            if status is None:
                continue  # changed meanwhile: read again
            try:
                await api.replace_cluster_status(POOLS, pool.name, pool.resource_version, status.to_wire())
            except Conflict:
                continue
            what = f"{mine.phase}, pod {mine.pod}, UID {uid}, {mine.holder}"
            released = ", ".join(held.addresses)  # the whole allocation: both of a dual-stack pod's
            text = f"released {released} of pool {pool.name} ({what})\n"
            for other in other_family_pools(pools, pool.name, uid, held.interface):
                text += await _release_other_family(api, other, uid)
            return 0, text
        return 1, f"ip release: pool kept changing; try again ({CAS_ATTEMPTS} conflicting writes)\n"
    finally:
        await api.close()


def other_family_pools(pools: list[PoolView], released: str, uid: str, interface: str | None) -> list[str]:
    """The pools other than ``released`` holding the other half of pod ``uid``'s first
    interface (a dual-stack pod's families from two pools: the allocation without an
    interface and the one recording ``eth0``), when the released allocation was one half."""
    if interface not in (None, DEFAULT_INTERFACE):
        return []
    other = DEFAULT_INTERFACE if interface is None else None
    return [
        p.name
        for p in pools
        if p.name != released and uid in p.allocations and p.allocations[uid].interface == other
    ]


async def _release_other_family(api: KubeApi, name: str, uid: str) -> str:
    """Release pod ``uid``'s allocation in pool ``name`` (the other half of an allocation
    :func:`ip_release` released, after the same checks), CAS-retried; the line it prints."""
    for _ in range(CAS_ATTEMPTS):
        pool = next((p for p in await _pools(api) if p.name == name), None)
        held = pool.allocations.get(uid) if pool is not None else None
        if pool is None or held is None:
            return ""
        status = allocator.release(pool, PoolContext(), uid, expect=held)
        if status is None:
            continue
        try:
            await api.replace_cluster_status(POOLS, pool.name, pool.resource_version, status.to_wire())
        except Conflict:
            continue
        return f"released {', '.join(held.addresses)} of pool {pool.name} (the other family of UID {uid})\n"
    return f"ip release: pool {name} kept changing; release {uid}'s other family there again\n"


@dataclass(frozen=True)
class PoolRow:
    """One NodeIPPool as its status says: ``capacity``, ``allocated``, ``free``, ``retained``,
    ``releasing``, ``ready`` (the Ready condition's status: ``True``, ``False``, or ``Unknown`` before the
    scheduler wrote one) and its ``reason`` (``""`` when Ready)."""

    name: str
    node: str
    capacity: int
    allocated: int
    free: int
    retained: int
    releasing: int
    ready: str
    reason: str


def pool_rows(pools: Iterable[PoolView]) -> list[PoolRow]:
    """One row per pool, sorted by node then name."""
    rows = []
    for p in pools:
        ready = next((c for c in p.status.conditions if c.type == "Ready"), None)
        status = ready.status if ready is not None else "Unknown"
        st = p.status
        rows.append(
            PoolRow(
                name=p.name,
                node=p.node_name,
                capacity=st.capacity,
                allocated=st.allocated,
                free=st.free,
                retained=st.retained,
                releasing=st.releasing,
                ready=status,
                reason=ready.reason if ready is not None and status != "True" else "",
            )
        )
    return sorted(rows, key=lambda r: (r.node, r.name))


def pool_total(rows: Iterable[PoolRow]) -> dict[str, int]:
    """The sums over ``rows``: ``pools``, ``nodes`` (distinct), ``capacity``, ``allocated``,
    ``free``, ``retained``, ``releasing``, and ``ready`` (pools whose Ready is True)."""
    rows = list(rows)
    return {
        "pools": len(rows),
        "nodes": len({r.node for r in rows}),
        "capacity": sum(r.capacity for r in rows),
        "allocated": sum(r.allocated for r in rows),
        "free": sum(r.free for r in rows),
        "retained": sum(r.retained for r in rows),
        "releasing": sum(r.releasing for r in rows),
        "ready": sum(1 for r in rows if r.ready == "True"),
    }


def render_pools(rows: list[PoolRow]) -> str:
    """kubectl-style columns (NAME NODE CAPACITY ALLOCATED FREE RETAINED RELEASING READY REASON)
    and a ``TOTAL`` line: the node count, the sums, and the pools Ready out of all."""
    total = pool_total(rows)
    counted = ("capacity", "allocated", "free", "retained", "releasing")
    table: list[tuple[str, ...]] = [("NAME", "NODE", *(k.upper() for k in counted), "READY", "REASON")]
    table += [(r.name, r.node, *(str(getattr(r, k)) for k in counted), r.ready, r.reason) for r in rows]
    nodes = f"{total['nodes']} node{'s' if total['nodes'] != 1 else ''}"
    counts = [str(total[k]) for k in counted]
    table.append(("TOTAL", nodes, *counts, f"{total['ready']}/{total['pools']}", ""))
    return _columns(table)


async def pools_summary(
    kubeconfig: str | None, node: str | None = None, output: str = "table", context: str | None = None
) -> tuple[int, str]:
    """``(exit status, text)`` of ``pools``: 0 and the table of :func:`render_pools` (only the
    pools of ``node`` when given), or JSON (``output="json"``: ``{"pools": [rows], "total":
    pool_total}``). Raises what the LIST raises."""
    api = await _api(kubeconfig, context)
    try:
        pools = await _pools(api)
    finally:
        await api.close()
    rows = [r for r in pool_rows(pools) if node is None or r.node == node]
    if output == "json":
        return 0, json.dumps({"pools": [asdict(r) for r in rows], "total": pool_total(rows)}, indent=2) + "\n"
    return 0, render_pools(rows) if rows else "No NodeIPPools found.\n"
