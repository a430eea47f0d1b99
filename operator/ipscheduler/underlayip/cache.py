"""PoolCache: the scheduler's read-only index of NodeIPPools, as the cluster shows them.

Backed by the NodeIPPool informer's index (:mod:`ipscheduler.kube.informer`;
attached, and :attr:`PoolCache.ready` set, once it and the node cache hold a
full LIST), plus an overlay of pool objects returned by our own status writes,
which are newer than the watch until it catches up, and the addresses running pods of
ours carry whatever the pool status says (:meth:`PoolCache.carry`, from the bound-pods
informer). It answers: pools by name, by node, by the pod holding an allocation and by
pod identity; address conflicts between pools; each pool's context
(:class:`~ipscheduler.underlayip.pool.PoolContext`). Whether a pool's node exists
is read from the node cache (:class:`ipscheduler.backend.cache.Cache`); a node
added or deleted there (its ``node_set_version``) rebuilds the pool contexts.
What this process assumed in memory, and the free counts that deduct it, are the address
ledger's (:class:`ipscheduler.underlayip.ledger.AddressLedger`), which follows this index's
changes (:meth:`PoolCache.changes`).
The cache is a hint for filtering and scoring; allocations are always written
by compare-and-swap, so a stale cache costs a retry, never a double
allocation. The GC never plans from it.

Everything derived from the pools is maintained incrementally: a change of
one pool (our write, or its watch event via :meth:`PoolCache.invalidate`
with its name) costs work for that pool only. Address conflicts between
pools are recomputed only when some pool's address set changes, and the
per-pool contexts only when conflicts, addresses held outside their pool's
spec, or the node set change. ``invalidate()`` without a name rebuilds all.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterable, Iterator, Mapping

from ipscheduler.backend.cache import Cache
from ipscheduler.underlayip.addresses import AddressSet
from ipscheduler.underlayip.interfaces import NetworkPools
from ipscheduler.underlayip.models import Allocation
from ipscheduler.underlayip.pool import PoolContext, PoolView, find_conflicts, foreign_holds
from ipscheduler.underlayip.selection import NamespaceDefaults

IndexLike = Mapping[str, Iterable[object]]


class _Firsts(Mapping[str, NetworkPools]):
    """An informer's index (key → a one-element tuple) read as key → value, live, no copy."""

    def __init__(self, index: Mapping[str, tuple[NetworkPools]]) -> None:
        self._index = index

    def __getitem__(self, key: str) -> NetworkPools:
        return self._index[key][0]

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)


"""pool name → values: the NodeIPPool informer's index (name → one-element tuple) or, in
tests, a dict of lists."""


class Changes:
    """The names of the pools whose view or context changed since the reader last took them
    (:meth:`take`), from one :meth:`PoolCache.changes` feed."""

    def __init__(self, index: PoolCache) -> None:
        self._index = index
        self._names: set[str] | None = None  # None: maybe every pool

    def add(self, names: set[str] | None) -> None:
        """Pools ``names`` changed (None: all of them)."""
        if names is None:
            self._names = None
        elif self._names is not None:
            self._names |= names

    def take(self) -> set[str] | None:
        """The pools changed since the last call (None: maybe all, as at first), with the
        index brought up to date first."""
        self._index.ensure_contexts()
        names = self._names
        if names is not None and not names:
            return names  # nothing changed: no new set (asked once per free count read)
        self._names = set()
        return names


def rv_number(value: str) -> int:
    """A resourceVersion as a number, to tell which of two versions of one object is newer
    (-1 when it is not one: never newer). etcd's revisions are numbers; the API does not
    promise it, so nothing but ordering our own writes against the watch relies on it."""
    try:
        return int(value)
    except ValueError:
        return -1


