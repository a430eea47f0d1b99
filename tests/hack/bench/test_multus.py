"""hack/bench/multus.py, the parts that need no real node: the NADs, pools and pods of the
running-interfaces phases, the check of a Running pod, the result row and the skip without
root."""

from __future__ import annotations

import asyncio
import ipaddress
import json
from typing import Any, cast

import pytest

import binaries
import realnode
from bench import multus
from ipscheduler.underlayip.models import ANNOTATION_INTERFACES, ANNOTATION_IP, POOLS

IPAM = {"type": "ipscheduler-ipam", "kubeconfig": "/x/ipam.kubeconfig", "ledgerDir": "/x/ledger"}


def test_each_interface_has_a_subnet_and_a_bridge_of_its_own_on_the_node() -> None:
    subnets = [multus.interface_subnet(3, k) for k in range(1, 17)]
    assert subnets[0] == ipaddress.IPv4Network("10.111.3.0/24")
    assert subnets[-1] == ipaddress.IPv4Network("10.126.3.0/24")
    assert len(set(subnets)) == 16
    assert not any(s.overlaps(ipaddress.IPv4Network("10.88.0.0/15")) for s in subnets)  # nodes', e2e's
    assert multus.bridge_name("ipsbr3", 16) == "ipsbr3n16"
    assert len(multus.bridge_name("ipsbr255", 16)) <= 15  # IFNAMSIZ
    assert [multus.pool_name("rif16", k) for k in (0, 1, 16)] == ["rif16-eth0", "rif16-net1", "rif16-net16"]


def test_a_nad_is_a_bridge_with_the_nodes_ipscheduler_ipam() -> None:
    body = multus.nad_body(7, "ipsbr3n7", IPAM)
    assert (body["apiVersion"], body["kind"], body["metadata"]) == (
        "k8s.cni.cncf.io/v1",
        "NetworkAttachmentDefinition",
        {"name": "net7"},
    )
    config = json.loads(body["spec"]["config"])
    assert config["name"] == "net7"
    assert config["plugins"] == [
        {"type": "bridge", "bridge": "ipsbr3n7", "isGateway": True, "ipMasq": False, "ipam": IPAM}
    ]


def test_the_pools_hold_exactly_the_pods_eth0_on_the_nodes_subnet_each_interface_on_its_own() -> None:
    bodies = multus.pool_bodies("rif16", "real-node-multus", 3, "10.88.3.0/24", "10.88.3.1", 16, 16)
    assert [b["metadata"]["name"] for b in bodies] == ["rif16-eth0"] + [f"rif16-net{k}" for k in range(1, 17)]
    assert all(b["metadata"]["labels"] == {multus.PHASE_LABEL: "rif16"} for b in bodies)
    assert all(b["kind"] == POOLS.kind and b["spec"]["nodeName"] == "real-node-multus" for b in bodies)
    assert bodies[0]["spec"]["addresses"] == ["10.88.3.10-10.88.3.25"]
    assert bodies[0]["spec"]["subnets"] == [
        {"cidr": "10.88.3.0/24", "gateway": "10.88.3.1", "routes": [{"dst": "0.0.0.0/0"}]}
    ]
    assert bodies[16]["spec"]["addresses"] == ["10.126.3.10-10.126.3.25"]
    assert bodies[16]["spec"]["subnets"] == [{"cidr": "10.126.3.0/24", "gateway": "10.126.3.1"}]  # no route


def test_a_pod_names_its_first_pool_and_one_multus_element_per_further_interface() -> None:
    pod = multus.multus_pod("p0", "rif16", 16, "real-node-multus")
    annotations = pod["metadata"]["annotations"]
    assert annotations[multus.POOLS_ANNOTATION] == "rif16-eth0"
    elements = json.loads(annotations[multus.NETWORKS])
    assert elements[0] == {"name": "net1", "interface": "net1", "ipscheduler.io/pools": "rif16-net1"}
    assert [e["interface"] for e in elements] == [f"net{k}" for k in range(1, 17)]
    spec = pod["spec"]
    assert spec["schedulerName"] == "ip-scheduler"
    assert spec["nodeSelector"] == {realnode.LABEL: "true", "kubernetes.io/hostname": "real-node-multus"}
    assert spec["containers"][0]["image"] == binaries.BUSYBOX_IMAGE


SUBNETS = {"net1": ipaddress.IPv4Network("10.111.3.0/24"), "net2": ipaddress.IPv4Network("10.112.3.0/24")}


def running_pod(name: str = "p0", **annotations: str) -> dict[str, Any]:
    entries = {
        "net1": {"pool": "rif2-net1", "ips": ["10.111.3.10"], "network": {}},
        "net2": {"pool": "rif2-net2", "ips": ["10.112.3.10"], "network": {}},
    }
    status = [
        {"name": "ipscheduler", "interface": "eth0", "ips": ["10.88.3.10"], "default": True},
        {"name": "ns/net1", "interface": "net1", "ips": ["10.111.3.10"]},
        {"name": "ns/net2", "interface": "net2", "ips": ["10.112.3.10"]},
    ]
    base = {
        ANNOTATION_IP: "10.88.3.10",
        ANNOTATION_INTERFACES: json.dumps(entries),
        multus.NETWORK_STATUS: json.dumps(status),
    }
    return {
        "metadata": {"name": name, "uid": "u", "annotations": {**base, **annotations}},
        "status": {"phase": "Running", "podIP": "10.88.3.10"},
    }


