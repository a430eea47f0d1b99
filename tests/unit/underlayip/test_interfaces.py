"""underlayip/interfaces: a pod's further underlay interfaces as it asks for them (its Multus
network-selection elements naming ``ipscheduler.io/pools``, or naming a
NetworkAttachmentDefinition that does, its ``ipscheduler.io/interface-pools``), the problems
that leave it unschedulable, and what a bound pod's ``ipscheduler.io/interfaces`` says (the
pools it names, the addresses it carries)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from ipscheduler.framework.types import PodInfo
from ipscheduler.underlayip import interfaces
from ipscheduler.underlayip.interfaces import (
    NONE,
    NetworkPools,
    bound_pools,
    further_interfaces,
    interface_ips,
    network_pools,
)

NETWORKS = "k8s.v1.cni.cncf.io/networks"
LISTED = "ipscheduler.io/interface-pools"
BOUND = "ipscheduler.io/interfaces"
REQUIRE = {"ipscheduler.io/ip-family-policy": "RequireDualStack"}


def pod(namespace: str = "app", **annotations: str) -> PodInfo:
    return PodInfo(uid="uid-me", namespace=namespace, name="me", annotations=annotations)


def elements(*items: dict[str, Any]) -> dict[str, str]:
    """The pod's ``k8s.v1.cni.cncf.io/networks`` in the JSON form, these elements."""
    return {NETWORKS: json.dumps(list(items))}


def listed(value: dict[str, Any]) -> dict[str, str]:
    """The pod's ``ipscheduler.io/interface-pools``, this JSON object."""
    return {LISTED: json.dumps(value)}


def rdma(name: str, pools: str, **fields: Any) -> dict[str, Any]:
    """A Multus element for network ``name`` naming ``pools``."""
    return {"name": name, "ipscheduler.io/pools": pools, **fields}


Need = tuple[str, tuple[str, ...], str, tuple[str, ...], str, int]
"""(interface, pools, family policy, families, network, element position)"""


def summary(
    annotations: dict[str, str], namespace: str = "app", networks: Mapping[str, NetworkPools] | None = None
) -> list[Need]:
    got = further_interfaces(pod(namespace, **annotations), *(() if networks is None else (networks,)))
    assert got.problem == "", got.problem
    return [
        (n.interface, n.choice.names, n.family.policy, n.family.families, n.network, n.element)
        for n in got.interfaces
    ]


ANY = ("SingleStack", ())


