"""Network facts on NodeIPPools: ``spec.subnets`` and the ``ipscheduler.io/network`` annotation.

Malformed subnets are refused at ``kubectl apply`` by the CRD's CEL rules; an
address outside every subnet (which CEL cannot say for ranges) makes the pool
``Ready=False``. A bound pod carries its address with the subnet's prefix,
gateway and routes, as a CNI IPAM result; a gateway is never handed out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import SCHEDULER, Pools, SchedulerProcess, assert_check_clean
from tests.kube import Kubectl, pod_manifest, wait_for


def _pool(name: str, node: str, addresses: list[str], subnets: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "ipscheduler.io/v1alpha1",
        "kind": "NodeIPPool",
        "metadata": {"name": name},
        "spec": {"nodeName": node, "addresses": addresses, "subnets": subnets},
    }


@pytest.mark.parametrize(
    ("subnet", "message"),
    [
        ({"cidr": "10.86.0.0/33"}, "cidr must be a CIDR such as 10.0.1.0/24"),
        ({"cidr": "10.86.0.0/24", "gateway": "10.86.0.300"}, "gateway must be an IP address"),
        ({"cidr": "10.86.0.0/24", "gateway": "10.86.1.1"}, "gateway must lie inside cidr"),
        ({"cidr": "10.86.0.0/24", "routes": [{"dst": "0.0.0.0"}]}, "spec.subnets[0].routes[0].dst"),
        (
            {"cidr": "10.86.0.0/24", "routes": [{"dst": "0.0.0.0/0", "gw": "1.2.3"}]},
            "gw must be an IP address",
        ),
    ],
    ids=["bad-cidr", "bad-gateway", "gateway-outside", "route-dst-not-cidr", "route-gw-not-ip"],
)
def test_malformed_subnets_are_refused_at_apply(
    kubectl: Kubectl, crd: None, subnet: dict[str, Any], message: str
) -> None:
    body = _pool("bad-subnet", "node-1", ["10.86.0.5"], [subnet])
    res = kubectl.run("apply", "-f", "-", stdin=json.dumps(body), check=False)
    assert res.returncode != 0 and message in res.stderr, res.stderr
    assert kubectl.run("get", "nodeippool", "bad-subnet", check=False).returncode != 0


def test_an_address_outside_every_subnet_makes_the_pool_not_ready(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools
) -> None:
    pools.create("outside", "node-2", ["10.86.1.250-10.86.2.5"], subnets=[{"cidr": "10.86.1.0/24"}])
    cond = wait_for(
        "Ready=False",
        lambda: next(
            (c for c in pools.get("outside").get("status", {}).get("conditions", []) if c["type"] == "Ready"),
            None,
        ),
    )
    assert (cond["status"], cond["reason"]) == ("False", "InvalidSpec")
    assert "10.86.1.250-10.86.2.5 is not inside any of spec.subnets" in cond["message"]


def test_bound_pods_carry_their_subnets_prefix_gateway_and_routes(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    pools.create(
        "net-v4",
        "node-3",
        ["10.86.3.1-10.86.3.3"],  # 10.86.3.1 is the gateway: never handed out
        subnets=[{"cidr": "10.86.3.0/24", "gateway": "10.86.3.1", "routes": [{"dst": "0.0.0.0/0"}]}],
    )
    pools.create(
        "net-v6",
        "node-3",
        ["fd86:3::10"],
        subnets=[{"cidr": "fd86:3::/64", "routes": [{"dst": "::/0", "gw": "fd86:3::1"}]}],
    )
    for i in range(3):
        kubectl.create(
            pod_manifest(
                f"net-{i}",
                scheduler=SCHEDULER,
                nodeSelector={"kubernetes.io/hostname": "node-3"},
                terminationGracePeriodSeconds=0,
            ),
            ns,
        )

    def annotations() -> list[dict[str, str]] | None:
        pods = kubectl.json("get", "pods", "-n", ns)["items"]
        if not all(p["spec"].get("nodeName") for p in pods) or len(pods) != 3:
            return None
        return [p["metadata"]["annotations"] for p in pods]

    got = {
        a["ipscheduler.io/ip"]: json.loads(a["ipscheduler.io/network"])
        for a in wait_for("bound", annotations)
    }
    assert got == {
        "10.86.3.2": {
            "ips": [{"address": "10.86.3.2/24", "gateway": "10.86.3.1"}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.86.3.1"}],
        },
        "10.86.3.3": {
            "ips": [{"address": "10.86.3.3/24", "gateway": "10.86.3.1"}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.86.3.1"}],
        },
        "fd86:3::10": {"ips": [{"address": "fd86:3::10/64"}], "routes": [{"dst": "::/0", "gw": "fd86:3::1"}]},
    }
    assert_check_clean(kubectl)
    kubectl("delete", "pods", "--all", "-n", ns, "--wait=true")


def test_the_example_pools_are_accepted_by_the_api_server(kubectl: Kubectl, crd: None) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples" / "nodeippools.yaml"
    out = kubectl("apply", "--dry-run=server", "-f", str(examples))
    assert out.count("(server dry run)") == 3, out
