"""hack/bench/cluster.py: a phase's namespace goes with its pods deleted at once."""

from __future__ import annotations

from typing import Any, cast

import pytest

from bench import cluster
from ipscheduler.underlayip.models import POOLS, NodeIPPool


@pytest.mark.parametrize(
    "collection_fails", [False, True], ids=["pods-deleted-at-once", "collection-timed-out"]
)
async def test_a_phase_namespace_goes_with_its_pods_deleted_at_once(
    monkeypatch: pytest.MonkeyPatch, collection_fails: bool
) -> None:
    from kubernetes_asyncio import client

    calls: list[str] = []

    class Core:
        async def delete_collection_namespaced_pod(self, ns: str, grace_period_seconds: int) -> None:
            calls.append(f"delete pods in {ns} grace {grace_period_seconds}")
            if collection_fails:
                raise TimeoutError

        async def delete_namespace(self, ns: str) -> None:
            calls.append(f"delete namespace {ns}")

        async def read_namespace(self, ns: str) -> None:
            calls.append("read")
            if calls.count("read") == 2:
                raise client.exceptions.ApiException(status=404)

    async def no_sleep(_: float) -> None:
        return None

    monkeypatch.setattr(cluster.asyncio, "sleep", no_sleep)
    await cluster.delete_namespace(cast(Any, Core()), "bench-3")
    assert calls == ["delete pods in bench-3 grace 0", "delete namespace bench-3", "read", "read"]


@pytest.mark.parametrize(
    ("first", "last", "subnets"),
    [
        pytest.param(*cluster.node_range(0, 20), None, id="kwok-node"),
        pytest.param(
            "10.88.7.10",
            "10.88.7.59",
            [{"cidr": "10.88.7.0/24", "gateway": "10.88.7.1", "routes": [{"dst": "0.0.0.0/0"}]}],
            id="real-node-with-its-subnet",
        ),
    ],
)
def test_a_bench_pool_is_a_node_ip_pool_the_scheduler_reads(
    first: str, last: str, subnets: list[dict[str, Any]] | None
) -> None:
    body = cluster.pool_body("bench-node-1", "node-1", first, last, subnets)
    pool = NodeIPPool.model_validate(body)
    assert (pool.api_version, pool.kind, pool.metadata) == (
        POOLS.api_version,
        POOLS.kind,
        {"name": "bench-node-1"},
    )
    assert (pool.spec.node_name, pool.spec.addresses) == ("node-1", [f"{first}-{last}"])
    assert [(s.cidr, s.gateway) for s in pool.spec.subnets] == [
        (s["cidr"], s["gateway"]) for s in subnets or []
    ]