@pytest.mark.parametrize(
    ("annotations", "want"),
    [
        pytest.param(
            elements(rdma("rdma-a", "rdma-a")),
            [("net1", ("rdma-a",), *ANY, "app/rdma-a", 0)],
            id="multus-element-first-is-net1",
        ),
        pytest.param(
            elements({"name": "plain"}, rdma("rdma-b", "b1, b2,b1")),
            [("net2", ("b1", "b2"), *ANY, "app/rdma-b", 1)],
            id="position-counts-elements-without-pools",
        ),
        pytest.param(
            elements(rdma("rdma-a", "a", interface="rdma0"), {"name": "x"}, rdma("stor", "s")),
            [("rdma0", ("a",), *ANY, "app/rdma-a", 0), ("net3", ("s",), *ANY, "app/stor", 2)],
            id="interface-given-or-by-position",
        ),
        pytest.param(
            elements(rdma("rdma-a", "a", interface="")),
            [("net1", ("a",), *ANY, "app/rdma-a", 0)],
            id="empty-interface-is-multus-own-name",
        ),
        pytest.param(
            elements(rdma("rdma-a", "a", namespace="infra")),
            [("net1", ("a",), *ANY, "infra/rdma-a", 0)],
            id="element-namespace",
        ),
        pytest.param(
            elements(rdma("rdma-a", "a", **REQUIRE)),
            [("net1", ("a",), "RequireDualStack", ("IPv4", "IPv6"), "app/rdma-a", 0)],
            id="element-family-policy",
        ),
        pytest.param(
            elements(rdma("rdma-a", "a", **{"ipscheduler.io/ip-families": "IPv6"})),
            [("net1", ("a",), "SingleStack", ("IPv6",), "app/rdma-a", 0)],
            id="element-family",
        ),
        pytest.param(
            {**elements(rdma("rdma-a", "a")), **REQUIRE},
            [("net1", ("a",), *ANY, "app/rdma-a", 0)],
            id="the-pods-families-are-its-first-interfaces",
        ),
        pytest.param(
            elements({"name": "plain"}, {"name": "other", "ipscheduler.io/pools": None}),
            [],
            id="elements-without-pools-ask-for-none",
        ),
        pytest.param(
            {NETWORKS: "ipscheduler.io/pools@net1"},  # network "pools" of namespace "ipscheduler.io"
            [],
            id="short-form-names-no-pools",
        ),
        pytest.param(
            listed({"net1": "rdma-a", "net2": "stor-a, stor-b"}),
            [("net1", ("rdma-a",), *ANY, "", -1), ("net2", ("stor-a", "stor-b"), *ANY, "", -1)],
            id="interface-pools-annotation",
        ),
        pytest.param(listed({}), [], id="interface-pools-empty"),
        pytest.param(
            {**listed({"net9": "x"}), **elements(rdma("rdma-a", "a"))},
            [("net1", ("a",), *ANY, "app/rdma-a", 0), ("net9", ("x",), *ANY, "", -1)],
            id="both-multus-first",
        ),
        pytest.param(
            {**listed({"net1": "x"}), NETWORKS: "not [json"},
            [("net1", ("x",), *ANY, "", -1)],
            id="a-malformed-multus-annotation-naming-no-pools-is-multus-business",
        ),
    ],
)
def test_further_interfaces(annotations: dict[str, str], want: list[Need]) -> None:
    assert summary(annotations) == want


