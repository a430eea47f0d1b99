"""kube/client.KubeApi: raw (non-preloaded) answers are status-checked like preloaded ones, and its
HTTP session makes no per-request environment lookups (netrc, *_PROXY); a kubeconfig context is
loaded by name, and its namespace is the one kubectl would use."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.kube import client as client_module
from ipscheduler.kube.client import KubeApi, context_namespace, load_client_config
from tests.builders import kubeconfig_file


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


# --------------------------------------------------------------------------- request timeouts


@contextlib.asynccontextmanager
async def _silent_server() -> AsyncIterator[str]:
    """An HTTP server on 127.0.0.1 that accepts connections and never answers; its URL."""
    held: list[asyncio.StreamWriter] = []

    async def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        for writer in held:
            writer.close()
        server.close()


async def test_a_request_the_server_never_answers_times_out_instead_of_holding_its_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        client_module, "REQUEST_TIMEOUT", aiohttp.ClientTimeout(sock_connect=1, sock_read=0.2)
    )
    async with _silent_server() as url:
        conf = client.Configuration()
        conf.host = url
        api = KubeApi(client.ApiClient(conf))
        try:
            with pytest.raises(aiohttp.ServerTimeoutError):  # not wait_for's own TimeoutError
                await asyncio.wait_for(api.send_json("POST", "/api/v1/namespaces/a/events", {}), 5)
        finally:
            await api.close()


async def test_a_request_with_its_own_timeout_keeps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A watch gives its own (inactivity) timeout; the default does not replace it."""
    monkeypatch.setattr(client_module, "REQUEST_TIMEOUT", aiohttp.ClientTimeout(sock_read=60))
    async with _silent_server() as url:
        conf = client.Configuration()
        conf.host = url
        api = KubeApi(KubeApi(client.ApiClient(conf)).client)  # wrapped twice: still one default
        try:
            with pytest.raises(aiohttp.ServerTimeoutError):  # not wait_for's own TimeoutError
                await asyncio.wait_for(
                    api.client.rest_client.request("GET", f"{url}/api/v1/pods", _request_timeout=(1, 0.2)), 5
                )
        finally:
            await api.close()


# --------------------------------------------------------------------------- kubeconfig contexts


@pytest.mark.parametrize(
    ("context", "host"),
    [(None, "https://127.0.0.1:6443"), ("second", "https://127.0.0.1:6444")],
    ids=["current", "named"],
)
async def test_load_client_config_takes_the_named_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, context: str | None, host: str
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")  # a kubeconfig wins over in-cluster
    path = kubeconfig_file(tmp_path, {"first": "team-a", "second": None})
    cfg = await load_client_config(str(path), context)
    assert cfg.host == host


async def test_an_unknown_context_is_a_config_exception(tmp_path: Path) -> None:
    path = kubeconfig_file(tmp_path, {"first": "team-a"})
    with pytest.raises(config.ConfigException, match="context 'nope' not found in "):
        await load_client_config(str(path), "nope")


@pytest.mark.parametrize(
    ("context", "current", "namespace"),
    [
        (None, "first", "team-a"),
        (None, "second", "default"),
        ("first", "second", "team-a"),
        ("third", "first", "team-c"),
    ],
    ids=["current-has-one", "current-has-none", "named-over-current", "named"],
)
def test_context_namespace_is_the_contexts_else_default(
    tmp_path: Path, context: str | None, current: str, namespace: str
) -> None:
    path = kubeconfig_file(tmp_path, {"first": "team-a", "second": None, "third": "team-c"}, current)
    assert context_namespace(str(path), context) == namespace


def test_context_namespace_reads_kubeconfig_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_file(tmp_path, {"only": "from-env"})))
    assert context_namespace(None) == "from-env"
    with pytest.raises(config.ConfigException, match="'nope' not found"):
        context_namespace(None, "nope")


def test_context_namespace_without_a_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    assert context_namespace(None) == "default"
    with pytest.raises(config.ConfigException, match="no kubeconfig file"):
        context_namespace(None, "some")
    sa = tmp_path / "namespace"
    sa.write_text("kube-system\n")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setattr(client_module, "SERVICE_ACCOUNT_NAMESPACE", str(sa))
    assert context_namespace(None) == "kube-system"  # in-cluster: the pod's own namespace
