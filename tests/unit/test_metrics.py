"""ipscheduler.metrics: the exposition, kube-scheduler-style names, scrape-time gauges."""

from __future__ import annotations

from ipscheduler.metrics import Metrics
from tests import builders


def test_exposition_has_kube_scheduler_names_and_pool_gauges() -> None:
    m = Metrics("ip-scheduler")
    pool = builders.pool("p1", "n1", addresses=["10.0.0.1-10.0.0.4"])
    m.scrape_from(lambda: {"active": 2, "backoff": 1}, lambda: {"p1": pool}, lambda p: (4, 1, 3, 0))
    m.observe_attempt("scheduled", 0.004)
    m.observe_attempt("unschedulable", 0.002)
    m.observe_bound(0.5, attempts=2)
    m.cas_conflicts.inc()
    text = m.exposition().decode()
    assert 'scheduler_schedule_attempts_total{profile="ip-scheduler",result="scheduled"} 1.0' in text
    assert 'scheduler_schedule_attempts_total{profile="ip-scheduler",result="unschedulable"} 1.0' in text
    assert (
        'scheduler_scheduling_attempt_duration_seconds_count{profile="ip-scheduler",result="scheduled"} 1.0'
        in text
    )
    assert 'scheduler_pod_scheduling_sli_duration_seconds_count{attempts="2"} 1.0' in text
    assert 'scheduler_pending_pods{queue="active"} 2.0' in text
    assert 'ipscheduler_pool_free{node="n1",pool="p1"} 3.0' in text
    assert 'ipscheduler_pool_capacity{node="n1",pool="p1"} 4.0' in text
    assert "ipscheduler_cas_conflicts_total 1.0" in text


def test_each_scheduler_has_its_own_registry() -> None:
    a, b = Metrics(), Metrics()
    a.observe_attempt("error", 0.1)
    assert 'result="error"' in a.exposition().decode()
    assert 'result="error"' not in b.exposition().decode()