@pytest.mark.parametrize(
    ("annotations", "problem"),
    [
        pytest.param(
            {NETWORKS: '[{"name": "a", "ipscheduler.io/pools": "a"'},
            "annotation k8s.v1.cni.cncf.io/networks: k8s.v1.cni.cncf.io/networks is not valid JSON: "
            "Expecting ',' delimiter: line 1 column 43 (char 42)",
            id="malformed-multus-json-naming-pools",
        ),
        pytest.param(
            {NETWORKS: "a/b/ipscheduler.io/pools"},
            "annotation k8s.v1.cni.cncf.io/networks: k8s.v1.cni.cncf.io/networks: "
            "'a/b/ipscheduler.io/pools': expected [namespace/]name[@interface]",
            id="malformed-short-form-naming-pools",
        ),
        pytest.param(
            elements({"name": "x"}, {"name": "rdma-a", "ipscheduler.io/pools": ["a"]}),
            "annotation k8s.v1.cni.cncf.io/networks[1] (rdma-a): ipscheduler.io/pools must be a string "
            "(a comma-separated list of pools)",
            id="element-pools-not-a-string",
        ),
        pytest.param(
            elements(rdma("rdma-a", "a,,b")),
            "annotation k8s.v1.cni.cncf.io/networks[0] (rdma-a) ipscheduler.io/pools='a,,b': '' is not a "
            "NodeIPPool name (a comma-separated list of pool names)",
            id="element-pool-list-malformed",
        ),
        pytest.param(
            elements(rdma("rdma-a", "a", interface="net/1")),
            "annotation k8s.v1.cni.cncf.io/networks[0] (rdma-a): interface 'net/1' is not an interface name",
            id="element-interface-not-a-name",
        ),
        pytest.param(
            elements(rdma("rdma-a", "a", interface="a-name-too-long")),
            "",
            id="fifteen-characters-is-a-name",
        ),
        pytest.param(
            elements(rdma("rdma-a", "a", interface="a-name-too-long1")),
            "annotation k8s.v1.cni.cncf.io/networks[0] (rdma-a): interface 'a-name-too-long1' is not an "
            "interface name",
            id="sixteen-characters-is-not",
        ),
        pytest.param(
            elements(rdma("rdma-a", "a", interface="..")),
            "annotation k8s.v1.cni.cncf.io/networks[0] (rdma-a): interface '..' is not an interface name",
            id="element-interface-dot-dot",
        ),
        pytest.param(
            elements(rdma("rdma-a", "a", **{"ipscheduler.io/ip-families": "IPv5"})),
            "annotation k8s.v1.cni.cncf.io/networks[0] (rdma-a): annotation ipscheduler.io/ip-families="
            "'IPv5': 'IPv5': supported values: IPv4, IPv6",
            id="element-families-malformed",
        ),
        pytest.param(
            elements(rdma("rdma-a", "a", **{"ipscheduler.io/ip-family-policy": "DualStack"})),
            "annotation k8s.v1.cni.cncf.io/networks[0] (rdma-a): annotation ipscheduler.io/ip-family-policy="
            "'DualStack': supported values: PreferDualStack, RequireDualStack, SingleStack",
            id="element-policy-malformed",
        ),
        pytest.param(
            elements(rdma("rdma-a", "a", interface="eth0")),
            "interface eth0 is the pod's first interface (its ipscheduler.io/pools), not a further one",
            id="multus-asks-for-eth0",
        ),
        pytest.param(
            listed({"eth0": "a"}),
            "interface eth0 is the pod's first interface (its ipscheduler.io/pools), not a further one",
            id="listed-asks-for-eth0",
        ),
        pytest.param(
            elements(rdma("a", "a", interface="net2"), rdma("b", "b")),
            "interface net2 is asked for twice",
            id="an-interface-twice-in-multus",
        ),
        pytest.param(
            {**elements(rdma("a", "a")), **listed({"net1": "b"})},
            "interface net1 is asked for twice",
            id="an-interface-in-multus-and-listed",
        ),
        pytest.param(
            {LISTED: "rdma-a"},
            "annotation ipscheduler.io/interface-pools: not JSON: Expecting value: line 1 column 1 (char 0)",
            id="listed-not-json",
        ),
        pytest.param(
            {LISTED: '["rdma-a"]'},
            "annotation ipscheduler.io/interface-pools: must be a JSON object, interface → pools: "
            '{"net1": "pool-a,pool-b"}',
            id="listed-not-an-object",
        ),
        pytest.param(
            listed({"net 1": "a"}),
            "annotation ipscheduler.io/interface-pools: 'net 1' is not an interface name",
            id="listed-interface-not-a-name",
        ),
        pytest.param(
            listed({"": "a"}),
            "annotation ipscheduler.io/interface-pools: '' is not an interface name",
            id="listed-interface-empty",
        ),
        pytest.param(
            listed({"net1": ["a"]}),
            "annotation ipscheduler.io/interface-pools: net1: the pools must be a string "
            "(a comma-separated list of pools)",
            id="listed-pools-not-a-string",
        ),
        pytest.param(
            listed({"net1": "A_b"}),
            "annotation ipscheduler.io/interface-pools (net1)='A_b': 'A_b' is not a NodeIPPool name "
            "(a comma-separated list of pool names)",
            id="listed-pool-list-malformed",
        ),
        pytest.param(
            listed({"net1": ""}),
            "annotation ipscheduler.io/interface-pools (net1)='': '' is not a NodeIPPool name "
            "(a comma-separated list of pool names)",
            id="listed-pool-list-empty",
        ),
    ],
)
def test_what_cannot_be_read_is_a_problem(annotations: dict[str, str], problem: str) -> None:
    got = further_interfaces(pod(**annotations))
    assert got.problem == problem
    if problem:
        assert got.interfaces == ()


@pytest.mark.parametrize(
    "annotations",
    [
        pytest.param({}, id="no-annotations"),
        pytest.param({"ipscheduler.io/pools": "a"}, id="first-interface-only"),
        pytest.param({NETWORKS: "rdma-a@net1"}, id="multus-without-pools"),
        pytest.param({NETWORKS: "not [json"}, id="malformed-multus-without-pools"),
        pytest.param(elements({"name": "rdma-a", "ips": ["10.0.0.1/24"]}), id="multus-json-without-pools"),
    ],
)
def test_a_pod_that_asks_for_no_further_interface_takes_the_fast_path(annotations: dict[str, str]) -> None:
    assert further_interfaces(pod(**annotations)) is NONE


