"""underlayip/metrics: what each of the wing's series counts, read from prometheus-client's
registry: the counters, the pool gauges and the pods waiting, computed when scraped."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry

from ipscheduler.backend.metrics import Metrics
from ipscheduler.underlayip.metrics import POOL_GAUGES, PoolCounts, UnderlayIPMetrics
from ipscheduler.underlayip.pool import PoolView
from tests.builders import pool

COUNTERS = {
    "cas_conflicts": "ipscheduler_cas_conflicts_total",
    "pool_writes": "ipscheduler_pool_status_writes_total",
    "pool_mutations": "ipscheduler_pool_status_mutations_total",
    "allocations_restored": "ipscheduler_allocations_restored_total",
    "adoptions_refused": "ipscheduler_adoptions_refused_total",
    "pods_rehomed": "ipscheduler_pods_rehomed_total",
    "gc_releases": "ipscheduler_gc_releases_total",
}


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


@pytest.mark.parametrize("attribute", list(COUNTERS), ids=list(COUNTERS))
def test_each_counter_counts_under_its_own_name_alone(attribute: str) -> None:
    registry = CollectorRegistry()
    metrics = UnderlayIPMetrics.on(registry)
    getattr(metrics, attribute).inc()
    assert {name: value(registry, name) for name in COUNTERS.values()} == {
        name: 1.0 if a == attribute else 0.0 for a, name in COUNTERS.items()
    }


def test_the_wings_metrics_are_made_once_per_registry() -> None:
    m = Metrics()
    assert UnderlayIPMetrics.on(m.registry) is UnderlayIPMetrics.on(m.registry)
    assert UnderlayIPMetrics.on(Metrics().registry) is not UnderlayIPMetrics.on(m.registry)


def test_a_write_counts_once_and_its_mutations_each() -> None:
    registry = CollectorRegistry()
    metrics = UnderlayIPMetrics.on(registry)
    metrics.count_write(3)
    metrics.count_write(1)
    assert value(registry, "ipscheduler_pool_status_writes_total") == 2.0
    assert value(registry, "ipscheduler_pool_status_mutations_total") == 4.0


def scraped(
    waiting: Callable[[], int],
    pools: Callable[[], dict[str, PoolView]],
    counts: Callable[[PoolView], PoolCounts],
) -> CollectorRegistry:
    registry = CollectorRegistry()
    UnderlayIPMetrics.on(registry).scrape_from(waiting, pools, counts)
    return registry


def test_the_pool_gauges_are_each_pools_counts_by_pool_and_node() -> None:
    pools = {"p1": pool("p1", "n1"), "p2": pool("p2", "n2")}
    counts = {"p1": (4, 1, 3, 0, 0, 0), "p2": (2, 2, 0, 1, 1, 1)}
    registry = scraped(lambda: 0, lambda: pools, lambda p: counts[p.name])  # type: ignore[return-value]
    got = {
        (gauge, name): value(registry, f"ipscheduler_pool_{gauge}", pool=name, node=p.node_name)
        for gauge, _ in POOL_GAUGES
        for name, p in pools.items()
    }
    gauges = [g for g, _ in POOL_GAUGES]
    assert gauges == ["capacity", "allocated", "free", "retained", "exhausted", "releasing"]
    assert got == {(g, name): float(counts[name][i]) for i, g in enumerate(gauges) for name in pools}


def test_the_gauges_are_computed_when_scraped() -> None:
    """A pool gone is gone from the series; the pods waiting are read anew."""
    waiting = [2]
    pools = {"p1": pool("p1", "n1")}
    registry = scraped(lambda: waiting[0], lambda: pools, lambda p: (4, 1, 3, 0, 0, 0))
    assert value(registry, "ipscheduler_pods_waiting_for_address") == 2.0
    assert value(registry, "ipscheduler_pool_free", pool="p1", node="n1") == 3.0
    waiting[0] = 0
    pools.clear()
    assert value(registry, "ipscheduler_pods_waiting_for_address") == 0.0
    assert value(registry, "ipscheduler_pool_free", pool="p1", node="n1") is None


def test_the_scrape_time_gauges_are_registered_once_per_registry() -> None:
    registry = scraped(lambda: 0, dict, lambda p: (0, 0, 0, 0, 0, 0))
    with pytest.raises(ValueError, match="already registered"):
        UnderlayIPMetrics.on(registry).scrape_from(lambda: 0, dict, lambda p: (0, 0, 0, 0, 0, 0))
    UnderlayIPMetrics.on(CollectorRegistry()).scrape_from(lambda: 0, dict, lambda p: (0, 0, 0, 0, 0, 0))
