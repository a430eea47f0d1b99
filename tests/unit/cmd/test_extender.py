"""cmd/extender: the verbs as kube-scheduler POSTs them (Go field names), over HTTP."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import test_utils

from ipscheduler.backend.metrics import Metrics
from ipscheduler.cmd.extender import make_app, serve
from tests.unit.fakes import ExtenderEnv as Env


async def post(env: Env, path: str, body: Any, metrics: Metrics | None = None) -> tuple[int, Any]:
    server = test_utils.TestServer(make_app(env.verbs, metrics), host="127.0.0.1")
    async with test_utils.TestClient(server) as client:
        resp = (
            await client.post(path, json=body)
            if not isinstance(body, bytes)
            else await client.post(path, data=body)
        )
        return resp.status, await resp.json()


async def test_filter_prioritize_and_bind_over_http() -> None:
    env = Env()
    pod = env.pod()
    status, filtered = await post(env, "/filter", {"Pod": pod, "NodeNames": ["node-1", "node-2", "node-3"]})
    assert status == 200
    assert filtered["NodeNames"] == ["node-1"] and set(filtered["FailedNodes"]) == {"node-3"}
    assert set(filtered["FailedAndUnresolvableNodes"]) == {"node-2"}
    status, scores = await post(env, "/prioritize", {"Pod": pod, "NodeNames": ["node-1"]})
    assert (status, scores) == (200, [{"Host": "node-1", "Score": 10}])
    metrics = Metrics()
    status, bound = await post(
        env, "/bind", {"PodName": "web", "PodNamespace": "ns", "PodUID": "u-web", "Node": "node-1"}, metrics
    )
    assert (status, bound) == (200, {"Error": ""})
    assert env.api.pods[("ns", "web")]["metadata"]["annotations"]["ipscheduler.io/ip"] == "10.0.1.1"
    text = metrics.exposition().decode()
    assert 'ipscheduler_extender_request_duration_seconds_count{result="ok",verb="bind"} 1.0' in text


async def test_preempt_over_http() -> None:
    env = Env()
    body = {
        "Pod": env.pod(),
        "NodeNameToMetaVictims": {"node-3": {"Pods": [{"UID": "holder"}], "NumPDBViolations": 0}},
    }
    status, kept = await post(env, "/preempt", body)
    assert (status, kept) == (
        200,
        {"NodeNameToMetaVictims": {"node-3": {"Pods": [{"UID": "holder"}], "NumPDBViolations": 0}}},
    )


@pytest.mark.parametrize(
    ("path", "body", "fragment"),
    [
        ("/filter", b"{not json", "the body is not JSON"),
        ("/bind", {"PodName": "web"}, "invalid bind request"),
        ("/prioritize", {"NodeNames": ["node-1"]}, "invalid prioritize request"),
    ],
    ids=["not-json", "bind-missing-fields", "no-pod"],
)
async def test_a_bad_request_is_400_with_the_reason_in_error(path: str, body: Any, fragment: str) -> None:
    status, answer = await post(Env(), path, body)
    assert status == 400 and fragment in answer["Error"]


async def test_bind_failure_is_200_with_error_so_kube_scheduler_retries() -> None:
    env = Env()
    env.pod()
    status, answer = await post(
        env, "/bind", {"PodName": "web", "PodNamespace": "ns", "PodUID": "u-web", "Node": "node-3"}
    )
    assert status == 200 and "does not fit node-3" in answer["Error"]


async def test_serve_refuses_a_malformed_address() -> None:
    with pytest.raises(ValueError, match="expected host:port"):
        await serve(Env().verbs, "nowhere")
