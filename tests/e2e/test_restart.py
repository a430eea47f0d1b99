"""State lives in NodeIPPool status: a SIGKILLed scheduler loses nothing on restart."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.builders import bound_pods
from tests.e2e.helpers import Pools, SchedulerProcess, assert_check_clean, deployment, pods_of
from tests.kube import Kubectl, wait_for


def test_sigkill_delete_and_create_while_down_then_restart(
    scheduler_factory: Callable[..., SchedulerProcess], kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    for i in (1, 2, 3):
        pools.create(f"r-node-{i}", f"node-{i}", [f"10.1.{i}.0/29"])  # 6 usable each → 18
    sched = scheduler_factory()
    kubectl.apply(deployment("app", 15), ns)
    wait_for("15 bound", lambda: len(bound_pods(pods_of(kubectl, ns))) == 15, timeout=90)

    sched.kill()  # SIGKILL: no clean-up of any kind
    before = bound_pods(pods_of(kubectl, ns))
    victims = [p["metadata"]["name"] for p in before[:2]]
    kubectl("delete", "pod", "-n", ns, *victims, "--wait=true", "--timeout=60s")
    kubectl("scale", "deployment", "app", "-n", ns, "--replicas=20")
    # While it is down, the deleted pods' addresses are still recorded: allocations outlive pods.
    held = sum(len(pools.get(f"r-node-{i}")["status"].get("allocations") or {}) for i in (1, 2, 3))
    assert held == 15

    scheduler_factory()  # restart: reconcile releases the 2 leaks, then schedules the 7 pending pods

    seen: list[int] = []

    def settled() -> list[dict[str, Any]] | None:
        bound = bound_pods(pods_of(kubectl, ns))
        seen.append(len(bound))
        return bound if len(bound) == 18 else None

    try:
        bound = wait_for("18 bound (all addresses in use)", settled, timeout=90)
    except AssertionError as e:
        held = {i: len(pools.get(f"r-node-{i}")["status"].get("allocations") or {}) for i in (1, 2, 3)}
        msg = f"{e}; bound counts seen: {sorted(set(seen))}, allocations per pool: {held}"
        raise AssertionError(msg) from None
    ips = [p["metadata"]["annotations"]["ipscheduler.io/ip"] for p in bound]
    assert len(set(ips)) == 18, "an address is held twice"
    assert_check_clean(kubectl)
    allocs = {uid for i in (1, 2, 3) for uid in (pools.get(f"r-node-{i}")["status"].get("allocations") or {})}
    assert allocs == {p["metadata"]["uid"] for p in bound}
    pending = [p for p in pods_of(kubectl, ns) if not p["spec"].get("nodeName")]
    assert len(pending) == 2
