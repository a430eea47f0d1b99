"""Prometheus metrics, served on ``/metrics`` by every replica (leader or standby).

Names, labels and buckets follow kube-scheduler's where one exists
(``pkg/scheduler/metrics/metrics.go``; client-go ``tools/leaderelection/metrics.go``):

- ``scheduler_schedule_attempts_total{result, profile}``: result is ``scheduled``,
  ``unschedulable`` or ``error``;
- ``scheduler_scheduling_attempt_duration_seconds{result, profile}``: one scheduling
  cycle (PreFilter → Permit);
- ``scheduler_pod_scheduling_sli_duration_seconds{attempts}``: from the pod's first entry
  into the queue to a successful bind;
- ``scheduler_framework_extension_point_duration_seconds{extension_point, status,
  profile}``: every extension point of every cycle;
- ``scheduler_plugin_execution_duration_seconds{plugin, extension_point, status}``: each
  plugin, in a 10 % sample of the cycles (upstream ``pluginMetricsSamplePercent``);
  Filter and Score plugins once per cycle, summed over the nodes;
- ``scheduler_queue_incoming_pods_total{queue, event}``: pods entering activeQ, backoffQ
  or the unschedulable pods, by the event that sent them;
- ``scheduler_pending_pods{queue}``: active, backoff, unschedulable, gated;
- ``scheduler_permit_wait_duration_seconds{result}``: how long pods were held at Permit
  (Coscheduling: until their PodGroup is placed), by outcome (``Success``,
  ``Unschedulable``);
- ``scheduler_unschedulable_pods{plugin, profile}``: unschedulable pods by the plugins
  that rejected them (a pod counts once per plugin);
- ``leader_election_master_status{name}``: 1 on the replica holding the Lease ``name``
  (or running without election), 0 on a standby;
- the process, platform and Python GC collectors of prometheus_client
  (``process_resident_memory_bytes``, ``python_gc_collections_total``...).

Ours: ``ipscheduler_bind_failures_total``,
``ipscheduler_extender_request_duration_seconds{verb, result}`` (extender mode),
``ipscheduler_pending_pods_gone_total{found_by}`` (queued pods found gone without a watch
event), ``ipscheduler_task_restarts_total{task}`` (a long-running task failed and was
restarted), ``ipscheduler_task_up{task}`` (1 while it runs, 0 once it ended) and
``ipscheduler_network_traffic_query_failures_total`` (NetworkTraffic's Prometheus queries
that failed). The wings register their own on the same registry
(:mod:`ipscheduler.underlayip.metrics`).

No ``*_created`` series (``disable_created_metrics``). Each process has its own registry
(tests may run several schedulers); ``/metrics`` is prometheus_client's own aiohttp
handler (:meth:`Metrics.handler`: text or OpenMetrics as the scraper asks, gzip).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.aiohttp import make_aiohttp_handler
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

disable_created_metrics()  # type: ignore[no-untyped-call]


# kube-scheduler's buckets for attempt duration: ExponentialBuckets(0.001, 2, 15)
ATTEMPT_BUCKETS = tuple(0.001 * 2**i for i in range(15))
# ... for the SLI: ExponentialBuckets(0.01, 2, 20)
SLI_BUCKETS = tuple(0.01 * 2**i for i in range(20))
# ... for an extension point: ExponentialBuckets(0.0001, 2, 12)
EXTENSION_POINT_BUCKETS = tuple(0.0001 * 2**i for i in range(12))
# ... for a plugin: ExponentialBuckets(0.00001, 1.5, 20)
PLUGIN_BUCKETS = tuple(0.00001 * 1.5**i for i in range(20))
# ... preemption victims per preemptor: ExponentialBuckets(1, 2, 7) (">64 is pretty rare")
PREEMPTION_VICTIM_BUCKETS = tuple(float(2**i) for i in range(7))

PENDING_QUEUES = ("active", "backoff", "unschedulable", "gated")


@dataclass(frozen=True)
class _Scraped(Collector):
    """Gauges computed when scraped: the queue ``depths`` and the ``unschedulable`` pods by
    plugin, of ``profile``."""

    profile: str
    depths: Callable[[], Mapping[str, int]]
    unschedulable: Callable[[], Mapping[str, int]]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        pending = GaugeMetricFamily(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type: 'active' means number of pods in activeQ; "
            "'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in "
            "unschedulablePods; 'gated' means number of pods with scheduling gates.",
            labels=["queue"],
        )
        depths = self.depths()
        for queue in PENDING_QUEUES:
            pending.add_metric([queue], depths.get(queue, 0))
        yield pending
        unschedulable = GaugeMetricFamily(
            "scheduler_unschedulable_pods",
            "The number of unschedulable pods broken down by plugin name. A pod will increment the "
            "gauge for all plugins that caused it to not schedule.",
            labels=["plugin", "profile"],
        )
        for plugin, n in sorted(self.unschedulable().items()):
            unschedulable.add_metric([plugin, self.profile], n)
        yield unschedulable


class Metrics:
    """The metric objects of one scheduler process; also the framework's
    :class:`~ipscheduler.framework.interface.MetricsRecorder`."""

    def __init__(self, profile: str = "ip-scheduler") -> None:
        self.profile = profile
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self._scraped = False
        self.attempts = Counter(
            "scheduler_schedule_attempts",
            "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could "
            "not be scheduled, while 'error' means an internal scheduler problem.",
            ["result", "profile"],
            registry=self.registry,
        )
        self.attempt_duration = Histogram(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            ["result", "profile"],
            buckets=ATTEMPT_BUCKETS,
            registry=self.registry,
        )
        self.sli_duration = Histogram(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "E2e latency for a pod being scheduled, from the time the pod enters the scheduling "
            "queue and might involve multiple scheduling attempts.",
            ["attempts"],
            buckets=SLI_BUCKETS,
            registry=self.registry,
        )
        self.permit_wait_duration = Histogram(
            "scheduler_permit_wait_duration_seconds",
            "Duration of waiting on permit.",
            ["result"],
            buckets=tuple(0.001 * 2**i for i in range(15)),  # upstream: ExponentialBuckets(0.001, 2, 15)
            registry=self.registry,
        )
        self.extension_point_duration = Histogram(
            "scheduler_framework_extension_point_duration_seconds",
            "Latency for running all plugins of a specific extension point.",
            ["extension_point", "status", "profile"],
            buckets=EXTENSION_POINT_BUCKETS,
            registry=self.registry,
        )
        self.plugin_duration = Histogram(
            "scheduler_plugin_execution_duration_seconds",
            "Duration for running a plugin at a specific extension point (a sample of the cycles; "
            "Filter and Score: the plugin's time over all nodes of the cycle).",
            ["plugin", "extension_point", "status"],
            buckets=PLUGIN_BUCKETS,
            registry=self.registry,
        )
        self.incoming = Counter(
            "scheduler_queue_incoming_pods",
            "Number of pods added to scheduling queues by event and queue type.",
            ["queue", "event"],
            registry=self.registry,
        )
        self.leader = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
            "1 indicates master. 'name' is the string used to identify the lease.",
            ["name"],
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

        self.extender_requests = Histogram(
            "ipscheduler_extender_request_duration_seconds",
            "Extender requests from kube-scheduler (ipscheduler extender) by verb (filter, "
            "prioritize, bind, preempt) and result (ok, error: answered with Error, bad_request).",
            ["verb", "result"],
            buckets=EXTENSION_POINT_BUCKETS,
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
        self.preemption_attempts = Counter(
            "scheduler_preemption_attempts",
            "Total preemption attempts in the cluster till now",
            registry=self.registry,
        )
        self.preemption_victims = Histogram(
            "scheduler_preemption_victims",
            "Number of selected preemption victims",
            buckets=PREEMPTION_VICTIM_BUCKETS,
            registry=self.registry,
        )
        self.network_traffic_failures = Counter(
            "ipscheduler_network_traffic_query_failures",
            "NetworkTraffic's Prometheus queries that failed (unreachable, error answer, timeout); "
            "every node scores 0 in that plugin until one succeeds.",
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

    def observe_extension_point(self, point: str, status: str, seconds: float) -> None:
        """All plugins of extension point ``point`` ran in ``seconds``, ending in ``status``."""
        self.extension_point_duration.labels(point, status, self.profile).observe(seconds)

    def observe_plugin(self, plugin: str, point: str, status: str, seconds: float) -> None:
        """``plugin`` ran at ``point`` in ``seconds``, ending in ``status``."""
        self.plugin_duration.labels(plugin, point, status).observe(seconds)

    def observe_preemption_attempt(self) -> None:
        """DefaultPreemption's PostFilter ran once (``scheduler_preemption_attempts_total``)."""
        self.preemption_attempts.inc()

    def observe_preemption_victims(self, victims: int) -> None:
        """Preemption evicted ``victims`` pods for one preemptor (``scheduler_preemption_victims``)."""
        self.preemption_victims.observe(victims)

    def observe_incoming(self, queue: str, event: str) -> None:
        """A pod entered ``queue`` (active | backoff | unschedulable) because of ``event``."""
        self.incoming.labels(queue, event).inc()

    def observe_extender(self, verb: str, result: str, seconds: float) -> None:
        """An extender request ``verb`` was answered with ``result`` in ``seconds``."""
        self.extender_requests.labels(verb, result).observe(seconds)

    def set_leader(self, lease: str, leading: bool) -> None:
        """This replica holds the Lease ``lease`` (or runs without election) or stands by."""
        self.leader.labels(lease).set(1 if leading else 0)

    def scrape_from(
        self, depths: Callable[[], Mapping[str, int]], unschedulable: Callable[[], Mapping[str, int]]
    ) -> None:
        """Register the scrape-time gauges: queue ``depths`` (by queue name) and the pods
        ``unschedulable`` by plugin. Once per registry: a second call raises ValueError."""
        if self._scraped:
            raise ValueError("scrape-time gauges already registered")
        self._scraped = True
        self.registry.register(_Scraped(self.profile, depths, unschedulable))

    def exposition(self) -> bytes:
        """The text exposition format of all metrics."""
        return generate_latest(self.registry)

    @functools.cached_property
    def handler(self) -> Callable[[Any], Any]:
        """The ``/metrics`` aiohttp handler of this registry (prometheus_client's: content
        negotiation between the text format and OpenMetrics, gzip when accepted)."""
        return make_aiohttp_handler(self.registry)