class PoolCache:
    """Pools by name, by node, by allocation holder and by identity, pool conflicts and
    contexts, and the addresses running pods carry (see the module doc)."""

    def __init__(self, nodes: Cache) -> None:
        """``nodes``: the node cache whose node set decides which pools' nodes exist."""
        self.node_cache = nodes
        """The node cache this one reads the node set from."""
        self._node_set_seen = -1
        self._pools: IndexLike = {}
        self._fresh: dict[str, tuple[PoolView, bool]] = {}
        """Pool name → (a view newer than the watch, whether our own status write made it):
        the one record of our own writes (:meth:`store_fresh`, :meth:`is_own_write`)."""
        # Pool snapshot, kept current from the dirty names.
        self._dirty: set[str] | None = None  # None: rebuild everything
        self._snap: dict[str, PoolView] = {}
        self._by_node: dict[str, list[PoolView]] = {}
        self._namespaced: dict[str, PoolView] = {}  # pools with spec.namespaces, by name
        self._identities: dict[str, set[str]] = {}  # pod identity → pools with an allocation for it
        self._namespaces: Mapping[str, tuple[NamespaceDefaults]] = {}
        self.networks: Mapping[str, NetworkPools] = _Firsts({})
        """The NetworkAttachmentDefinitions of ours, ``namespace/name`` → their pools
        (:data:`~ipscheduler.underlayip.interfaces.NetworkView`; :meth:`attach_networks`)."""
        self._holders: dict[str, set[str]] = {}  # pod UID → pool names holding an allocation for it
        self._foreign: dict[str, dict[str, str]] = {}  # pool → its addresses held outside its spec
        self._held_by: dict[str, str] = {}  # merged _foreign: canonical address → pool name
        self._conflicts: dict[str, PoolContext] = {}
        self._conflicts_stale = True
        self.layout_version = 0
        """Bumped whenever address conflicts between pools were recomputed."""
        self._ctx: dict[str, PoolContext] = {}
        self._feeds: weakref.WeakSet[Changes] = weakref.WeakSet()  # every reader of changes()
        self._carried: dict[str, tuple[str, str | None]] = {}  # running pod's UID → (pool, address)
        self._carried_more: dict[str, tuple[str, ...]] = {}  # running pod's UID → its other addresses
        self._carried_elsewhere: dict[str, tuple[str, ...]] = {}  # UID → its further interfaces' addresses
        self._pod_held: dict[str, set[str]] = {}  # canonical address → UIDs of running pods carrying it
        self._pod_holders: dict[str, dict[str, tuple[str | None, str]]] = {}  # pool → UID → (address, node)
        self.ready = asyncio.Event()

    def attach(self, pools: IndexLike) -> None:
        """Use this index from now on: pool name → PoolView. Sets :attr:`ready`."""
        self._pools = pools
        self.invalidate()
        self.ready.set()

    def attach_namespaces(self, defaults: Mapping[str, tuple[NamespaceDefaults]]) -> None:
        """Use this index from now on: namespace name → (its defaults for its pods,), for the
        namespaces that carry one (the namespace informer's)."""
        self._namespaces = defaults

    def attach_networks(self, networks: Mapping[str, tuple[NetworkPools]]) -> None:
        """Use this index from now on: ``namespace/name`` → (its pools,), for the
        NetworkAttachmentDefinitions that carry our annotations (the NAD informer's; empty
        while the API is not served), read live through :attr:`networks`."""
        self.networks = _Firsts(networks)

    def default_pools(self, namespace: str) -> str | None:
        """The ``ipscheduler.io/default-pools`` annotation of ``namespace`` (None: it has none,
        or namespaces are not watched)."""
        entry = self._namespaces.get(namespace)
        return entry[0].pools if entry else None

    def default_families(self, namespace: str) -> dict[str, str] | None:
        """The IP family annotations of ``namespace`` (``ipscheduler.io/ip-family-policy``,
        ``ipscheduler.io/ip-families``: those it carries; None: neither, or namespaces are not
        watched)."""
        entry = self._namespaces.get(namespace)
        return dict(entry[0].families) if entry and entry[0].families else None

    # -- pools ---------------------------------------------------------
    def pool(self, name: str) -> PoolView | None:
        """The newest known version of pool ``name`` (None if it is gone)."""
        indexed: PoolView | None = None
        for p in self._pools.get(name) or ():
            if isinstance(p, PoolView):
                indexed = p
        entry = self._fresh.get(name)
        fresh = entry[0] if entry is not None else None
        if indexed is None:
            self._fresh.pop(name, None)
            return None
        if (
            fresh is not None
            and fresh.uid == indexed.uid
            and rv_number(fresh.resource_version) > rv_number(indexed.resource_version)
        ):
            return fresh
        self._fresh.pop(name, None)
        return indexed

    def pools(self) -> dict[str, PoolView]:
        """All pools by name (newest known versions), brought up to date from the changed names.

        The returned dict is shared: read it, do not modify it.
        """
        self._refresh()
        return self._snap

    def invalidate(self, name: str | None = None) -> None:
        """Pool ``name`` changed (in the index or by our write); None: pools or nodes changed."""
        if name is None:
            self._dirty = None
        elif self._dirty is not None:
            self._dirty.add(name)

    def pools_for_node(self, node_name: str) -> list[PoolView]:
        """Pools serving ``node_name``, sorted by name (the list is shared: do not modify it)."""
        self._refresh()
        return self._by_node.get(node_name, [])

    def store_fresh(self, pool: PoolView, *, own_write: bool = False) -> None:
        """Remember a pool object newer than the watch: returned by our own status write
        (``own_write``), or read by us (a re-read after a conflict, the GC sweep's LIST).
        A read older than the version already remembered (a LIST answered before our own
        write landed, arriving after it) is ignored: the index never goes back to a version
        without the allocations our write recorded, which Reserve would count as free."""
        entry = self._fresh.get(pool.name)
        if (
            entry is not None
            and entry[0].uid == pool.uid
            and rv_number(entry[0].resource_version) > rv_number(pool.resource_version)
        ):
            return
        self._fresh[pool.name] = (pool, own_write)
        self.invalidate(pool.name)

    def fresh(self, name: str, resource_version: str) -> PoolView | None:
        """Our own parsed copy of pool ``name`` at exactly ``resource_version`` (the watch's
        echo of our write), so the index need not parse the same object again."""
        entry = self._fresh.get(name)
        pool = entry[0] if entry is not None else self._snap.get(name)
        return pool if pool is not None and pool.resource_version == resource_version else None

    def is_own_write(self, name: str, resource_version: str) -> bool:
        """Is this version of pool ``name`` the one our last status write produced (its
        watch echo)? Asked by the pool informer's handler before anything reads the pool
        again (the entry goes once the index has caught up with it)."""
        entry = self._fresh.get(name)
        return (
            bool(resource_version)
            and entry is not None
            and entry[1]
            and entry[0].resource_version == resource_version
        )

    def forget(self, name: str) -> None:
        self._fresh.pop(name, None)
        self.invalidate(name)

    def kept_for(self, identity: str) -> list[tuple[PoolView, str, Allocation]]:
        """The allocations recorded for pod identity ``identity`` (``namespace/name``: the
        release policies StatefulSet and Never), in any phase: ``(pool, pod UID,
        allocation)``, sorted by pool name."""
        self._refresh()
        return [
            (pool, uid, a)
            for pool in (self._snap[n] for n in sorted(self._identities.get(identity, ())))
            for uid, a in pool.allocations.items()
            if a.identity == identity
        ]

    def pools_holding(self, uid: str) -> list[PoolView]:
        """Pools holding an allocation for pod ``uid`` (normally zero or one), sorted by name."""
        self._refresh()
        return [self._snap[n] for n in sorted(self._holders.get(uid, ()))]

    # -- incremental upkeep ----------------------------------------------
    def _refresh(self) -> None:
        """Apply the pending changes to the snapshot and everything derived from it."""
        if self.node_cache.node_set_version != self._node_set_seen:  # a node added or deleted
            self._node_set_seen = self.node_cache.node_set_version
            self._dirty = None
        dirty = self._dirty
        if dirty is not None and not dirty:
            return
        self._dirty = set()
        if dirty is None:
            self._rebuild()
            return
        for feed in self._feeds:
            feed.add(dirty)
        held_changed = False
        for name in dirty:
            old = self._snap.get(name)
            new = self.pool(name)
            if new is old:
                continue  # only what running pods carry changed: the context is live
            self._unlink(old)
            if new is None:
                self._snap.pop(name, None)
            else:
                self._snap[name] = new
                self._link(new)
            if (old.addresses if old else None) != (new.addresses if new else None):
                self._conflicts_stale = True
            foreign = foreign_holds(new) if new is not None else {}
            if foreign != self._foreign.get(name, {}):
                held_changed = True
                if foreign:
                    self._foreign[name] = foreign
                else:
                    self._foreign.pop(name, None)
            self._ctx.pop(name, None)
        if held_changed:
            self._held_by.clear()
            for pool_name in sorted(self._foreign):
                for ip, holder in self._foreign[pool_name].items():
                    self._held_by.setdefault(ip, holder)
        if self._conflicts_stale or held_changed:
            self._recompute_contexts()

    def _rebuild(self) -> None:
        self._snap, self._by_node, self._holders, self._foreign = {}, {}, {}, {}
        self._namespaced, self._identities = {}, {}
        for name in list(self._pools.keys()):
            p = self.pool(name)
            if p is not None:
                self._snap[name] = p
                self._link(p)
                if foreign := foreign_holds(p):
                    self._foreign[name] = foreign
        self._held_by.clear()
        for pool_name in sorted(self._foreign):
            for ip, holder in self._foreign[pool_name].items():
                self._held_by.setdefault(ip, holder)
        self._conflicts_stale = True
        self._recompute_contexts()

    def _link(self, pool: PoolView) -> None:
        if pool.namespaces is not None:
            self._namespaced[pool.name] = pool
        others = [p for p in self._by_node.get(pool.node_name, []) if p.name != pool.name]
        self._by_node[pool.node_name] = sorted([*others, pool], key=lambda p: p.name)
        for uid, a in pool.allocations.items():
            self._holders.setdefault(uid, set()).add(pool.name)
            if a.identity:
                self._identities.setdefault(a.identity, set()).add(pool.name)

    def _unlink(self, pool: PoolView | None) -> None:
        if pool is None:
            return
        self._namespaced.pop(pool.name, None)
        rest = [p for p in self._by_node.get(pool.node_name, []) if p.name != pool.name]
        if rest:
            self._by_node[pool.node_name] = rest
        else:
            self._by_node.pop(pool.node_name, None)
        for uid, a in pool.allocations.items():
            names = self._holders.get(uid)
            if names is not None:
                names.discard(pool.name)
                if not names:
                    del self._holders[uid]
            kept = self._identities.get(a.identity) if a.identity else None
            if kept is not None:
                kept.discard(pool.name)
                if not kept:
                    del self._identities[a.identity or ""]

    def _recompute_contexts(self) -> None:
        if self._conflicts_stale:
            self._conflicts = find_conflicts(self._snap.values())
            self._conflicts_stale = False
            self.layout_version += 1
        self._ctx.clear()
        for feed in self._feeds:
            feed.add(None)

    def changes(self) -> Changes:
        """A feed of the pools whose view or context changes from now on (the address
        ledger's: it recounts those pools only). Held weakly: it lives as long as its reader
        keeps it."""
        feed = Changes(self)
        self._feeds.add(feed)
        return feed

    # -- context -------------------------------------------------------
    def ensure_contexts(self) -> None:
        """Bring pools, conflicts and contexts up to date (bumps :attr:`layout_version`
        when conflicts were recomputed)."""
        self._refresh()

    def _new_context(self, pool: PoolView) -> PoolContext:
        c = self._conflicts.get(pool.name)
        return PoolContext(
            node_exists=self.node_cache.node(pool.node_name) is not None,
            blocked=c.blocked if c else None,
            conflicts=c.conflicts if c else (),
            held_by=self._held_by,
            pod_held=self._pod_held,
            pod_holders=self._pod_holders.setdefault(pool.name, {}),
            pod_more=self._carried_more,
        )

    def _context(self, pool: PoolView) -> PoolContext:
        ctx = self._ctx.get(pool.name)
        if ctx is None:
            ctx = self._ctx[pool.name] = self._new_context(pool)
        return ctx

    def context(self, pool: PoolView) -> PoolContext:
        """Node existence and address conflicts of ``pool`` among all pools, and the
        addresses held by allocations outside their own pool's spec (``held_by``, a
        live mapping: use it right away). Memoized per pool until it, the address
        layout or the node set changes."""
        self._refresh()
        snap = self._snap.get(pool.name)
        if snap is not None and snap.node_name == pool.node_name:
            return self._context(snap)
        return self._new_context(pool)  # a version the snapshot does not hold (yet)

    def blocked(self, pool: PoolView) -> AddressSet | None:
        return self.context(pool).blocked

    def namespaced_pools(self) -> Mapping[str, PoolView]:
        """The pools reserved for some namespaces (``spec.namespaces`` set), by name (usually
        few: PreFilter deducts those a pod may not use from the ledger's free counts).
        Shared: do not modify."""
        self._refresh()
        return self._namespaced

    # -- what running pods carry --------------------------------------------------
    def carry(
        self,
        uid: str,
        pool_name: str,
        ip: str | None,
        node: str,
        more: tuple[str, ...] = (),
        elsewhere: tuple[str, ...] = (),
    ) -> None:
        """Running pod ``uid`` (bound to ``node``, not terminal, ours) carries pool
        ``pool_name`` and the canonical address ``ip`` (None: none, or not an address) in
        its annotations, and ``more`` (a dual-stack pod's other canonical addresses): the
        addresses are never handed out, and the pod takes a place in that pool
        (:func:`~ipscheduler.underlayip.pool.unrecorded`), whatever the pool status records,
        until :meth:`uncarry` (the bound-pods informer says it is gone). ``elsewhere``: the
        addresses of its further interfaces (other pools): never handed out either."""
        if (
            self._carried.get(uid) == (pool_name, ip)
            and self._pod_holders[pool_name].get(uid) == (ip, node)
            and self._carried_more.get(uid, ()) == more
            and self._carried_elsewhere.get(uid, ()) == elsewhere
        ):
            return
        self.uncarry(uid)
        self._carried[uid] = (pool_name, ip)
        if more:
            self._carried_more[uid] = more
        if elsewhere:
            self._carried_elsewhere[uid] = elsewhere
        for held in (ip, *more, *elsewhere) if ip is not None else (*more, *elsewhere):
            self._pod_held.setdefault(held, set()).add(uid)
        self._pod_holders.setdefault(pool_name, {})[uid] = (ip, node)
        self.invalidate(pool_name)
        self._invalidate_holding(elsewhere)

    def _invalidate_holding(self, addresses: tuple[str, ...]) -> None:
        """Recount the pools that declare any of ``addresses`` (a running pod's further
        interfaces' addresses: taken there whatever the pools' statuses record)."""
        if addresses:
            for pool in self.pools().values():
                if pool.addresses is not None and any(ip in pool.addresses for ip in addresses):
                    self.invalidate(pool.name)

    def uncarry(self, uid: str) -> None:
        """Pod ``uid`` carries nothing any more (gone, terminal, or its annotations removed)."""
        carried = self._carried.pop(uid, None)
        if carried is None:
            return
        pool_name, ip = carried
        elsewhere = self._carried_elsewhere.pop(uid, ())
        more = (*self._carried_more.pop(uid, ()), *elsewhere)
        for held in (ip, *more) if ip is not None else more:
            if (uids := self._pod_held.get(held)) is not None:
                uids.discard(uid)
                if not uids:
                    del self._pod_held[held]
        if (holders := self._pod_holders.get(pool_name)) is not None:
            holders.pop(uid, None)  # the mapping stays: contexts hold it
        self.invalidate(pool_name)
        self._invalidate_holding(elsewhere)

    def carried(self) -> Mapping[str, tuple[str, str | None]]:
        """Running pods of ours by UID → (pool, canonical address) from their annotations.
        Shared: do not modify."""
        return self._carried

    def carriers_of(self, pool_name: str) -> frozenset[str]:
        """UIDs of the running pods whose annotation names pool ``pool_name``."""
        return frozenset(self._pod_holders.get(pool_name, ()))