def entries(value: Any) -> dict[str, str]:
    """A bound pod's ``ipscheduler.io/interfaces``, this value as JSON."""
    return {BOUND: json.dumps(value)}


@pytest.mark.parametrize(
    ("annotations", "pools", "ips"),
    [
        pytest.param({}, {""}, (), id="nothing"),
        pytest.param({"ipscheduler.io/pool": "gen"}, {"gen"}, (), id="first-pool-only"),
        pytest.param({"ipscheduler.io/pool": ""}, {""}, (), id="count-only-slot"),
        pytest.param(
            {
                "ipscheduler.io/pool": "gen",
                **entries(
                    {
                        "net1": {"pool": "rdma-a", "ips": ["10.1.0.1"]},
                        "net2": {"pool": "stor-a", "ips": ["FD00:0::7", "10.2.0.7"]},
                    }
                ),
            },
            {"gen", "rdma-a", "stor-a"},
            ("10.1.0.1", "fd00::7", "10.2.0.7"),
            id="every-entry",
        ),
        pytest.param(
            entries({"net1": {"pool": "rdma-a", "ips": ["10.1.0.1"]}}),
            {"", "rdma-a"},
            ("10.1.0.1",),
            id="further-only",
        ),
        pytest.param(
            entries(
                {
                    "net1": {"pool": "rdma-a", "ips": ["10.1.0.1", "junk", 7, "10.1.0.1"]},
                    "net2": "stor-a",
                    "net3": {"pool": 3, "ips": "10.3.0.1"},
                    "net4": {"ips": ["10.4.0.1"]},
                }
            ),
            {"", "rdma-a"},
            ("10.1.0.1", "10.4.0.1"),
            id="malformed-entries-left-out",
        ),
        pytest.param({BOUND: "[1, 2]"}, {""}, (), id="not-an-object"),
        pytest.param({BOUND: "{not json"}, {""}, (), id="not-json"),
        pytest.param({BOUND: ""}, {""}, (), id="blanked"),
    ],
)
def test_what_a_bound_pods_interfaces_annotation_says(
    annotations: dict[str, str], pools: set[str], ips: tuple[str, ...]
) -> None:
    assert bound_pools(annotations) == frozenset(pools)
    assert interface_ips(annotations) == ips


SECOND = '{"eth0": {"pool": "v6-a", "ips": ["fd00::c"], "network": {"ips": [{"address": "fd00::c/64"}]}}}'


@pytest.mark.parametrize(
    ("annotations", "second", "first", "adopted"),
    [
        pytest.param(
            {
                "ipscheduler.io/ip": "10.0.1.12",
                "ipscheduler.io/ips": "10.0.1.12,fd00::c",
                "ipscheduler.io/interfaces": SECOND,
            },
            ("v6-a", ("fd00::c",)),
            ("10.0.1.12",),
            [("eth0", "v6-a", ("fd00::c",), "")],
            id="the-second-family-of-two-pools",
        ),
        pytest.param(
            {
                "ipscheduler.io/ip": "10.0.1.12",
                "ipscheduler.io/ips": "10.0.1.12,fd00::d",
                "ipscheduler.io/interfaces": SECOND,
            },
            None,
            ("10.0.1.12", "fd00::d"),
            [
                (
                    "",
                    "",
                    (),
                    "annotation ipscheduler.io/interfaces entry 'eth0': not a further interface's name",
                )
            ],
            id="an-eth0-entry-whose-addresses-ips-does-not-list",
        ),
        pytest.param(
            {"ipscheduler.io/ip": "10.0.1.12", "ipscheduler.io/interfaces": SECOND},
            None,
            ("10.0.1.12",),
            [
                (
                    "",
                    "",
                    (),
                    "annotation ipscheduler.io/interfaces entry 'eth0': not a further interface's name",
                )
            ],
            id="single-stack-with-an-eth0-entry",
        ),
    ],
)
def test_the_first_interfaces_second_family_from_a_second_pool(
    annotations: dict[str, str],
    second: tuple[str, tuple[str, ...]] | None,
    first: tuple[str, ...],
    adopted: list[tuple[str, str, tuple[str, ...], str]],
) -> None:
    """An ``eth0`` entry of ``ipscheduler.io/interfaces`` whose addresses ``ipscheduler.io/ips``
    lists is the first interface's second family (the CNI plugin's rule): the first pool holds
    the rest, and adoption records the entry in its pool; any other ``eth0`` entry is refused."""
    assert interfaces.second_family(annotations) == second
    assert interfaces.first_pool_ips(annotations) == first
    assert [
        (b.interface, b.pool, b.ips, b.problem) for b in interfaces.bound_interfaces(annotations)
    ] == adopted


