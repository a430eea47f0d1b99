"""KubeApi's HTTP session: no per-request environment lookups (netrc, *_PROXY)."""

from __future__ import annotations

from kubernetes_asyncio import client

from ipscheduler.kube.client import KubeApi


async def test_session_does_not_trust_the_environment_but_keeps_a_kubeconfig_proxy() -> None:
    conf = client.Configuration()
    conf.proxy = "http://127.0.0.1:3128"
    api = KubeApi(client.ApiClient(conf))
    try:
        assert api.client.rest_client.pool_manager.trust_env is False
        assert api.client.rest_client.proxy == "http://127.0.0.1:3128"
    finally:
        await api.close()
