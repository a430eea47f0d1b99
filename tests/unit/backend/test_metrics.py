"""ipscheduler.backend.metrics: kube-scheduler's names, scrape-time gauges, the aiohttp handler."""

from __future__ import annotations

import gzip
import re

import pytest
from aiohttp import test_utils

from ipscheduler.backend.health import HealthState, make_app
from ipscheduler.backend.metrics import Metrics
from ipscheduler.underlayip.metrics import UnderlayIPMetrics
from tests import builders


def families(text: str) -> set[str]:
    return set(re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE))


def scraped(counts: tuple[int, int, int, int, int, int] = (4, 1, 3, 0, 0, 0)) -> Metrics:
    """The scheduler's metrics with the underlayip wing's on the same registry, as wired."""
    m = Metrics("ip-scheduler")
    pool = builders.pool("p1", "n1", addresses=["10.0.0.1-10.0.0.4"])
    m.scrape_from(
        lambda: {"active": 2, "backoff": 1, "unschedulable": 3, "gated": 1, "in_flight": 5},
        lambda: {"UnderlayIP": 2, "NodeResourcesFit": 1},
    )
    UnderlayIPMetrics.on(m.registry).scrape_from(lambda: 2, lambda: {"p1": pool}, lambda p: counts)
    return m


def test_exposition_has_kube_scheduler_names_and_pool_gauges() -> None:
    m = scraped()
    m.observe_attempt("scheduled", 0.004)
    m.observe_attempt("unschedulable", 0.002)
    m.observe_bound(0.5, attempts=2)
    UnderlayIPMetrics.on(m.registry).cas_conflicts.inc()
    text = m.exposition().decode()
    assert 'scheduler_schedule_attempts_total{profile="ip-scheduler",result="scheduled"} 1.0' in text
    assert 'scheduler_schedule_attempts_total{profile="ip-scheduler",result="unschedulable"} 1.0' in text
    assert (
        'scheduler_scheduling_attempt_duration_seconds_count{profile="ip-scheduler",result="scheduled"} 1.0'
        in text
    )
    assert 'scheduler_pod_scheduling_sli_duration_seconds_count{attempts="2"} 1.0' in text
    assert 'ipscheduler_pool_free{node="n1",pool="p1"} 3.0' in text
    assert 'ipscheduler_pool_capacity{node="n1",pool="p1"} 4.0' in text
    assert "ipscheduler_cas_conflicts_total 1.0" in text


def test_pending_pods_are_upstreams_four_queues() -> None:
    text = scraped().exposition().decode()
    pending = dict(re.findall(r'^scheduler_pending_pods\{queue="(\w+)"\} (\S+)$', text, re.MULTILINE))
    assert pending == {"active": "2.0", "backoff": "1.0", "unschedulable": "3.0", "gated": "1.0"}


def test_unschedulable_pods_by_plugin_and_pods_waiting_for_an_address() -> None:
    text = scraped().exposition().decode()
    assert 'scheduler_unschedulable_pods{plugin="UnderlayIP",profile="ip-scheduler"} 2.0' in text
    assert 'scheduler_unschedulable_pods{plugin="NodeResourcesFit",profile="ip-scheduler"} 1.0' in text
    assert "ipscheduler_pods_waiting_for_address 2.0" in text


@pytest.mark.parametrize(("exhausted", "value"), [(1, "1.0"), (0, "0.0")], ids=["exhausted", "not"])
def test_pool_exhausted_gauge(exhausted: int, value: str) -> None:
    text = scraped((4, 4, 0, 0, exhausted, 1)).exposition().decode()
    assert f'ipscheduler_pool_exhausted{{node="n1",pool="p1"}} {value}' in text
    assert 'ipscheduler_pool_releasing{node="n1",pool="p1"} 1.0' in text


def test_framework_timings_incoming_pods_and_leader() -> None:
    m = scraped()
    m.observe_extension_point("Filter", "Success", 0.0003)
    m.observe_plugin("UnderlayIP", "Reserve", "Success", 0.00002)
    m.observe_incoming("active", "PodAdd")
    m.observe_incoming("active", "PodAdd")
    m.set_leader("ip-scheduler", False)
    text = m.exposition().decode()
    assert (
        'scheduler_framework_extension_point_duration_seconds_count{extension_point="Filter",'
        'profile="ip-scheduler",status="Success"} 1.0' in text
    )
    assert (
        'scheduler_plugin_execution_duration_seconds_count{extension_point="Reserve",plugin="UnderlayIP",'
        'status="Success"} 1.0' in text
    )
    assert 'scheduler_queue_incoming_pods_total{event="PodAdd",queue="active"} 2.0' in text
    assert 'leader_election_master_status{name="ip-scheduler"} 0.0' in text
    m.set_leader("ip-scheduler", True)
    assert 'leader_election_master_status{name="ip-scheduler"} 1.0' in m.exposition().decode()


def test_process_and_gc_collectors_and_no_created_series() -> None:
    m = scraped()
    m.bind_failures.inc()
    names = families(m.exposition().decode())
    assert {
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "python_gc_collections_total",
    } <= names
    assert "python_info" in names
    assert not [n for n in names if n.endswith("_created")]
    assert "_created" not in m.exposition().decode()


def test_scrape_time_gauges_are_registered_once() -> None:
    m = scraped()
    with pytest.raises(ValueError, match="already registered"):
        m.scrape_from(dict, dict)
    with pytest.raises(ValueError, match="already registered"):
        UnderlayIPMetrics.on(m.registry).scrape_from(lambda: 0, dict, lambda p: (0, 0, 0, 0, 0, 0))


def test_each_scheduler_has_its_own_registry() -> None:
    a, b = Metrics(), Metrics()
    a.observe_attempt("error", 0.1)
    assert 'result="error"' in a.exposition().decode()
    assert 'result="error"' not in b.exposition().decode()


async def test_the_handler_speaks_text_openmetrics_and_gzip() -> None:
    m = scraped()
    state = HealthState(metrics=m)
    async with test_utils.TestClient(test_utils.TestServer(make_app(state), host="127.0.0.1")) as client:
        plain = await client.get("/metrics", headers={"Accept-Encoding": "identity"})
        assert plain.status == 200 and plain.headers["Content-Type"].startswith("text/plain")
        assert "scheduler_pending_pods" in await plain.text()
        om = await client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        assert om.headers["Content-Type"].startswith("application/openmetrics-text")
        assert (await om.text()).rstrip().endswith("# EOF")
        zipped = await client.get("/metrics", headers={"Accept-Encoding": "gzip"}, auto_decompress=False)
        assert zipped.headers.get("Content-Encoding") == "gzip"
        assert b"scheduler_pending_pods" in gzip.decompress(await zipped.read())


async def test_metrics_are_503_until_a_registry_is_attached() -> None:
    state = HealthState()
    async with test_utils.TestClient(test_utils.TestServer(make_app(state), host="127.0.0.1")) as client:
        assert (await client.get("/metrics")).status == 503
        state.metrics = scraped()
        assert (await client.get("/metrics")).status == 200


def test_preemption_series_are_upstreams() -> None:
    m = scraped()
    m.observe_preemption_attempt()
    m.observe_preemption_attempt()
    m.observe_preemption_victims(3)
    text = m.exposition().decode()
    assert "scheduler_preemption_attempts_total 2.0" in text
    assert 'scheduler_preemption_victims_bucket{le="2.0"} 0.0' in text
    assert 'scheduler_preemption_victims_bucket{le="4.0"} 1.0' in text
    assert 'scheduler_preemption_victims_bucket{le="64.0"} 1.0' in text