# --------------------------------------------------------------------------- NetworkAttachmentDefinitions

POOLS = "ipscheduler.io/pools"
POLICY = "ipscheduler.io/ip-family-policy"
FAMILIES = "ipscheduler.io/ip-families"


def nad_body(annotations: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "app", "name": "rdma", "annotations": annotations}}


@pytest.mark.parametrize(
    ("body", "want"),
    [
        pytest.param(nad_body({POOLS: "rdma-a"}), NetworkPools("rdma-a"), id="pools"),
        pytest.param(
            nad_body({POOLS: "a,b", FAMILIES: "IPv6", POLICY: "SingleStack", "other": "x"}),
            NetworkPools("a,b", ((POLICY, "SingleStack"), (FAMILIES, "IPv6"))),
            id="pools-and-families-in-key-order",
        ),
        pytest.param(
            nad_body({FAMILIES: "IPv6"}), NetworkPools(None, ((FAMILIES, "IPv6"),)), id="families-only"
        ),
        pytest.param(nad_body({POOLS: "a,,b"}), NetworkPools("a,,b"), id="malformed-kept-as-written"),
        pytest.param(nad_body({"k8s.v1.cni.cncf.io/resourceName": "x"}), None, id="not-ours"),
        pytest.param(nad_body({POOLS: 7, FAMILIES: None}), None, id="not-strings-ignored"),
        pytest.param(nad_body(None), None, id="no-annotations"),
        pytest.param(nad_body(["x"]), None, id="annotations-not-an-object"),
        pytest.param({"metadata": "x"}, None, id="metadata-not-an-object"),
        pytest.param({}, None, id="no-metadata"),
    ],
)
def test_a_network_attachment_definitions_annotations(
    body: dict[str, Any], want: NetworkPools | None
) -> None:
    assert network_pools(body) == want


V6 = ((FAMILIES, "IPv6"),)
NADS = {
    "app/rdma": NetworkPools("rdma-a, rdma-b"),
    "infra/stor": NetworkPools("stor-a", V6),
    "app/v6only": NetworkPools(None, V6),
    "app/bad-pools": NetworkPools("a,,b"),
    "app/bad-families": NetworkPools("a", ((FAMILIES, "IPv5"),)),
}


