"""Tenancy in every path: a pod that holds an address without a scheduling cycle (created
already bound, with ``ipscheduler.io/pool`` and ``ipscheduler.io/ip``) is held to the rules
Filter applies. A tenant who can create pods cannot take another tenant's addresses by
writing the annotations themselves: the pod is not adopted (start-up reconcile, GC sweep,
the bound-pods watch), a Warning ``AdoptionRefused`` on the pod names the rule, ``ipscheduler
check`` reports it, and the address stays free for the pool's own tenants.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e.helpers import SCHEDULER, Pools, SchedulerProcess, events_for, ipscheduler_check, settle
from tests.kube import Kubectl, create_namespace, pod_manifest, wait_for

Factory = Callable[..., SchedulerProcess]


@pytest.fixture
def tenant_a(kubectl: Kubectl, pools: Pools, request: pytest.FixtureRequest) -> Iterator[str]:
    """A second namespace, the pool owner's (deleted before the test's pools go away)."""
    name = create_namespace(kubectl, "tenant-a")
    yield name
    kubectl.run("delete", "namespace", name, "--wait=true", "--timeout=90s", check=False)


def _created_bound(name: str, node: str, pool: str, ip: str, **annotations: str) -> dict[str, Any]:
    pod = pod_manifest(name, scheduler=SCHEDULER, nodeName=node, terminationGracePeriodSeconds=0)
    pod["metadata"]["annotations"] = {"ipscheduler.io/pool": pool, "ipscheduler.io/ip": ip, **annotations}
    return pod


def _allocations(pools: Pools, name: str) -> dict[str, Any]:
    return dict(pools.get(name).get("status", {}).get("allocations") or {})


def test_a_pod_created_bound_into_another_tenants_pool_is_refused_and_the_address_stays_free(
    scheduler_factory: Factory, kubectl: Kubectl, pools: Pools, ns: str, tenant_a: str
) -> None:
    """Tenant B (namespace ``ns``) creates pods already bound into tenant A's pool, one per
    rule (the pool's spec.namespaces; a pool its own ipscheduler.io/pools does not name);
    neither is adopted, by the bound-pods watch, the GC sweeps that follow, or the start-up
    reconcile of a restarted scheduler; each gets AdoptionRefused naming its rule, check names
    both, and tenant A's pods get the addresses."""
    pools.create("tenancy-a", "node-1", ["10.84.1.1-10.84.1.2"], namespaces=[tenant_a])
    pools.create("tenancy-b", "node-1", ["10.84.2.1-10.84.2.2"], namespaces=[ns])
    first = scheduler_factory("--gc-interval", "2")
    kubectl.create(_created_bound("squatter", "node-1", "tenancy-a", "10.84.1.1"), ns)
    kubectl.create(
        _created_bound("wrong-pool", "node-1", "tenancy-b", "10.84.2.1", **{"ipscheduler.io/pools": "other"}),
        ns,
    )
    rules = {
        "squatter": f"NodeIPPool tenancy-a is reserved for namespaces {tenant_a} (spec.namespaces), not {ns}",
        "wrong-pool": "annotation ipscheduler.io/pools=other does not name NodeIPPool tenancy-b",
    }
    for name, rule in rules.items():
        ev = wait_for(
            f"AdoptionRefused on {name}", lambda n=name: events_for(kubectl, ns, n, "AdoptionRefused")
        )
        assert ev[0]["type"] == "Warning"
        assert rule in ev[0]["message"], ev[0]["message"]
    settle(5)  # two GC sweeps more
    assert _allocations(pools, "tenancy-a") == {} and _allocations(pools, "tenancy-b") == {}
    check = ipscheduler_check(kubectl.kubeconfig)
    assert check.returncode == 1
    for name, rule in rules.items():
        assert f"{ns}/{name} (" in check.stdout and rule in check.stdout, check.stdout

    # A restart: the start-up reconcile (no sweep before the test ends) refuses them too.
    first.stop()
    again = scheduler_factory("--gc-interval", "600")
    wait_for("the refusal logged again", lambda: again.logged("does not record the pod's address"))
    assert _allocations(pools, "tenancy-a") == {} and _allocations(pools, "tenancy-b") == {}

    # The pool's own tenant is scheduled as usual and gets the lowest address: it stayed free.
    owner = pod_manifest("owner", scheduler=SCHEDULER, terminationGracePeriodSeconds=0)
    kubectl.create(owner, tenant_a)
    bound = wait_for(
        "owner bound",
        lambda: (p := kubectl.json("get", "pod", "owner", "-n", tenant_a))["spec"].get("nodeName") and p,
    )
    assert bound["metadata"]["annotations"]["ipscheduler.io/ip"] == "10.84.1.1"
    kubectl("delete", "pod", "squatter", "wrong-pool", "-n", ns, "--wait=true")
