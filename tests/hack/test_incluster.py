"""Pure parts of hack/incluster.py: what an in-cluster dev cluster gives kube-proxy, the real
nodes' CNI configuration and a Helm user. The cluster itself runs in tests/e2e/test_install.py."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
import yaml

import incluster
import realnode

ROOT = Path(__file__).resolve().parents[2]


def _layout(index: int) -> realnode.Layout:
    return realnode.Layout(
        name=f"real-node-{index}",
        index=index,
        root=realnode.node_root(index),
        bindir=Path("/nonexistent"),
        cni_bin=(),
        pki=Path("/nonexistent"),
        ports={},
    )


@pytest.mark.parametrize("index", [1, 7, 254], ids=["first", "seventh", "last"])
def test_the_api_address_is_outside_every_node_subnet_and_inside_the_cluster_cidr(index: int) -> None:
    address = ipaddress.ip_address(incluster.api_address(index))
    assert address in ipaddress.ip_network(incluster.CLUSTER_CIDR)
    for node in (1, 2, 254):
        assert address not in ipaddress.ip_network(_layout(node).subnet)
    assert incluster.api_link(index) == f"ipsapi{index}"


@pytest.mark.parametrize("index", [1, 3], ids=["node-1", "node-3"])
def test_the_delegate_range_is_the_nodes_own_subnet_above_the_pools(index: int) -> None:
    layout = _layout(index)
    delegate = incluster.delegate(layout)
    assert delegate["type"] == "host-local"
    (only,) = delegate["ranges"][0]
    subnet = ipaddress.ip_network(layout.subnet)
    start, end = ipaddress.ip_address(only["rangeStart"]), ipaddress.ip_address(only["rangeEnd"])
    assert only["subnet"] == layout.subnet and start in subnet and end in subnet and start < end
    assert only["gateway"] == layout.node_ip
    assert int(start) - int(subnet.network_address) == incluster.DELEGATE_RANGE[0]
    assert Path(delegate["dataDir"]).is_relative_to(layout.root)


def test_the_conflist_carries_the_delegate_only_when_given() -> None:
    layout = _layout(2)
    plain = realnode.conflist(layout, Path("/k"))
    with_delegate = realnode.conflist(layout, Path("/k"), incluster.delegate(layout))
    assert "delegate" not in plain["plugins"][0]["ipam"]
    assert with_delegate["plugins"][0]["ipam"]["delegate"] == incluster.delegate(layout)
    assert with_delegate["plugins"][0]["ipam"]["kubeconfig"] == "/k"


def test_kube_proxy_leaves_the_machines_conntrack_alone_and_serves_on_loopback() -> None:
    cfg = incluster.kube_proxy_config(Path("/kc"), "real-node-1", 1111, 2222)
    assert cfg["mode"] == "nftables" and cfg["hostnameOverride"] == "real-node-1"
    assert cfg["healthzBindAddress"] == "127.0.0.1:1111" and cfg["metricsBindAddress"] == "127.0.0.1:2222"
    assert cfg["conntrack"]["maxPerCore"] == 0 and cfg["clusterCIDR"] == incluster.CLUSTER_CIDR


def test_the_helm_values_name_only_values_the_chart_has(tmp_path: Path) -> None:
    """`helm install -f <(devcluster.py values)` must not set keys the chart ignores."""
    chart = yaml.safe_load((ROOT / "deploy/chart/ipscheduler/values.yaml").read_text())
    values = incluster.helm_values(tmp_path)

    assert set(values) <= set(chart)
    assert set(values["cni"]) <= set(chart["cni"])  # nodeSelector and tolerations are free-form
    bin_dir, net_dir = incluster.node_cni(tmp_path)
    assert values["cni"] == {"enabled": True, "cniBinDir": str(bin_dir), "cniNetDir": str(net_dir)}
    assert values["tolerations"] == [realnode.TOLERATION]
