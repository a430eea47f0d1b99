"""``ipscheduler ip``: the addresses as an operator sees them, and the one way to release one.

- ``ip show ADDRESS``: the pool, node, holder pod and UID, phase, release policy and since.
- ``ip list [--pool P] [--node N] [--phase PHASE] [-o json]``: every allocation, a table.
- ``ip release ADDRESS``: only an allocation no live pod holds: phase Retained, or one whose
  pod is gone or has ended (an orphan the GC sweep would release too). A live holder is a
  refusal that says why. The release is a compare-and-swap on the pool's status that
  removes exactly the allocation that was read; the pod is confirmed gone by a live read
  by UID first (never by name alone).

The table and the release rule are pure (:func:`address_rows`, :func:`why_not_release`);
the commands read the API server.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from kubernetes_asyncio import client

from ipscheduler.framework.types import PodInfo
from ipscheduler.kube.client import Conflict, KubeApi, lean_pods, live_pod, load_client_config
from ipscheduler.underlayip import allocator
from ipscheduler.underlayip.addresses import AddressError, canonical
from ipscheduler.underlayip.models import ANNOTATION_PREFIX, POOLS
from ipscheduler.underlayip.pool import PoolContext, PoolView

PHASES = ("Reserved", "Bound", "Retained")
CAS_ATTEMPTS = 5


@dataclass(frozen=True)
class AddressRow:
    """One allocation: ``ip`` ("" for a count-only slot), its ``pool`` and ``node``, the
    holder ``pod`` (``namespace/name``) and ``uid``, ``phase``, release ``policy`` (``Pod``
    when the allocation names none), ``since`` (RFC 3339) and ``holder``: ``running``,
    ``pending``, ``ended`` (Succeeded/Failed), or ``gone`` (no pod of that UID)."""

    ip: str
    pool: str
    node: str
    pod: str
    uid: str
    phase: str
    policy: str
    since: str
    holder: str


def _holder(uid: str, pods: Mapping[str, PodInfo]) -> str:
    pod = pods.get(uid)
    if pod is None:
        return "gone"
    if pod.terminal:
        return "ended"
    return "running" if pod.bound else "pending"


def address_rows(pools: Iterable[PoolView], pods: Mapping[str, PodInfo]) -> list[AddressRow]:
    """Every allocation of ``pools`` (``pods``: the pods by UID, to tell who still holds
    what), sorted by pool then address."""
    rows = [
        AddressRow(
            ip=a.ip or "",
            pool=p.name,
            node=p.node_name,
            pod=a.pod,
            uid=uid,
            phase=a.phase,
            policy=a.release_policy or "Pod",
            since=a.since.isoformat().replace("+00:00", "Z"),
            holder=_holder(uid, pods),
        )
        for p in pools
        for uid, a in p.allocations.items()
    ]
    return sorted(rows, key=lambda r: (r.pool, r.ip, r.uid))


def why_not_release(row: AddressRow) -> str | None:
    """Why ``row`` may not be released by an operator (None: it may): only a Retained
    allocation, or one whose pod is gone or has ended, may be."""
    if row.phase == "Retained" or row.holder in ("gone", "ended"):
        return None
    return (
        f"{row.ip or 'the slot'} is held by {row.holder} pod {row.pod} (UID {row.uid}); "
        "delete the pod to release it"
    )


def render_table(rows: Iterable[AddressRow]) -> str:
    """kubectl-style columns."""
    table = [("ADDRESS", "POOL", "NODE", "POD", "UID", "PHASE", "POLICY", "HOLDER", "SINCE")]
    table += [(r.ip or "-", r.pool, r.node, r.pod, r.uid, r.phase, r.policy, r.holder, r.since) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return "".join(
        "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n" for row in table
    )


async def _read(api: KubeApi, scheduler_name: str) -> tuple[list[PoolView], dict[str, PodInfo]]:
    pools = []
    for body in await api.list_cluster_objects(POOLS):
        try:
            pools.append(PoolView.from_obj(body))
        except ValueError:
            continue
    pods = await lean_pods(api, f"spec.schedulerName={scheduler_name}", ANNOTATION_PREFIX)
    return pools, pods


async def _api(kubeconfig: str | None) -> KubeApi:
    return KubeApi(client.ApiClient(await load_client_config(kubeconfig)))


async def ip_list(
    kubeconfig: str | None,
    scheduler_name: str,
    pool: str | None = None,
    node: str | None = None,
    phase: str | None = None,
    output: str = "table",
) -> tuple[int, str]:
    """``(exit status, text)`` of ``ip list``: the allocations, narrowed by pool, node and
    phase; a table, or JSON (``output="json"``: a list of objects with the row's fields)."""
    api = await _api(kubeconfig)
    try:
        pools, pods = await _read(api, scheduler_name)
    finally:
        await api.close()
    rows = [
        r
        for r in address_rows(pools, pods)
        if (pool is None or r.pool == pool)
        and (node is None or r.node == node)
        and (phase is None or r.phase == phase)
    ]
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


async def ip_show(kubeconfig: str | None, scheduler_name: str, address: str) -> tuple[int, str]:
    """``(exit status, text)`` of ``ip show``: 0 and the allocation(s) of ``address``; 1 when
    no pool holds it; 2 when it is not an address."""
    ip, error = _canonical(address)
    if error:
        return 2, f"ip show: {error}\n"
    api = await _api(kubeconfig)
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
        for r in found
    )


async def ip_release(kubeconfig: str | None, scheduler_name: str, address: str) -> tuple[int, str]:
    """``(exit status, text)`` of ``ip release``: 0 when released; 1 when refused (a live
    holder, or not allocated); 2 when ``address`` is not an address. The holder is confirmed
    by a live read by UID; the write removes exactly the allocation read (CAS, retried on
    conflicts)."""
    ip, error = _canonical(address)
    if error:
        return 2, f"ip release: {error}\n"
    api = await _api(kubeconfig)
    try:
        for _ in range(CAS_ATTEMPTS):
            pools, _pods = await _read(api, scheduler_name)
            found = [(p, uid) for p in pools for uid, a in p.allocations.items() if a.ip == ip]
            if not found:
                return 1, f"address {ip} is not allocated\n"
            if len(found) > 1:
                return (
                    1,
                    f"address {ip} is held by {len(found)} allocations; `ipscheduler check` tells more\n",
                )
            pool, uid = found[0]
            held = pool.allocations[uid]
            live = await live_pod(api, uid, held.pod)
            row = address_rows([pool], {live.uid: live} if live is not None else {})
            mine = next(r for r in row if r.uid == uid)
            why = why_not_release(mine)
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
            return 0, f"released {ip} of pool {pool.name} ({what})\n"
        return 1, f"ip release: pool kept changing; try again ({CAS_ATTEMPTS} conflicting writes)\n"
    finally:
        await api.close()
