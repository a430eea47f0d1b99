"""kube/client.KubeApi: raw (non-preloaded) answers are status-checked like preloaded ones, and its
HTTP session makes no per-request environment lookups (netrc, *_PROXY)."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.kube.client import KubeApi


class FakeResponse:
    def __init__(self, status: int, body: bytes, reason: str = "") -> None:
        self.status, self.body, self.reason, self.released = status, body, reason, False

    async def read(self) -> bytes:
        return self.body

    def release(self) -> None:
        self.released = True


async def _call(resp: FakeResponse) -> FakeResponse:
    return resp


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (200, b'{"items": []}', {"items": []}),
        (201, b'{"kind": "Status"}', {"kind": "Status"}),
        (200, b"", {}),
    ],
    ids=["ok", "created", "empty"],
)
async def test_success_returns_json_and_releases(status: int, body: bytes, expected: object) -> None:
    resp = FakeResponse(status, body)
    assert await KubeApi.read_json(_call(resp)) == expected
    assert resp.released


@pytest.mark.parametrize(
    "status", [404, 409, 500, 503], ids=["not-found", "conflict", "internal", "unavailable"]
)
async def test_error_status_raises_api_exception(status: int) -> None:
    resp = FakeResponse(status, b'{"kind":"Status","reason":"AlreadyExists"}', reason="nope")
    with pytest.raises(ApiException) as err:
        await KubeApi.read_json(_call(resp))
    assert err.value.status == status
    assert "AlreadyExists" in err.value.body
    assert resp.released


async def test_session_does_not_trust_the_environment_but_keeps_a_kubeconfig_proxy() -> None:
    conf = client.Configuration()
    conf.proxy = "http://127.0.0.1:3128"
    api = KubeApi(client.ApiClient(conf))
    try:
        assert api.client.rest_client.pool_manager.trust_env is False
        assert api.client.rest_client.proxy == "http://127.0.0.1:3128"
    finally:
        await api.close()
