"""--kube-api-qps/--kube-api-burst: a bucket in front of every request of a client."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from kubernetes_asyncio import client

from ipscheduler.kube.ratelimit import limit_requests, limiter


def test_zero_qps_is_no_limit() -> None:
    assert limiter(0, 0) is None


@pytest.mark.parametrize(
    ("qps", "burst"), [(-1, 2), (5, -1), (5, 0)], ids=["neg-qps", "neg-burst", "no-burst"]
)
def test_bad_limits_are_refused(qps: float, burst: int) -> None:
    with pytest.raises(ValueError):
        limiter(qps, burst)


async def test_a_burst_goes_at_once_then_qps_per_second() -> None:
    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:1"))
    starts: list[float] = []

    async def fake_request(*args: Any, **kwargs: Any) -> str:
        starts.append(time.monotonic())
        return "ok"

    api.rest_client.request = fake_request  # type: ignore[method-assign]
    try:
        bucket = limit_requests(api, qps=20, burst=5)
        assert bucket is not None
        t0 = time.monotonic()
        calls = [asyncio.ensure_future(api.rest_client.request("GET", "/x")) for _ in range(9)]
        for _ in range(5):
            await asyncio.sleep(0)
        assert len(starts) == 5  # the burst, without waiting
        assert await asyncio.gather(*calls) == ["ok"] * 9
        assert starts[-1] - t0 >= 4 / 20 * 0.8  # the other 4 at 20/s: not before ~0.2 s
    finally:
        await api.close()


async def test_unlimited_leaves_the_client_untouched() -> None:
    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:1"))
    try:
        before = api.rest_client.request
        assert limit_requests(api, 0, 0) is None
        assert api.rest_client.request == before
    finally:
        await api.close()
