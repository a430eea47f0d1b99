"""Prometheus metrics, served on ``/metrics`` next to the probes.

Names and labels follow kube-scheduler's where one exists
(``pkg/scheduler/metrics/metrics.go``):

- ``scheduler_schedule_attempts_total{result, profile}``: result is
  ``scheduled``, ``unschedulable`` or ``error``;
- ``scheduler_scheduling_attempt_duration_seconds{result, profile}``: one
  scheduling cycle (PreFilter → Permit);
- ``scheduler_pod_scheduling_sli_duration_seconds{attempts}``: from the pod's
  first entry into the queue to a successful bind;
- ``scheduler_pending_pods{queue}``: active, backoff, unschedulable, in_flight
  (read from the queue at scrape time).

Ours: ``ipscheduler_pool_capacity|allocated|free|retained{pool, node}`` (from the
cache at scrape time), ``ipscheduler_pods_rehomed_total`` (pods placed anew with a new
address after their retain-timeout), ``ipscheduler_cas_conflicts_total``,
``ipscheduler_bind_failures_total``, ``ipscheduler_gc_releases_total``,
``ipscheduler_pending_pods_gone_total{found_by}`` (queued pods found gone without a
watch event), ``ipscheduler_allocations_restored_total`` (running pods' allocations put
back after a status edit removed them),
``ipscheduler_task_restarts_total{task}`` (a long-running task failed and was
restarted) and ``ipscheduler_task_up{task}`` (1 while it runs, 0 once it ended).
Each process has its own registry (tests may run several schedulers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Generic, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector


class PoolLike(Protocol):
    """What the pool gauges label a pool with (a NodeIPPool view)."""

    @property
    def name(self) -> str: ...

    @property
    def node_name(self) -> str: ...


P = TypeVar("P", bound=PoolLike)

# kube-scheduler's buckets for attempt duration: ExponentialBuckets(0.001, 2, 15)
ATTEMPT_BUCKETS = tuple(0.001 * 2**i for i in range(15))
# ... and for the SLI: ExponentialBuckets(0.01, 2, 20)
SLI_BUCKETS = tuple(0.01 * 2**i for i in range(20))


class _Scraped(Collector, Generic[P]):
    """Gauges computed when scraped: queue depths and pool counts."""

    def __init__(
        self,
        depths: Callable[[], Mapping[str, int]],
        pools: Callable[[], Mapping[str, P]],
        status: Callable[[P], tuple[int, int, int, int]],
    ) -> None:
        self.depths = depths
        self.pools = pools
        self.status = status

    def collect(self) -> Iterator[GaugeMetricFamily]:
        pending = GaugeMetricFamily("scheduler_pending_pods", "Pending pods by queue.", labels=["queue"])
        for queue, n in self.depths().items():
            pending.add_metric([queue], n)
        yield pending
        families = {
            name: GaugeMetricFamily(f"ipscheduler_pool_{name}", doc, labels=["pool", "node"])
            for name, doc in (
                ("capacity", "Usable addresses (or slots) of a NodeIPPool."),
                ("allocated", "Allocations held in a NodeIPPool."),
                ("free", "Free addresses (or slots) of a NodeIPPool."),
                ("retained", "Allocations of a NodeIPPool kept for a pod identity whose pod ended."),
            )
        }
        for pool in self.pools().values():
            for fam, value in zip(families.values(), self.status(pool), strict=True):
                fam.add_metric([pool.name, pool.node_name], value)
        yield from families.values()


class Metrics:
    """The metric objects of one scheduler process."""

    def __init__(self, profile: str = "ip-scheduler") -> None:
        self.profile = profile
        self.registry = CollectorRegistry()
        self.attempts = Counter(
            "scheduler_schedule_attempts",
            "Scheduling attempts by result.",
            ["result", "profile"],
            registry=self.registry,
        )
        self.attempt_duration = Histogram(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling cycle latency in seconds.",
            ["result", "profile"],
            buckets=ATTEMPT_BUCKETS,
            registry=self.registry,
        )
        self.sli_duration = Histogram(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "Seconds from a pod's first entry into the queue to its successful bind.",
            ["attempts"],
            buckets=SLI_BUCKETS,
            registry=self.registry,
        )
        self.cas_conflicts = Counter(
            "ipscheduler_cas_conflicts",
            "NodeIPPool status writes refused with 409 Conflict.",
            registry=self.registry,
        )
        self.pool_writes = Counter(
            "ipscheduler_pool_status_writes",
            "NodeIPPool status writes that succeeded.",
            registry=self.registry,
        )
        self.pool_mutations = Counter(
            "ipscheduler_pool_status_mutations",
            "Mutations (reserve, release, mark Bound...) carried by those writes; "
            "mutations / writes is the coalescing factor.",
            registry=self.registry,
        )
        self.bind_failures = Counter(
            "ipscheduler_bind_failures",
            "Binding cycles that failed and were unreserved.",
            registry=self.registry,
        )
        self.pods_gone = Counter(
            "ipscheduler_pending_pods_gone",
            "Pending pods dropped from the scheduling queue because they no longer exist (or "
            "were replaced by a pod of another UID) although no watch event said so, by what "
            "found it: a refused Binding (binding), a re-LIST of the pending-pod watch (relist) "
            "or the garbage-collection sweep (gc).",
            ["found_by"],
            registry=self.registry,
        )
        self.allocations_restored = Counter(
            "ipscheduler_allocations_restored",
            "Allocations of running pods put back after a NodeIPPool status edit removed them.",
            registry=self.registry,
        )
        self.pods_rehomed = Counter(
            "ipscheduler_pods_rehomed",
            "Pods placed anew with a new address after their retained address's node could not "
            "take them for their retain-timeout.",
            registry=self.registry,
        )
        self.gc_releases = Counter(
            "ipscheduler_gc_releases",
            "Allocations released by reconcile or garbage collection.",
            registry=self.registry,
        )

        self.task_restarts = Counter(
            "ipscheduler_task_restarts",
            "Long-running tasks (informers, pool status, GC...) restarted after a failure.",
            ["task"],
            registry=self.registry,
        )
        self.task_up = Gauge(
            "ipscheduler_task_up",
            "1 while a required long-running task runs, 0 once it ended (/healthz fails then).",
            ["task"],
            registry=self.registry,
        )

    def observe_attempt(self, result: str, seconds: float) -> None:
        """One scheduling cycle ended with ``result`` (scheduled | unschedulable | error)."""
        self.attempts.labels(result, self.profile).inc()
        self.attempt_duration.labels(result, self.profile).observe(seconds)

    def observe_bound(self, seconds: float, attempts: int) -> None:
        """A pod was bound ``seconds`` after it first entered the queue."""
        bucket = str(attempts) if attempts < 15 else "15+"
        self.sli_duration.labels(bucket).observe(seconds)

    def scrape_from(
        self,
        depths: Callable[[], Mapping[str, int]],
        pools: Callable[[], Mapping[str, P]],
        status: Callable[[P], tuple[int, int, int, int]],
    ) -> None:
        """Register the scrape-time gauges (call once)."""
        self.registry.register(_Scraped(depths, pools, status))

    def exposition(self) -> bytes:
        """The text exposition format of all metrics."""
        return generate_latest(self.registry)
