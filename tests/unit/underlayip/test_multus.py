"""The Multus hand-off: our address in the pod's k8s.v1.cni.cncf.io/networks element."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ipscheduler.underlayip.multus import (
    MultusError,
    parse_network_name,
    parse_selection,
    with_element_ips,
    with_ips,
)

ADDR = ["10.0.1.12/24"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("underlay", [{"name": "underlay"}]),
        (" underlay , other ", [{"name": "underlay"}, {"name": "other"}]),
        ("net-ns/underlay@net1", [{"name": "underlay", "namespace": "net-ns", "interface": "net1"}]),
        (
            "underlay@net1,net-ns/other",
            [{"name": "underlay", "interface": "net1"}, {"name": "other", "namespace": "net-ns"}],
        ),
        ("", []),
        (
            '[{"name":"underlay","mac":"c2:b0:57:49:47:f1"}]',
            [{"name": "underlay", "mac": "c2:b0:57:49:47:f1"}],
        ),
    ],
    ids=[
        "short",
        "short-list-with-spaces",
        "short-namespace-interface",
        "short-mixed",
        "empty",
        "json-keeps-fields",
    ],
)
def test_parse_selection(value: str, expected: list[dict[str, Any]]) -> None:
    assert parse_selection(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("a/b/c", "expected [namespace/]name[@interface]"),
        ("a@b@c", "expected [namespace/]name[@interface]"),
        ("ns/@eth1", "expected [namespace/]name[@interface]"),
        ('[{"name": "a"', "is not valid JSON"),
        ('{"name": "a"}', "must be a JSON list of objects"),
        ('["a"]', "must be a JSON list of objects"),
        ('[{"namespace": "x"}]', "[0] has no name"),
    ],
    ids=["two-slashes", "two-ats", "no-name", "broken-json", "json-object", "json-strings", "json-no-name"],
)
def test_parse_selection_refuses(value: str, message: str) -> None:
    with pytest.raises(MultusError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_selection(value)


@pytest.mark.parametrize(
    ("value", "network", "expected"),
    [
        ("underlay", "underlay", [{"name": "underlay", "ips": ADDR}]),
        (
            "other@net2, underlay@net1",
            "underlay",
            [{"name": "other", "interface": "net2"}, {"name": "underlay", "interface": "net1", "ips": ADDR}],
        ),
        ("underlay", "app/underlay", [{"name": "underlay", "ips": ADDR}]),  # the pod's namespace
        ("infra/underlay", "infra/underlay", [{"name": "underlay", "namespace": "infra", "ips": ADDR}]),
        (
            '[{"name":"underlay","ips":["192.0.2.9/24"],"mac":"c2:b0:57:49:47:f1"}]',
            "underlay",
            [{"name": "underlay", "ips": ADDR, "mac": "c2:b0:57:49:47:f1"}],
        ),
        (
            "underlay@net1,underlay@net2",
            "underlay",
            [
                {"name": "underlay", "interface": "net1", "ips": ADDR},
                {"name": "underlay", "interface": "net2"},
            ],
        ),
    ],
    ids=[
        "short-form-converted",
        "other-elements-kept",
        "namespace-defaults-to-the-pods",
        "explicit-namespace",
        "json-ips-replaced-fields-kept",
        "first-match-only",
    ],
)
def test_with_ips(value: str, network: str, expected: list[dict[str, Any]]) -> None:
    out = with_ips(value, network, "app", ADDR)
    assert out is not None
    assert json.loads(out) == expected


@pytest.mark.parametrize(
    ("value", "network"),
    [
        (None, "underlay"),
        ("other", "underlay"),
        ("infra/underlay", "app/underlay"),
        ("underlay", "infra/underlay"),
    ],
    ids=["no-annotation", "other-network", "other-namespace", "pod-namespace-is-not-the-wanted"],
)
def test_with_ips_leaves_pods_that_do_not_select_the_network(value: str | None, network: str) -> None:
    assert with_ips(value, network, "app", ADDR) is None


@pytest.mark.parametrize(
    ("network", "expected"),
    [("underlay", (None, "underlay")), ("infra/underlay", ("infra", "underlay"))],
    ids=["name", "namespace-name"],
)
def test_parse_network_name(network: str, expected: tuple[str | None, str]) -> None:
    assert parse_network_name(network) == expected


@pytest.mark.parametrize(
    "network",
    ["", "a/b/c", "Under_lay", "ns/", "-x"],
    ids=["empty", "two-slashes", "not-dns", "no-name", "leading-dash"],
)
def test_parse_network_name_refuses(network: str) -> None:
    with pytest.raises(MultusError):
        parse_network_name(network)


# --------------------------------------------------------------------------- a further interface's element

RDMA = ["10.1.0.1/24", "fd00:1::1/64"]


@pytest.mark.parametrize(
    ("value", "position", "expected"),
    [
        pytest.param(
            '[{"name": "rdma", "ipscheduler.io/pools": "rdma-a"}]',
            0,
            '[{"name":"rdma","ipscheduler.io/pools":"rdma-a","ips":["10.1.0.1/24","fd00:1::1/64"]}]',
            id="json-element-fields-kept-compact",
        ),
        pytest.param(
            "underlay@net1, infra/rdma",
            1,
            '[{"name":"underlay","interface":"net1"},{"name":"rdma","namespace":"infra",'
            '"ips":["10.1.0.1/24","fd00:1::1/64"]}]',
            id="short-form-converted-by-position",
        ),
        pytest.param(
            '[{"name": "a", "ips": ["192.0.2.9/24"]}, {"name": "a", "ips": ["192.0.2.8/24"]}]',
            1,
            '[{"name":"a","ips":["192.0.2.9/24"]},{"name":"a","ips":["10.1.0.1/24","fd00:1::1/64"]}]',
            id="the-element-at-the-position-not-the-first-of-its-name",
        ),
        pytest.param('[{"name": "a"}]', 1, None, id="no-such-position"),
        pytest.param('[{"name": "a"}]', -1, None, id="no-element"),
        pytest.param(None, 0, None, id="no-annotation"),
    ],
)
def test_with_element_ips(value: str | None, position: int, expected: str | None) -> None:
    assert with_element_ips(value, position, RDMA) == expected


def test_with_element_ips_refuses_what_multus_cannot_parse() -> None:
    with pytest.raises(MultusError, match="expected"):
        with_element_ips("a/b/c", 0, RDMA)
