"""scheduler/scheduler: the binding cycle's failure handler. A pod whose Binding is refused
because it no longer exists is forgotten and unreserved, never requeued (issue 22); the
scheduler runs with the default profile over a real pool cache and writer, only the API
server is in memory."""

from __future__ import annotations

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.kube.client import Conflict
from tests.builders import pending_pod_body as pod_body
from tests.unit.fakes import SchedulerEnv

# --------------------------------------------------------------------------- Binding refused


@pytest.mark.parametrize(
    ("change", "requeued", "gone"),
    [
        pytest.param("delete", False, 1, id="deleted-binding-404"),
        pytest.param("recreate", False, 1, id="same-name-other-uid-binding-409"),
        pytest.param("server-error", True, 0, id="still-there-refused-for-another-reason"),
        pytest.param("bound-elsewhere", False, 0, id="bound-meanwhile-by-someone-else"),
    ],
)
async def test_a_binding_refused_for_a_pod_that_no_longer_exists_is_not_retried(
    change: str, requeued: bool, gone: int
) -> None:
    """kube-scheduler's failure handler looks the pod up before putting it back
    (``handleSchedulingFailure``): a pod that is gone is forgotten and unreserved, never
    requeued; one refused for another reason goes to backoffQ."""
    env = SchedulerEnv()
    env.create("u1", "web-0")
    if change == "delete":
        env.api.delete_pod("web-0")
    elif change == "recreate":
        env.api.put_pod(pod_body("u2", "web-0"))
    elif change == "server-error":
        env.api.bind_error = ApiException(status=500, reason="Internal Server Error")
    else:
        other = pod_body("u1", "web-0", node="node-9")
        other["metadata"]["annotations"] = {"ipscheduler.io/pool": "pool-of-node-9"}
        env.api.put_pod(other)
        env.api.bind_error = Conflict("ns/web-0: Conflict")
    await env.schedule_next()
    assert env.api.bindings == ["web-0"]
    assert env.allocations() == {}, "the reservation was released (Unreserve)"
    assert ("u1" in env.sched.queue) is requeued
    assert env.sched.queue.depths()["in_flight"] == 0
    assert env.gone_count("binding") == gone
    assert env.sched.cache.pod("u1") is None, "the assumed pod was forgotten"
    if requeued:
        assert env.sched.queue.depths()["backoff"] == 1


async def test_a_binding_cut_by_a_connection_reset_is_retried_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = SchedulerEnv()
    env.create("u1")
    env.api.bind_error = ConnectionResetError("Connection reset by peer")
    await env.schedule_next()
    assert "u1" in env.sched.queue
    assert not [r for r in caplog.records if r.exc_info], "an expected transient error has no traceback"
    assert any("binding ns/pod-u1 to node-1 failed" in r.getMessage() for r in caplog.records)
