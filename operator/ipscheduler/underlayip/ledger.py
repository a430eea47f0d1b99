"""AddressLedger: what this scheduler took in memory, and the free counts that deduct it.

The pool index (:class:`ipscheduler.underlayip.cache.PoolCache`) says what the cluster
shows; the ledger adds what the address binder assumed and has not written yet, as
kube-scheduler's cache assumes a pod on its node before the binding lands
(``pkg/scheduler/backend/cache/cache.go``, ``AssumePod``) and volumebinding's assume
caches hold a volume's assumed binding (``volumebinding/assume_cache.go``). From both it
keeps, incrementally, how many pods each pool and each node can take now
(:func:`ipscheduler.underlayip.allocator.available`, assumed places deducted): a change of
one pool, from the index (:meth:`PoolCache.changes
<ipscheduler.underlayip.cache.PoolCache.changes>`) or from an assume, costs work for
that pool only.

One writer: the address binder (:meth:`assume`, :meth:`forget_assumed`). One ledger per
pool index: the plugin's dependencies build it once (``UnderlayIPDeps``), whatever the
number of profiles.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet

from ipscheduler.underlayip.allocator import available, available_to, family_free
from ipscheduler.underlayip.cache import PoolCache
from ipscheduler.underlayip.pool import PoolContext, PoolView


class AddressLedger:
    """Assumed reservations over a pool index, and the free counts (module doc)."""

    def __init__(self, index: PoolCache) -> None:
        """``index``: the pool index whose pools, contexts and changes the counts follow."""
        self.index = index
        self._changes = index.changes()
        self._assumed: dict[str, dict[str, tuple[int, ...]]] = {}  # pool → UID → IP versions, write pending
        self._family_free: dict[str, dict[int, int]] = {}  # pool → IP version → free (asked lazily)
        self._avail: dict[str, int] = {}  # pool → pods it can take now (see allocator.available)
        self._node_free: dict[str, int] = {}  # node → sum of _avail of its pools
        self._counted: dict[str, str] = {}  # pool → the node its _avail is counted on

    # -- assumed reservations ----------------------------------------------
    def assume(self, pool_name: str, uid: str, versions: tuple[int, ...] = ()) -> None:
        """Pod ``uid`` was given a place in pool ``pool_name`` whose write is still pending:
        count it as taken until :meth:`forget_assumed`; ``versions``: the IP versions of the
        addresses it takes there, one place each (none: one place of any family)."""
        self._assumed.setdefault(pool_name, {})[uid] = versions
        self._recount(pool_name)

    def forget_assumed(self, pool_name: str, uid: str) -> None:
        """The pending write for ``uid`` in ``pool_name`` landed or failed."""
        uids = self._assumed.get(pool_name)
        if uids is not None and uid in uids:
            del uids[uid]
            if not uids:
                del self._assumed[pool_name]
            self._recount(pool_name)

    def assumed(self, pool_name: str) -> frozenset[str]:
        """UIDs of the pods assumed in pool ``pool_name``, their writes pending."""
        return frozenset(self._assumed.get(pool_name, ()))

    # -- free counts -------------------------------------------------------
    def available(self, pool: PoolView) -> int:
        """Pods ``pool`` can take now, assumed places deducted (memoized for the index's
        version of the pool; computed for any other version)."""
        self._sync()
        if self.index.pools().get(pool.name) is pool:
            return self._avail.get(pool.name, 0)
        return self._available(pool, self.index.context(pool))

    def available_to(self, pool: PoolView, uid: str) -> int:
        """Pods like pod ``uid`` ``pool`` can take now when it is counted for that pod: the
        pod's own allocation there counts as free for it
        (:func:`~ipscheduler.underlayip.allocator.available_to`)."""
        if uid not in pool.allocations:
            return self.available(pool)
        return available_to(pool, self.index.context(pool), uid)

    def family_free(self, pool: PoolView) -> Mapping[int, int]:
        """IP version → addresses of that family ``pool`` can still give, assumed reservations
        deducted (:func:`~ipscheduler.underlayip.allocator.family_free`; computed when first
        asked after the pool's last change, for pods that name IP families). Shared: do not
        modify."""
        self._sync()
        if self.index.pools().get(pool.name) is not pool:
            return self._families(pool, self.index.context(pool))
        found = self._family_free.get(pool.name)
        if found is None:
            found = self._family_free[pool.name] = self._families(pool, self.index.context(pool))
        return found

    def _families(self, pool: PoolView, ctx: PoolContext) -> dict[int, int]:
        free = family_free(pool, ctx)
        for uid, versions in self._assumed.get(pool.name, {}).items():
            if uid not in pool.allocations:
                for version in versions:
                    if version in free:
                        free[version] = max(0, free[version] - 1)
        return free

    def node_free(self) -> Mapping[str, int]:
        """Node name → pods its pools can take now (:meth:`available` summed); nodes
        without pools are absent. Shared: do not modify."""
        self._sync()
        return self._node_free

    def _available(self, pool: PoolView, ctx: PoolContext) -> int:
        n = available(pool, ctx)
        assumed = self._assumed.get(pool.name)
        if n and assumed:
            n = max(0, n - sum(max(1, len(v)) for uid, v in assumed.items() if uid not in pool.allocations))
        return n

    def _sync(self) -> AbstractSet[str]:
        """Follow the index's changes: recount the pools that changed (all: None); returns
        the names recounted."""
        changed = self._changes.take()
        if changed is None:
            self._avail.clear()
            self._family_free.clear()
            self._node_free.clear()
            self._counted.clear()
            changed = set(self.index.pools())
        for name in changed:
            self._count(name)
        return changed

    def _recount(self, pool_name: str) -> None:
        """Pool ``pool_name``'s assumed places changed: recount it (once, with the index's
        changes)."""
        if pool_name not in self._sync():
            self._count(pool_name)

    def _count(self, name: str) -> None:
        """Recount pool ``name`` (gone from the index: uncount it)."""
        self._family_free.pop(name, None)
        old, node = self._avail.pop(name, 0), self._counted.pop(name, None)
        if node is not None and old:
            self._node_free[node] = self._node_free.get(node, 0) - old
        pool = self.index.pools().get(name)
        if pool is None:
            return
        new = self._available(pool, self.index.context(pool))
        self._avail[name], self._counted[name] = new, pool.node_name
        self._node_free[pool.node_name] = self._node_free.get(pool.node_name, 0) + new