@pytest.mark.parametrize(
    ("annotations", "namespace", "want"),
    [
        pytest.param(
            elements({"name": "rdma"}),
            "app",
            [("net1", ("rdma-a", "rdma-b"), *ANY, "app/rdma", 0)],
            id="element-naming-only-the-nad",
        ),
        pytest.param(
            {NETWORKS: "plain,rdma@rdma0"},
            "app",
            [("rdma0", ("rdma-a", "rdma-b"), *ANY, "app/rdma", 1)],
            id="short-form-interface-and-position",
        ),
        pytest.param(
            {NETWORKS: "infra/stor"},
            "app",
            [("net1", ("stor-a",), "SingleStack", ("IPv6",), "infra/stor", 0)],
            id="nad-of-another-namespace-with-its-families",
        ),
        pytest.param(elements({"name": "rdma"}), "other", [], id="namespace-defaults-to-the-pods"),
        pytest.param(elements({"name": "stor"}), "app", [], id="same-name-other-namespace"),
        pytest.param(
            elements({"name": "rdma", POOLS: "own"}),
            "app",
            [("net1", ("own",), *ANY, "app/rdma", 0)],
            id="the-elements-pools-win",
        ),
        pytest.param(
            elements({"name": "stor", "namespace": "infra", POLICY: "RequireDualStack"}),
            "app",
            [("net1", ("stor-a",), "RequireDualStack", ("IPv4", "IPv6"), "infra/stor", 0)],
            id="the-elements-family-keys-win-both",
        ),
        pytest.param(
            elements({"name": "v6only", POOLS: "own"}),
            "app",
            [("net1", ("own",), "SingleStack", ("IPv6",), "app/v6only", 0)],
            id="families-only-nad-gives-the-elements-pools-its-families",
        ),
        pytest.param(elements({"name": "v6only"}), "app", [], id="families-only-nad-makes-no-interface"),
        pytest.param(
            elements({"name": "bad-pools", POOLS: "own"}),
            "app",
            [("net1", ("own",), *ANY, "app/bad-pools", 0)],
            id="a-malformed-nad-the-element-overrides-is-not-read",
        ),
        pytest.param(
            {**elements({"name": "rdma"}), **listed({"net2": "x"})},
            "app",
            [("net1", ("rdma-a", "rdma-b"), *ANY, "app/rdma", 0), ("net2", ("x",), *ANY, "", -1)],
            id="with-the-interface-pools-annotation",
        ),
        pytest.param(
            {NETWORKS: "not [json"}, "app", [], id="malformed-multus-naming-no-pools-is-multus-business"
        ),
    ],
)
def test_an_element_naming_a_nad_with_pools_is_a_further_interface(
    annotations: dict[str, str], namespace: str, want: list[Need]
) -> None:
    assert summary(annotations, namespace, NADS) == want


@pytest.mark.parametrize(
    ("annotations", "problem"),
    [
        pytest.param(
            elements({"name": "bad-pools"}),
            "NetworkAttachmentDefinition app/bad-pools annotation ipscheduler.io/pools='a,,b': '' is not a "
            "NodeIPPool name (a comma-separated list of pool names)",
            id="nad-pool-list-malformed",
        ),
        pytest.param(
            elements({"name": "bad-families"}),
            "NetworkAttachmentDefinition app/bad-families: annotation ipscheduler.io/ip-families='IPv5': "
            "'IPv5': supported values: IPv4, IPv6",
            id="nad-families-malformed",
        ),
        pytest.param(
            elements({"name": "rdma", "interface": "eth0"}),
            "interface eth0 is the pod's first interface (its ipscheduler.io/pools), not a further one",
            id="nad-interface-eth0",
        ),
        pytest.param(
            elements({"name": "rdma", "interface": "net 1"}),
            "annotation k8s.v1.cni.cncf.io/networks[0] (rdma): interface 'net 1' is not an interface name",
            id="nad-interface-not-a-name",
        ),
        pytest.param(
            elements({"name": "rdma", "interface": "net2"}, {"name": "stor", "namespace": "infra"}),
            "interface net2 is asked for twice",
            id="two-nads-one-interface",
        ),
    ],
)
def test_what_cannot_be_read_of_a_nad_is_a_problem(annotations: dict[str, str], problem: str) -> None:
    got = further_interfaces(pod(**annotations), NADS)
    assert (got.problem, got.interfaces) == (problem, ())


@pytest.mark.parametrize(
    ("annotations", "networks"),
    [
        pytest.param(elements({"name": "rdma"}), {}, id="no-nads-known"),
        pytest.param(elements({"name": "plain"}), NADS, id="names-no-nad-of-ours"),
        pytest.param({"ipscheduler.io/pools": "a"}, NADS, id="no-multus-annotation"),
    ],
)
def test_a_pod_naming_no_nad_of_ours_asks_for_nothing(
    annotations: dict[str, str], networks: dict[str, NetworkPools]
) -> None:
    assert further_interfaces(pod(**annotations), networks) is NONE
