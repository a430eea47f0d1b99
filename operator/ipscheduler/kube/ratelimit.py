"""``--kube-api-qps`` / ``--kube-api-burst``: client-side rate limiting of API requests.

client-go limits every request of a client with a token bucket (``flowcontrol.
NewTokenBucketRateLimiter(qps, burst)``): ``burst`` requests may go at once, then
``qps`` per second. Here aiolimiter's leaky bucket does the same for a
kubernetes-asyncio ``ApiClient``: every request (a watch's start included, as in
client-go) first takes a slot. kopf's own pending-pod watch has its own session and
is not limited (one long request).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from aiolimiter import AsyncLimiter
from kubernetes_asyncio import client


def limiter(qps: float, burst: int) -> AsyncLimiter | None:
    """A bucket of ``burst`` slots refilled at ``qps`` per second; None when ``qps`` is 0
    (no limit). Raises ValueError for a negative ``qps`` or ``burst``, or a ``burst`` below 1
    with a limit."""
    if qps < 0 or burst < 0:
        raise ValueError(f"qps and burst must not be negative (got {qps}, {burst})")
    if qps == 0:
        return None
    if burst < 1:
        raise ValueError(f"burst must be at least 1 with qps {qps}")
    return AsyncLimiter(burst, burst / qps)


def limit_requests(api_client: client.ApiClient, qps: float, burst: int) -> AsyncLimiter | None:
    """Make every request of ``api_client`` wait for a slot of :func:`limiter`; returns the
    limiter (None: unlimited, ``api_client`` untouched). Raises as :func:`limiter`."""
    bucket = limiter(qps, burst)
    if bucket is None:
        return None
    rest = api_client.rest_client
    request: Callable[..., Awaitable[Any]] = rest.request

    @functools.wraps(request)
    async def limited(*args: Any, **kwargs: Any) -> Any:
        async with bucket:
            return await request(*args, **kwargs)

    rest.request = limited  # type: ignore[method-assign]  # per client, as client-go
    return bucket
