"""The phases of pods with several addresses, on kwok nodes: dual-stack pods and pods with
further interfaces, each in the shape of a published figure (``docs/performance.md``,
"Dual-stack pods and further interfaces").

- ``dualstack-single``, ``dualstack-dual`` (Spiderpool's IPAM benchmark: as many addresses as
  pods, single-stack then dual-stack): on every node one NodeIPPool holding exactly its share
  of the pods (:func:`rooms`); ``single``: IPv4 only, the pods ask for nothing special;
  ``dual``: as many IPv6 addresses as IPv4 in each pool, the pods ``RequireDualStack``
  (:data:`ipscheduler.underlayip.models.ANNOTATION_IP_FAMILY_POLICY`).
- ``interfaces-1``, ``interfaces-16`` (whereabouts#313: pods with 16 further networks against
  one): on every node a first pool and one pool per interface ``net1``..``netN``, each with
  room for the node's share; the pods ask for N further interfaces through
  :data:`ipscheduler.underlayip.models.ANNOTATION_INTERFACE_POOLS`, each interface naming
  its pool of every node (a pool is one node's: a pod that may land anywhere lists them all).

A phase's pools are its own (:func:`pool_bodies`: names ``<tag>-<node>[-net<k>]``, each in
an address block of its own, :func:`address_range`); the bench's own pools (``bench-<node>``,
:func:`.cluster.prepare`) are withheld from the phase's pods while these phases run
(:func:`withhold_bench_pools`: reserved for a namespace no pod is in), so the phase's pools
hold every address its pods can get. The pods name no pool for their first interface, as the
other phases' pods: the scheduler spreads them as usual. On a node the first interface takes
the pool with the most free addresses, then the first by name: the phase's first pool, which
has as many free as each interface's pool and sorts before them (``<tag>-<node>`` before
``<tag>-<node>-net1``).

Each row is checked (:func:`check`): every pod bound with all its addresses, each inside the
right pool of its node (both families for ``dual``; for further interfaces one entry per
interface in :data:`ipscheduler.underlayip.models.ANNOTATION_INTERFACES`, from that
interface's pool) and no address twice in the phase.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import sys
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client

from ipscheduler.underlayip.families import REQUIRE_DUAL_STACK
from ipscheduler.underlayip.models import (
    ANNOTATION_INTERFACE_POOLS,
    ANNOTATION_INTERFACES,
    ANNOTATION_IP,
    ANNOTATION_IP_FAMILY_POLICY,
    ANNOTATION_IPS,
    ANNOTATION_POOL,
    FINALIZER,
    MAX_POOL_ADDRESSES,
    POOLS,
)

from .cluster import create_pool

MULTI_PHASES = ("dualstack-single", "dualstack-dual", "interfaces-1", "interfaces-16")
"""The phases of this module, in the order they run."""
INTERFACES = {"interfaces-1": 1, "interfaces-16": 16}
"""Further interfaces per pod of each interface phase (16: whereabouts#313's pods)."""
TAGS = {"dualstack-single": "ds1", "dualstack-dual": "ds2", "interfaces-1": "if1", "interfaces-16": "if16"}
"""The prefix of each phase's pool names (short: every pod of an interface phase lists them)."""
PHASE_LABEL = "bench.ipscheduler.io/phase"
"""Label on a phase's pools (its tag): they are listed and deleted by it."""
WITHHELD_FOR = "bench-withheld"
"""The namespace the bench's own pools are reserved for while these phases run: no pod is in
it, so none of the phases' pods may use them."""
MAX_NODES = 1024
"""Nodes an address block holds: one /24 (IPv4) and one /64 (IPv6) per node."""
MAX_ROOM = 254
"""Pods per node an IPv4 /24 holds."""
KEPT_ANNOTATIONS = (ANNOTATION_POOL, ANNOTATION_IPS, ANNOTATION_INTERFACES)
"""The annotations of a bound pod :func:`check` reads, beside its ``ipscheduler.io/ip``."""
SETTLE_S = 120.0
"""Seconds a phase's pools are given to get the scheduler's finalizer and status (before its
pods) and to be gone (after them)."""


@dataclass(frozen=True)
class Plan:
    """The pools and pods of one phase: ``tag`` (pool-name prefix and label), ``nodes`` in
    order, ``rooms`` (pods each node's pools hold, :func:`rooms`), ``dual`` (pools declare
    both families, pods RequireDualStack) and ``interfaces`` (further interfaces per pod)."""

    phase: str
    tag: str
    nodes: tuple[str, ...]
    rooms: tuple[int, ...]
    dual: bool = False
    interfaces: int = 0

    def first_pool(self, node: str) -> str:
        """The pool of ``node`` that the pod's first interface takes."""
        return f"{self.tag}-{node}"

    def interface_pool(self, node: str, k: int) -> str:
        """The pool of ``node`` for interface ``net<k>``."""
        return f"{self.tag}-{node}-net{k}"

    def addresses_per_pod(self) -> int:
        """Addresses every pod should get."""
        return (2 if self.dual else 1) + self.interfaces


def rooms(pods: int, nodes: int) -> tuple[int, ...]:
    """``pods`` shared over ``nodes``: each node's share, the first ones one more when it does
    not divide (the shares add up to ``pods`` exactly)."""
    base, extra = divmod(pods, nodes)
    return tuple(base + (1 if i < extra else 0) for i in range(nodes))


def plan(phase: str, nodes: list[str], pods: int) -> Plan:
    """The :class:`Plan` of ``phase`` (one of :data:`MULTI_PHASES`) for ``pods`` over ``nodes``."""
    return Plan(
        phase,
        TAGS[phase],
        tuple(nodes),
        rooms(pods, len(nodes)),
        dual=phase == "dualstack-dual",
        interfaces=INTERFACES.get(phase, 0),
    )


def problem(phases: set[str], nodes: int, pods: int) -> str | None:
    """Why these phases cannot run with ``pods`` over ``nodes`` (None: they can): the address
    blocks hold :data:`MAX_NODES` nodes of :data:`MAX_ROOM` pods, a dual-stack pool at most
    the pool-size ceiling."""
    asked = phases & set(MULTI_PHASES)
    if not asked:
        return None
    room = max(rooms(pods, nodes))
    limit = min(MAX_ROOM, MAX_POOL_ADDRESSES // 2) if "dualstack-dual" in asked else MAX_ROOM
    if nodes > MAX_NODES:
        return f"{','.join(sorted(asked))}: at most {MAX_NODES} nodes (their address blocks), not {nodes}"
    if room > limit:
        return (
            f"{','.join(sorted(asked))}: at most {limit} pods per node, not {room} "
            f"({pods} pods over {nodes} nodes)"
        )
    return None


def address_range(block: int, index: int, room: int, version: int) -> tuple[str, str]:
    """The ``room`` addresses of node ``index`` (0-based) in address ``block``: IPv4 one /24 per
    node in 10.128.0.0/9 (a block is 1024 /24s, apart from the bench's 10.100.0.0/14), IPv6
    one /64 per node in fd00:100::/32."""
    if version == 4:
        base4 = ipaddress.IPv4Address("10.128.0.0") + block * MAX_NODES * 256 + index * 256
        return str(base4 + 1), str(base4 + room)
    base6 = ipaddress.IPv6Address("fd00:100::") + (block << 80) + (index << 64)
    return str(base6 + 1), str(base6 + room)


def blocks(p: Plan) -> dict[str, int]:
    """The address block of each kind of pool of ``p``: ``first`` and ``net<k>``; every phase
    its own, so a phase's addresses never meet another's."""
    start = {"dualstack-single": 0, "dualstack-dual": 1, "interfaces-1": 2, "interfaces-16": 4}[p.phase]
    return {"first": start, **{f"net{k}": start + k for k in range(1, p.interfaces + 1)}}


def pool_ranges(p: Plan) -> dict[str, tuple[str, list[tuple[str, str]]]]:
    """Every pool of ``p``: name → (node, its address ranges), nodes without room left out."""
    out: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    kinds = blocks(p)
    for index, (node, room) in enumerate(zip(p.nodes, p.rooms, strict=True)):
        if not room:
            continue
        first = [address_range(kinds["first"], index, room, 4)]
        if p.dual:
            first.append(address_range(kinds["first"], index, room, 6))
        out[p.first_pool(node)] = (node, first)
        for k in range(1, p.interfaces + 1):
            out[p.interface_pool(node, k)] = (node, [address_range(kinds[f"net{k}"], index, room, 4)])
    return out


def pool_bodies(p: Plan) -> list[dict[str, Any]]:
    """The NodeIPPools of ``p`` (:func:`pool_ranges`), labelled :data:`PHASE_LABEL`."""
    return [
        {
            "apiVersion": POOLS.api_version,
            "kind": POOLS.kind,
            "metadata": {"name": name, "labels": {PHASE_LABEL: p.tag}},
            "spec": {"nodeName": node, "addresses": [f"{a}-{b}" for a, b in ranges]},
        }
        for name, (node, ranges) in pool_ranges(p).items()
    ]


def pod_annotations(p: Plan) -> dict[str, str]:
    """What every pod of ``p`` carries: ``RequireDualStack`` (dual), or its further interfaces,
    each naming its pool of every node with room (the first interface names none)."""
    if p.dual:
        return {ANNOTATION_IP_FAMILY_POLICY: REQUIRE_DUAL_STACK}
    if p.interfaces:
        nodes = [n for n, room in zip(p.nodes, p.rooms, strict=True) if room]
        listed = {
            f"net{k}": ",".join(p.interface_pool(n, k) for n in nodes) for k in range(1, p.interfaces + 1)
        }
        return {ANNOTATION_INTERFACE_POOLS: json.dumps(listed, separators=(",", ":"))}
    return {}


def _inside(ip: str, ranges: list[tuple[str, str]]) -> bool:
    try:
        addr = ipaddress.ip_address(ip)
        return any(
            addr.version == ipaddress.ip_address(a).version
            and ipaddress.ip_address(a) <= addr <= ipaddress.ip_address(b)  # type: ignore[operator]
            for a, b in ranges
        )
    except ValueError:
        return False


def pod_problems(
    p: Plan, pools: Mapping[str, tuple[str, list[tuple[str, str]]]], node: str, annotations: Mapping[str, str]
) -> tuple[list[str], list[str]]:
    """What is wrong with one bound pod of ``p`` (whose pools are ``pools``,
    :func:`pool_ranges`) on ``node``, whose annotations (its ``ipscheduler.io/ip`` and
    :data:`KEPT_ANNOTATIONS`) are ``annotations``; and every address it got (first interface
    first)."""
    wrong: list[str] = []
    first_pool = p.first_pool(node)
    got_pool = annotations.get(ANNOTATION_POOL)
    if got_pool != first_pool:
        wrong.append(f"first interface from pool {got_pool}, not {first_pool}")
    first_ranges = pools.get(first_pool, (node, []))[1]
    ip = annotations.get(ANNOTATION_IP) or ""
    ips = [a for a in (annotations.get(ANNOTATION_IPS) or ip).split(",") if a]
    if ips[:1] != [ip]:
        wrong.append(f"{ANNOTATION_IPS} {ips} does not start with {ANNOTATION_IP} {ip!r}")
    versions = sorted(ipaddress.ip_address(a).version for a in ips if _valid(a))
    if versions != ([4, 6] if p.dual else [4]):
        wrong.append(
            f"first interface addresses {ips}: not {'one IPv4 and one IPv6' if p.dual else 'one IPv4'}"
        )
    wrong += [f"{a} outside pool {first_pool}" for a in ips if not _inside(a, first_ranges)]
    addresses = list(ips)
    entries: dict[str, Any] = {}
    if p.interfaces:
        try:
            entries = json.loads(annotations.get(ANNOTATION_INTERFACES) or "{}")
        except ValueError:
            wrong.append(f"{ANNOTATION_INTERFACES} is not JSON")
        want = {f"net{k}" for k in range(1, p.interfaces + 1)}
        if not isinstance(entries, dict) or set(entries) != want:
            wrong.append(
                f"{ANNOTATION_INTERFACES} has {sorted(entries) if isinstance(entries, dict) else entries}"
            )
            entries = {}
    elif ANNOTATION_INTERFACES in annotations:
        wrong.append(f"{ANNOTATION_INTERFACES} on a pod that asked for none")
    for name, entry in sorted(entries.items()):
        pool = p.interface_pool(node, int(name.removeprefix("net")))
        got = entry.get("ips") if isinstance(entry, dict) else None
        if (
            not isinstance(entry, dict)
            or entry.get("pool") != pool
            or not isinstance(got, list)
            or len(got) != 1
        ):
            wrong.append(f"{name}: {entry!r}, not one address of pool {pool}")
            continue
        addresses.append(str(got[0]))
        if not _inside(str(got[0]), pools.get(pool, (node, []))[1]):
            wrong.append(f"{name}: {got[0]} outside pool {pool}")
    return wrong, addresses


def _valid(ip: str) -> bool:
    try:
        ipaddress.ip_address(ip)
    except ValueError:
        return False
    return True


def check(p: Plan, placement: Mapping[str, tuple[str, Mapping[str, str]]]) -> dict[str, Any]:
    """The correctness columns of a row of ``p`` from its bound pods (pod → (node, annotations)):
    ``addresses`` (pods with every address right: :func:`pod_problems`), ``addresses_unique``
    (no address twice, across pods and interfaces), ``addresses_in_node_pool`` (no pod with a
    problem), ``addresses_per_pod``, ``address_total`` and the first problems seen."""
    seen: set[str] = set()
    twice: list[str] = []
    good = 0
    problems: list[str] = []
    total = 0
    pools = pool_ranges(p)
    for pod, (node, bound_with) in sorted(placement.items()):
        wrong, addresses = pod_problems(p, pools, node, bound_with)
        total += len(addresses)
        for a in addresses:
            key = str(ipaddress.ip_address(a)) if _valid(a) else a
            if key in seen:
                twice.append(f"{pod}: {a} given twice")
            seen.add(key)
        if wrong:
            problems.extend(f"{pod} on {node}: {w}" for w in wrong)
        else:
            good += 1
    return {
        "addresses": good,
        "addresses_unique": not twice,
        "addresses_in_node_pool": not problems,
        "addresses_per_pod": p.addresses_per_pod(),
        "address_total": total,
        "address_problems": (twice + problems)[:10],
    }


def kept(annotations: Mapping[str, str] | None) -> dict[str, str]:
    """The annotations of a bound pod that :func:`check` reads."""
    return {k: v for k, v in (annotations or {}).items() if k in (ANNOTATION_IP, *KEPT_ANNOTATIONS)}


# ------------------------------------------------------------------------ the cluster


async def _patch_pool(custom: client.CustomObjectsApi, name: str, body: dict[str, Any]) -> None:
    await custom.patch_cluster_custom_object(
        POOLS.group, POOLS.version, POOLS.plural, name, body, _content_type="application/merge-patch+json"
    )


@contextlib.asynccontextmanager
async def withhold_bench_pools(api: client.ApiClient, pools: list[str]) -> AsyncIterator[None]:
    """The bench's pools ``pools`` reserved for :data:`WITHHELD_FOR` while the block runs (no
    pod of a phase may use them), for every namespace again after it."""
    custom = client.CustomObjectsApi(api)
    sem = asyncio.Semaphore(50)

    async def each(namespaces: list[str] | None) -> None:
        async def one(name: str) -> None:
            async with sem:
                await _patch_pool(custom, name, {"spec": {"namespaces": namespaces}})

        await asyncio.gather(*(one(n) for n in pools))

    await each([WITHHELD_FOR])
    try:
        yield
    finally:
        await each(None)


async def create_pools(api: client.ApiClient, p: Plan) -> int:
    """Create the pools of ``p`` (50 at a time); how many."""
    sem = asyncio.Semaphore(50)
    bodies = pool_bodies(p)

    async def one(body: dict[str, Any]) -> None:
        async with sem:
            await create_pool(api, body)

    await asyncio.gather(*(one(b) for b in bodies))
    return len(bodies)


async def _phase_pools(api: client.ApiClient, p: Plan) -> list[dict[str, Any]]:
    custom = client.CustomObjectsApi(api)
    listed = await custom.list_cluster_custom_object(
        POOLS.group, POOLS.version, POOLS.plural, label_selector=f"{PHASE_LABEL}={p.tag}"
    )
    return list(listed["items"])


async def wait_settled(api: client.ApiClient, p: Plan, want: int) -> bool:
    """Wait (:data:`SETTLE_S` at most) until the ``want`` pools of ``p`` carry the scheduler's
    finalizer and a status counting all their addresses free, so that their first writes are
    not counted in the phase; False on time-out."""
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        items = await _phase_pools(api, p)
        settled = [
            i
            for i in items
            if FINALIZER in (i["metadata"].get("finalizers") or [])
            and (s := i.get("status") or {}).get("capacity")
            and s.get("free") == s.get("capacity")
        ]
        if len(settled) >= want:
            return True
        await asyncio.sleep(0.5)
    print(f"bench: the pools of {p.phase} did not settle within {SETTLE_S:.0f} s", file=sys.stderr)
    return False


async def delete_pools(api: client.ApiClient, p: Plan) -> None:
    """Delete the pools of ``p`` and wait until they are gone (the running scheduler drops its
    finalizer once a pool holds nothing); after :data:`SETTLE_S` the finalizers are removed
    by force, saying so."""
    custom = client.CustomObjectsApi(api)
    await custom.delete_collection_cluster_custom_object(
        POOLS.group, POOLS.version, POOLS.plural, label_selector=f"{PHASE_LABEL}={p.tag}"
    )
    deadline, forced = time.monotonic() + SETTLE_S, False
    while items := await _phase_pools(api, p):
        if time.monotonic() > deadline:
            if forced:
                print(f"bench: {len(items)} pool(s) of {p.phase} not deleted", file=sys.stderr)
                return
            print(
                f"bench: {len(items)} pool(s) of {p.phase} still there: finalizers removed", file=sys.stderr
            )
            for i in items:
                with contextlib.suppress(client.exceptions.ApiException):
                    await _patch_pool(custom, i["metadata"]["name"], {"metadata": {"finalizers": None}})
            deadline, forced = time.monotonic() + SETTLE_S, True
        await asyncio.sleep(0.5)
