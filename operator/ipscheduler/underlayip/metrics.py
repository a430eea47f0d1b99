"""The underlayip wing's metrics (``ipscheduler_*``), registered on the process's one
registry (:attr:`ipscheduler.backend.metrics.Metrics.registry`), as kube-scheduler's
volumebinding plugin registers its own (``pkg/scheduler/framework/plugins/volumebinding/metrics``):

- ``ipscheduler_pool_capacity|allocated|free|retained|exhausted|releasing{pool, node}``: from the
  pool cache at scrape time (exhausted is the pool's Exhausted condition, 1 or 0);
- ``ipscheduler_pods_waiting_for_address``: unschedulable pods UnderlayIP rejected;
- ``ipscheduler_pods_rehomed_total``: pods placed anew with a new address after their
  retain-timeout;
- ``ipscheduler_cas_conflicts_total``, ``ipscheduler_pool_status_writes_total``,
  ``ipscheduler_pool_status_mutations_total``: the pool writer's compare-and-swap writes;
- ``ipscheduler_gc_releases_total``, ``ipscheduler_allocations_restored_total``,
  ``ipscheduler_adoptions_refused_total``: the pool controller's repairs.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import ClassVar

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ipscheduler.underlayip.pool import PoolView

PoolCounts = tuple[int, int, int, int, int, int]
"""``(capacity, allocated, free, retained, exhausted, releasing)`` of a pool; exhausted is 1
or 0."""

POOL_GAUGES = (
    ("capacity", "Usable addresses (or slots) of a NodeIPPool."),
    ("allocated", "Places taken in a NodeIPPool: one per address (two for a dual-stack pod) or slot."),
    ("free", "Free addresses (or slots) of a NodeIPPool."),
    ("retained", "Allocations of a NodeIPPool kept for a pod identity whose pod ended."),
    ("exhausted", "1 while the NodeIPPool's Exhausted condition is True (no address free; with hysteresis)."),
    ("releasing", "Addresses of a NodeIPPool whose pod is gone but whose node has not yet let them go."),
)


@dataclass(frozen=True)
class _Scraped(Collector):
    """The gauges computed when scraped: the pods waiting for an address (``waiting()``)
    and every pool's (``pools()``) :data:`PoolCounts` (``counts(pool)``)."""

    waiting: Callable[[], int]
    pools: Callable[[], Mapping[str, PoolView]]
    counts: Callable[[PoolView], PoolCounts]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "ipscheduler_pods_waiting_for_address",
            "Unschedulable pods that no node could give an underlay address (rejected by UnderlayIP).",
            value=self.waiting(),
        )
        families = [
            GaugeMetricFamily(f"ipscheduler_pool_{name}", doc, labels=["pool", "node"])
            for name, doc in POOL_GAUGES
        ]
        for pool in self.pools().values():
            for family, value in zip(families, self.counts(pool), strict=True):
                family.add_metric([pool.name, pool.node_name], value)
        yield from families


class UnderlayIPMetrics:
    """The wing's metric objects on ``registry`` (module doc). One per registry:
    :meth:`on` makes it or returns the one made (the runner makes it before the election,
    so a standby serves the series too; the wiring takes the same)."""

    _made: ClassVar[weakref.WeakKeyDictionary[CollectorRegistry, UnderlayIPMetrics]] = (
        weakref.WeakKeyDictionary()
    )

    @classmethod
    def on(cls, registry: CollectorRegistry) -> UnderlayIPMetrics:
        """The wing's metrics on ``registry``, registered at the first call."""
        made = cls._made.get(registry)
        if made is None:
            made = cls._made[registry] = cls(registry)
        return made

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._scraped = False

        def counter(name: str, doc: str) -> Counter:
            return Counter(f"ipscheduler_{name}", doc, registry=registry)

        self.cas_conflicts = counter("cas_conflicts", "NodeIPPool status writes refused with 409 Conflict.")
        self.pool_writes = counter("pool_status_writes", "NodeIPPool status writes that succeeded.")
        self.pool_mutations = counter(
            "pool_status_mutations",
            "Mutations (reserve, release, mark Bound...) carried by those writes; "
            "mutations / writes is the coalescing factor.",
        )
        self.allocations_restored = counter(
            "allocations_restored",
            "Allocations of running pods put back after a NodeIPPool status edit removed them.",
        )
        self.adoptions_refused = counter(
            "adoptions_refused",
            "Pods created bound with an address of a NodeIPPool they may not use (spec.namespaces, "
            "ipscheduler.io/pools, the namespace's default pools, schedulerName): not recorded.",
        )
        self.pods_rehomed = counter(
            "pods_rehomed",
            "Pods placed anew with a new address after their retained address's node could not "
            "take them for their retain-timeout.",
        )
        self.gc_releases = counter("gc_releases", "Allocations released by reconcile or garbage collection.")

    def count_write(self, mutations: int) -> None:
        """One pool status write landed, carrying ``mutations`` mutations."""
        self.pool_writes.inc()
        self.pool_mutations.inc(mutations)

    def scrape_from(
        self,
        waiting: Callable[[], int],
        pools: Callable[[], Mapping[str, PoolView]],
        counts: Callable[[PoolView], PoolCounts],
    ) -> None:
        """Register the scrape-time gauges: the pods ``waiting()`` for an address, the
        ``pools()`` and their ``counts``. Once per registry: a second call raises ValueError."""
        if self._scraped:
            raise ValueError("the pool gauges are already registered")
        self._scraped = True
        self.registry.register(_Scraped(waiting, pools, counts))