def test_a_running_pod_with_every_interface_from_its_pool_and_in_network_status_is_right() -> None:
    pod = running_pod()
    assert multus.pod_problems(pod, 2, SUBNETS) == []
    assert multus.addresses(pod) == ["10.88.3.10", "10.111.3.10", "10.112.3.10"]


def test_a_running_pod_missing_an_interface_or_with_another_address_is_wrong() -> None:
    entries = {"net1": {"pool": "rif2-net1", "ips": ["10.112.3.10"], "network": {}}}
    status = [
        {"interface": "eth0", "ips": ["10.88.3.10"], "default": True},
        {"interface": "net1", "ips": ["10.112.3.11"]},
    ]
    pod = running_pod(
        **{
            ANNOTATION_IP: "10.88.3.11",
            ANNOTATION_INTERFACES: json.dumps(entries),
            multus.NETWORK_STATUS: json.dumps(status),
        }
    )
    assert multus.pod_problems(pod, 2, SUBNETS) == [
        "podIP 10.88.3.10 is not ipscheduler.io/ip 10.88.3.11",
        "ipscheduler.io/interfaces has ['net1']",
        "network-status has ['eth0', 'net1']",
        "net1 has ['10.112.3.10'], not one address of 10.111.3.0/24",
    ]
    bad_status = running_pod(**{multus.NETWORK_STATUS: "not json"})
    assert multus.pod_problems(bad_status, 2, SUBNETS)[0].startswith("unreadable annotations:")


def test_the_row_counts_running_pods_their_addresses_and_is_correct_only_when_all_ran_and_went(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    phase = multus.InterfacesPhase("ip-scheduler + Multus", 2, SUBNETS)
    clock = iter([1.0, 3.0, 5.0])
    monkeypatch.setattr(multus.time, "monotonic", lambda: next(clock, 9.0))
    phase.created = {"p0": 0.0, "p1": 0.0}
    phase.on_pod("ADDED", {"metadata": {"name": "p1"}, "status": {"phase": "Pending"}})
    phase.on_pod("MODIFIED", running_pod("p0"))  # Running at 3.0
    phase.on_pod("DELETED", running_pod("p0"))  # gone at 5.0
    assert phase.running == {"p0": 3.0} and phase.gone == {"p0": 5.0}
    requests = {"PUT nodeippools/status": 1.5, "GET pods": 4.0, "GET network-attachment-definitions": 2.0}
    row = multus.interfaces_row(phase, 2, 0.0, 0.9, requests, True, 4.0)
    assert row["phase"] == "ip-scheduler + Multus"
    assert (row["interfaces"], row["pods"], row["running"], row["addresses"]) == (3, 2, 1, 3)
    assert row["create_to_running_s"] == {"p50": 3.0, "p99": 3.0}
    assert (row["all_running_s"], row["running_pods_per_s"], row["running_interfaces_per_s"]) == (
        3.0,
        0.33,
        1.0,
    )
    assert (row["node_cpu_ms_per_pod"], row["pool_writes_per_pod"], row["api_requests_per_pod"]) == (
        900.0,
        1.5,
        7.5,
    )
    assert (row["gone"], row["all_gone_s"]) == (1, 1.0)
    assert row["not_running"] == {"p1": "Pending"} and row["problems"] == {}
    assert row["correct"] is False
    phase.on_pod("DELETED", running_pod("p1"))  # never ran
    phase.running["p1"], phase.addresses["p1"], phase.problems["p1"] = 3.0, ["10.88.3.11", "a", "b"], []
    phase.gone["p1"] = 5.0
    assert multus.interfaces_row(phase, 2, 0.0, 0.9, requests, True, 4.0)["correct"] is True
    assert multus.interfaces_row(phase, 2, 0.0, 0.9, requests, False, 4.0)["correct"] is False
    phase.addresses["p1"] = multus.addresses(running_pod())  # the same addresses twice
    assert multus.interfaces_row(phase, 2, 0.0, 0.9, requests, True, 4.0)["addresses_unique"] is False


def test_without_root_the_running_interfaces_phases_are_skipped_saying_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(realnode, "prerequisites", lambda: ["root"])
    keys = list(multus.MULTUS_PHASES)
    rows, reason = asyncio.run(
        multus.multus_phases(cast(Any, None), cast(Any, None), keys, 4, cast(Any, None))
    )
    assert rows == []
    assert reason == "running-interfaces-1,running-interfaces-16: skipped, a real node needs root"
    assert reason in capsys.readouterr().err
