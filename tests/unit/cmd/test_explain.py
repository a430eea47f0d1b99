"""cmd/explain: ``explain --config`` builds its framework as ``run`` does, from the same file
(and the command line hands it the file)."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from ipscheduler.cmd import cli
from ipscheduler.cmd import explain as explain_module
from ipscheduler.cmd.explain import (
    address_line,
    evaluate,
    explain_profile,
    group_line,
    interfaces_line,
    networks_for,
    pools_line,
    render,
    retention_line,
)
from ipscheduler.cmd.profiles import FILTER_PLUGINS, SCORE_WEIGHTS, load_config
from ipscheduler.coscheduling.groups import GroupIndex, Member
from ipscheduler.coscheduling.models import POD_GROUP_LABEL, PodGroupView
from ipscheduler.framework.config import ConfigError, SchedulerConfiguration
from ipscheduler.framework.types import NodeInfo, OwnerRef, PodInfo
from ipscheduler.kube.client import ClusterResource
from ipscheduler.underlayip.informers import NETWORK_ATTACHMENT_DEFINITIONS
from ipscheduler.underlayip.selection import NamespaceDefaults
from tests.builders import CUSTOM_PROFILE as CUSTOM
from tests.builders import config_file, pod_info, pool
from tests.unit.fakes import pool_cache

# A hostNetwork pod needs no address, so UnderlayIP passes every node without pools.
POD = PodInfo(uid="u1", namespace="ns", name="p", host_network=True, scheduler_name="custom")
NODES = {
    "cordoned": NodeInfo(name="cordoned", ready=True, unschedulable=True, allocatable={"pods": Decimal(10)}),
    "open": NodeInfo(name="open", ready=True, allocatable={"pods": Decimal(10)}),
}


@pytest.mark.parametrize(
    ("text", "name", "filters", "weights", "strategy"),
    [
        (None, "ip-scheduler", list(FILTER_PLUGINS), SCORE_WEIGHTS, "spread"),
        ("", "ip-scheduler", list(FILTER_PLUGINS), SCORE_WEIGHTS, "spread"),
        (
            CUSTOM,
            "custom",
            [n for n in FILTER_PLUGINS if n != "NodeUnschedulable"],
            {
                **{k: v for k, v in SCORE_WEIGHTS.items() if k != "NodeResourcesBalancedAllocation"},
                "UnderlayIP": 7,
            },
            "binpack",
        ),
    ],
    ids=["no-config", "empty-file", "custom-file"],
)
def test_explain_profile_is_the_configured_one(
    tmp_path: Path, text: str | None, name: str, filters: list[str], weights: dict[str, int], strategy: str
) -> None:
    config = None if text is None else load_config(config_file(tmp_path, text))
    fw = explain_profile(pool_cache(), None, None, config)  # type: ignore[arg-type]
    assert fw.scheduler_name == name
    assert [p.name for p in fw.filter] == filters
    assert {p.name: w for p, w in fw.score} == weights
    assert getattr(fw.filter[-1], "strategy", None) == strategy


@pytest.mark.parametrize(
    ("text", "feasible", "rejected"),
    [
        ("", ["open"], {"cordoned": "NodeUnschedulable"}),
        (CUSTOM, ["cordoned", "open"], {}),
    ],
    ids=["defaults", "file-disables-the-filter"],
)
def test_explain_verdicts_follow_the_file(
    tmp_path: Path, text: str, feasible: list[str], rejected: dict[str, str]
) -> None:
    fw = explain_profile(pool_cache(), None, None, load_config(config_file(tmp_path, text)))  # type: ignore[arg-type]
    verdicts, summary = evaluate(fw, POD, NODES)
    assert sorted(v.node for v in verdicts if v.feasible) == feasible
    assert {v.node: v.plugin for v in verdicts if not v.feasible} == rejected
    assert summary == ""
    text_out = render(POD, verdicts, summary, {p.name: w for p, w in fw.score})
    assert bool(re.search(r"UnderlayIP \d+x7", text_out)) == (text == CUSTOM)


def test_explain_profile_refuses_what_run_refuses(tmp_path: Path) -> None:
    path = config_file(tmp_path, "profiles: [{plugins: {filter: {disabled: [{name: UnderlayIP}]}}}]")
    with pytest.raises(
        ConfigError, match=r"profiles\[0\]\.plugins: the UnderlayIP filter cannot be disabled"
    ):
        load_config(path)  # refused at load, as `run --config` refuses it
    config = SchedulerConfiguration.model_validate(
        {"profiles": [{"plugins": {"filter": {"disabled": [{"name": "UnderlayIP"}]}}}]}
    )
    with pytest.raises(ValueError, match="the UnderlayIP filter cannot be disabled"):
        explain_profile(pool_cache(), None, None, config)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the command line


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []

    async def fake_explain(*args: Any) -> tuple[int, str]:
        calls.append(args)
        return 0, "explained\n"

    monkeypatch.setattr(explain_module, "explain", fake_explain)
    return calls


@pytest.mark.parametrize(
    ("text", "flags", "name", "filter_disabled"),
    [
        (None, [], "ip-scheduler", []),
        (None, ["--scheduler-name", "other"], "other", []),
        (CUSTOM, ["--scheduler-name", "other"], "custom", ["NodeUnschedulable"]),
    ],
    ids=["defaults", "flag-name", "file-wins"],
)
def test_cli_explain_passes_the_config(
    tmp_path: Path,
    captured: list[tuple[Any, ...]],
    capsys: pytest.CaptureFixture[str],
    text: str | None,
    flags: list[str],
    name: str,
    filter_disabled: list[str],
) -> None:
    argv = ["explain", "ns/p", *flags]
    if text is not None:
        argv += ["--config", str(config_file(tmp_path, text))]
    assert cli.main(argv) == 0
    assert capsys.readouterr().out == "explained\n"
    (_, target, _, strategy, config, context) = captured[0]
    assert (target, strategy, context) == ("ns/p", "spread", None)
    assert isinstance(config, SchedulerConfiguration)
    assert config.profile.scheduler_name == name
    assert [r.name for r in config.profile.plugins.filter.disabled] == filter_disabled


def test_cli_explain_invalid_config_exits_2_naming_the_field(
    tmp_path: Path, captured: list[tuple[Any, ...]], capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path, "profiles: [{plugins: {score: {enabled: [{name: Nope}]}}}]")
    assert cli.main(["explain", "ns/p", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert re.search(r"ipscheduler: invalid --config: .*profiles\.0: .*unknown score plugin 'Nope'", err)
    assert captured == []


@pytest.mark.parametrize(
    ("annotations", "namespace_default", "line"),
    [
        ({}, None, "Pools: any pool of the node; not team (reserved for other namespaces)"),
        (
            {"ipscheduler.io/pools": "b, a"},
            None,
            "Pools: b, a (in this order, from ipscheduler.io/pools); "
            "not team (reserved for other namespaces)",
        ),
        (
            {},
            "a",
            "Pools: a (in this order, from namespace ns annotation ipscheduler.io/default-pools); "
            "not team (reserved for other namespaces)",
        ),
        (
            {"ipscheduler.io/pools": "a,,b"},
            None,
            "Pools: none (annotation ipscheduler.io/pools='a,,b': '' is not a NodeIPPool name "
            "(a comma-separated list of pool names))",
        ),
    ],
    ids=["any", "named", "namespace-default", "malformed"],
)
def test_explain_says_which_pools_the_pod_may_use(
    annotations: dict[str, str], namespace_default: str | None, line: str
) -> None:
    cache = pool_cache({}, {"team": [pool("team", namespaces=["team-x"])], "a": [pool("a")]})
    if namespace_default is not None:
        cache.attach_namespaces({"ns": (NamespaceDefaults(namespace_default),)})
    pod = pod_info("p", annotations=annotations)
    assert pools_line(pod, cache) == line
    assert render(pod, [], "no nodes", {}, line).splitlines()[1] == line


def test_explain_says_the_release_policy_and_the_retained_address() -> None:
    kept = {
        "ip": "10.0.0.5",
        "pod": "ns/web-0",
        "phase": "Retained",
        "since": "2024-01-01T00:00:00Z",
        "releasePolicy": "StatefulSet",
        "identity": "ns/web-0",
        "ownerUID": "uid-sts",
    }
    cache = pool_cache(
        {}, {"a": [pool("a", "node-a", addresses=["10.0.0.1-10.0.0.9"], allocations={"old": kept})]}
    )
    web0 = pod_info("web-0", owner=OwnerRef("StatefulSet", "web", "uid-sts"), generate_name="web-")
    assert retention_line(web0, cache) == (
        "Release policy: StatefulSet (identity ns/web-0); retained address 10.0.0.5 of pool a on node-a: "
        "past the pod's retain-timeout, so placed anew and that address released"
    ), "retained since 2024, past the default 5m: as the scheduler's PreFilter decides (sticky.kept_address)"
    waits = pod_info(
        "web-0",
        owner=OwnerRef("StatefulSet", "web", "uid-sts"),
        generate_name="web-",
        annotations={"ipscheduler.io/retain-timeout": "0"},
    )
    assert retention_line(waits, cache) == (
        "Release policy: StatefulSet (identity ns/web-0); retained address 10.0.0.5 of pool a on node-a: "
        "the pod may go to node-a only"
    )
    assert retention_line(pod_info("p"), cache) == "Release policy: Pod"
    # A StatefulSet re-created under the same name (another UID) does not get it back, and
    # explain says so as the scheduler decides it (retention.claims).
    other = pod_info("web-0", owner=OwnerRef("StatefulSet", "web", "uid-new"), generate_name="web-")
    assert retention_line(other, cache) == "Release policy: StatefulSet (identity ns/web-0)"


@pytest.mark.parametrize(
    ("labels", "setup", "line"),
    [
        ({}, "group", ""),
        ({POD_GROUP_LABEL: "g"}, "none", "PodGroup: ns/g (not found)"),
        ({POD_GROUP_LABEL: "g"}, "uninstalled", "PodGroup: ns/g (the PodGroup API is not installed)"),
        (
            {POD_GROUP_LABEL: "g"},
            "group",
            "PodGroup: ns/g, minMember 3: 3 pods, 1 bound; a node found here holds the pod at Permit "
            "until 3 are placed",
        ),
    ],
    ids=["no-group", "podgroup-missing", "api-missing", "gathering"],
)
def test_group_line(labels: dict[str, str], setup: str, line: str) -> None:
    groups = GroupIndex()
    groups.installed = setup != "uninstalled"
    if setup == "group":
        groups.set_group("ns/g", PodGroupView("ns", "g", min_member=3))
        for i, node in enumerate(("n1", "", "")):
            groups.set_member(f"u{i}", Member(f"u{i}", "ns", f"p{i}", "ns/g", node_name=node))
    assert group_line(pod_info("p1", namespace="ns", labels=labels), groups) == line


@pytest.mark.parametrize(
    ("node", "annotations", "allocated", "line"),
    [
        pytest.param(
            "", {"ipscheduler.io/pool": "team", "ipscheduler.io/ip": "10.0.0.1"}, False, "", id="pending"
        ),
        pytest.param("node-a", {}, False, "", id="no-address"),
        pytest.param(
            "node-a",
            {"ipscheduler.io/pool": "team", "ipscheduler.io/ip": "10.0.0.1"},
            True,
            "Address: 10.0.0.1 of NodeIPPool team (recorded, Bound)",
            id="recorded",
        ),
        pytest.param(
            "node-a",
            {"ipscheduler.io/pool": "team", "ipscheduler.io/ip": "10.0.0.1"},
            False,
            "Address: 10.0.0.1 of NodeIPPool team (not recorded: the pod may not use the pool: "
            "NodeIPPool team is reserved for namespaces team-x (spec.namespaces), not ns)",
            id="refused-by-spec-namespaces",
        ),
        pytest.param(
            "node-a",
            {"ipscheduler.io/pool": "gone", "ipscheduler.io/ip": "10.0.0.1"},
            False,
            "Address: 10.0.0.1 of NodeIPPool gone (the pool does not exist)",
            id="no-such-pool",
        ),
    ],
)
def test_explain_says_whether_a_bound_pods_address_is_recorded_and_why_not(
    node: str, annotations: dict[str, str], allocated: bool, line: str
) -> None:
    allocations = {
        "uid-p": {"ip": "10.0.0.1", "pod": "ns/p", "phase": "Bound", "since": "2024-01-01T00:00:00Z"}
    }
    team = pool(
        "team",
        "node-a",
        addresses=["10.0.0.1-10.0.0.9"],
        namespaces=["team-x"],
        allocations=allocations if allocated else None,
    )
    cache = pool_cache({}, {"team": [team]})
    assert address_line(pod_info("p", node_name=node, annotations=annotations), cache) == line


@pytest.mark.parametrize(
    ("preemptor", "line"),
    [
        pytest.param(
            PodInfo(uid="u-high", namespace="ns", name="high", host_network=True, priority=1000),
            "Preemption: would evict ns/low (priority 0) on full, and nominate the pod there.",
            id="victims",
        ),
        pytest.param(
            PodInfo(
                uid="u-high",
                namespace="ns",
                name="high",
                host_network=True,
                priority=1000,
                preemption_policy="Never",
            ),
            "Preemption: would not help: not eligible due to preemptionPolicy=Never.",
            id="never",
        ),
        pytest.param(
            PodInfo(uid="u-high", namespace="ns", name="high", host_network=True),
            "Preemption: would not help: 0/1 nodes are available: 1 No preemption victims found for "
            "incoming pod.",
            id="no lower priority",
        ),
    ],
)
async def test_explain_says_what_preemption_would_do(preemptor: PodInfo, line: str) -> None:
    low = PodInfo(uid="u-low", namespace="ns", name="low", node_name="full")
    nodes = {"full": NodeInfo(name="full", ready=True, allocatable={"pods": Decimal(1)}, pods=(low,))}
    fw = explain_profile(pool_cache(), None, None, None)  # type: ignore[arg-type]
    verdicts, summary = evaluate(fw, preemptor, nodes)
    assert summary == "0/1 nodes are available: 1 Too many pods."
    got = await explain_module.preemption_line(fw, preemptor, nodes)
    assert got == line
    assert render(preemptor, verdicts, summary, {}, preemption=got).endswith(
        f"Unschedulable: {summary}\n{line}\n"
    )


NET1 = '{"net1":{"pool":"rdma-a","ips":["10.1.0.5"],"network":{"ips":[{"address":"10.1.0.5/24"}]}}}'


@pytest.mark.parametrize(
    ("annotations", "node", "recorded", "line"),
    [
        pytest.param({}, "", False, "", id="none"),
        pytest.param(
            {"ipscheduler.io/interface-pools": '{"net1": "rdma-a,rdma-b"}'},
            "",
            False,
            "Interfaces: net1 from rdma-a, rdma-b",
            id="pending",
        ),
        pytest.param(
            {"ipscheduler.io/interface-pools": '{"net1": "rdma-a"}', "ipscheduler.io/interfaces": NET1},
            "node-a",
            True,
            "Interfaces: net1 10.1.0.5 of NodeIPPool rdma-a (recorded)",
            id="bound",
        ),
        pytest.param(
            {"ipscheduler.io/interface-pools": '{"net1": "rdma-a"}', "ipscheduler.io/interfaces": NET1},
            "node-a",
            False,
            "Interfaces: net1 10.1.0.5 of NodeIPPool rdma-a (not recorded)",
            id="bound-not-recorded",
        ),
        pytest.param(
            {"ipscheduler.io/interface-pools": '{"eth0": "rdma-a"}'},
            "",
            False,
            "Interfaces: interface eth0 is the pod's first interface (its ipscheduler.io/pools), "
            "not a further one",
            id="malformed",
        ),
    ],
)
def test_explain_says_which_further_interfaces_the_pod_has(
    annotations: dict[str, str], node: str, recorded: bool, line: str
) -> None:
    held = {
        "uid-p": {
            "ip": "10.1.0.5",
            "pod": "ns/p",
            "phase": "Bound",
            "since": "2026-01-01T00:00:00Z",
            "interface": "net1",
        }
    }
    rdma = pool("rdma-a", addresses=["10.1.0.0/28"], allocations=held if recorded else {})
    cache = pool_cache({}, {"rdma-a": [rdma]})
    assert interfaces_line(pod_info("p", annotations=annotations, node_name=node), cache) == line


class NadApi:
    """Answers ``serves`` (``served``) and the LIST of NetworkAttachmentDefinitions
    (``items``); counts the requests."""

    def __init__(self, served: bool, items: list[dict[str, Any]]) -> None:
        self.served, self.items, self.requests = served, items, 0

    async def serves(self, res: ClusterResource) -> bool:
        assert res == NETWORK_ATTACHMENT_DEFINITIONS
        self.requests += 1
        return self.served

    async def list_cluster_objects(self, res: ClusterResource) -> list[dict[str, Any]]:
        assert res == NETWORK_ATTACHMENT_DEFINITIONS
        self.requests += 1
        return self.items


RDMA_NAD = {
    "metadata": {"namespace": "ns", "name": "rdma", "annotations": {"ipscheduler.io/pools": "rdma-a"}}
}
PLAIN_NAD = {"metadata": {"namespace": "ns", "name": "plain"}}


@pytest.mark.parametrize(
    ("annotations", "served", "requests", "line"),
    [
        pytest.param(
            {"k8s.v1.cni.cncf.io/networks": "rdma"}, True, 2, "Interfaces: net1 from rdma-a", id="nad-named"
        ),
        pytest.param({"k8s.v1.cni.cncf.io/networks": "rdma"}, False, 1, "", id="nad-api-not-served"),
        pytest.param({}, True, 0, "", id="no-multus-annotation-nothing-read"),
    ],
)
async def test_explain_reads_the_nads_a_multus_pod_may_name(
    annotations: dict[str, str], served: bool, requests: int, line: str
) -> None:
    api = NadApi(served, [RDMA_NAD, PLAIN_NAD])
    pending = pod_info("p", annotations=annotations)
    cache = pool_cache({}, {})
    cache.attach_networks(await networks_for(api, pending))  # type: ignore[arg-type]
    assert api.requests == requests
    assert interfaces_line(pending, cache) == line
