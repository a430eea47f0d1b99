"""cmd/profiles: the default plugins, UnderlayIP's registration, and ``--config``: validation
with clear errors, and the profile it builds."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ipscheduler.cmd.profiles import (
    FILTER_PLUGINS,
    SCORE_WEIGHTS,
    build_profile,
    config_registry,
    load_config,
    network_traffic_reader,
    plugin_registry,
    scores_with_network_traffic,
    underlay_ip_refusal,
    with_underlay_ip,
)
from ipscheduler.framework.config import (
    EXTENSION_POINTS,
    REGISTRY_CONTEXT,
    ConfigError,
    SchedulerConfiguration,
)
from ipscheduler.plugins.networktraffic import NetworkTraffic
from ipscheduler.underlayip.plugin import UnderlayIP, UnderlayIPDeps
from tests.builders import config_file
from tests.unit.fakes import handle, pool_cache

HANDLE = handle()


def profile_of(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    return build_profile(UnderlayIPDeps(pool_cache(), None), load_config(config_file(tmp_path, text)))  # type: ignore[arg-type]


def names(plugins: Sequence[Any]) -> list[str]:
    return [p.name for p in plugins]


def test_empty_file_gives_the_default_profile(tmp_path: Path) -> None:
    prof = profile_of(tmp_path, "")
    assert [p.name for p in prof.filter] == list(FILTER_PLUGINS)
    assert {p.name: w for p, w in prof.score} == SCORE_WEIGHTS
    assert prof.scheduler_name == "ip-scheduler"


def test_overrides_weights_disables_and_strategy(tmp_path: Path) -> None:
    prof = profile_of(
        tmp_path,
        """
apiVersion: ipscheduler.io/v1alpha1
kind: IPSchedulerConfiguration
profiles:
  - schedulerName: custom
    plugins:
      filter: {disabled: [{name: NodePorts}]}
      score:
        enabled: [{name: UnderlayIP, weight: 7}]
        disabled: [{name: NodeResourcesBalancedAllocation}]
    pluginConfig:
      - {name: UnderlayIP, args: {strategy: binpack, multusNetwork: infra/underlay}}
""",
    )
    assert "NodePorts" not in [p.name for p in prof.filter]
    weights = {p.name: w for p, w in prof.score}
    assert weights["UnderlayIP"] == 7 and "NodeResourcesBalancedAllocation" not in weights
    underlay = next(p for p, _ in prof.score if p.name == "UnderlayIP")
    assert underlay.strategy == "binpack" and prof.scheduler_name == "custom"
    assert underlay.multus_network == "infra/underlay"


@pytest.mark.parametrize(
    ("text", "flag", "expected"),
    [
        ("", None, None),
        ("", "underlay", "underlay"),
        ("profiles: [{pluginConfig: [{name: UnderlayIP, args: {multusNetwork: a}}]}]", "b", "a"),
    ],
    ids=["neither", "flag", "file-wins"],
)
def test_multus_network_from_flag_or_file(
    tmp_path: Path, text: str, flag: str | None, expected: str | None
) -> None:
    deps = UnderlayIPDeps(pool_cache(), None)  # type: ignore[arg-type]
    prof = build_profile(deps, load_config(config_file(tmp_path, text)), multus_network=flag)
    underlay = next(p for p in prof.filter if p.name == "UnderlayIP")
    assert underlay.multus_network == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("profiles: [{plugins: {score: {enabled: [{name: Nope}]}}}]", "unknown score plugin 'Nope'"),
        (
            "profiles: [{plugins: {filter: {enabled: [{name: NodePorts, weight: 2}]}}}]",
            "weight is only valid",
        ),
        ("profiles: [{plugins: {score: {enabled: [{name: UnderlayIP, weight: -1}]}}}]", "weight"),
        ("profiles: [{schedulerNmae: x}]", "profiles.0.schedulerNmae"),
        ("profiles: [{pluginConfig: [{name: UnderlayIP, args: {strategy: fast}}]}]", "strategy"),
        (
            "profiles: [{pluginConfig: [{name: UnderlayIP, args: {multusNetwork: a/b/c}}]}]",
            "expected [namespace/]name",
        ),
        ("profiles: [{}, {}]", "profiles"),
        ("kind: KubeSchedulerConfiguration", "kind"),
        ("profiles: [", "config.yaml"),
        (
            "percentageOfNodesToScore: 101",
            "percentageOfNodesToScore: Input should be less than or equal to 100",
        ),
        ("profiles: [{percentageOfNodesToScore: -1}]", "profiles.0.percentageOfNodesToScore"),
    ],
    ids=[
        "unknown-plugin",
        "filter-weight",
        "negative-weight",
        "typo",
        "bad-strategy",
        "bad-multus-network",
        "two-profiles",
        "kind",
        "yaml",
        "percentage-over-100",
        "negative-profile-percentage",
    ],
)
def test_invalid_files_name_the_field(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        load_config(config_file(tmp_path, text))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", None),
        ("percentageOfNodesToScore: 30", 30),
        ("percentageOfNodesToScore: 30\nprofiles: [{percentageOfNodesToScore: 70}]", 70),
        ("percentageOfNodesToScore: 30\nprofiles: [{percentageOfNodesToScore: 0}]", 0),
    ],
    ids=["unset-adaptive", "global", "profile-overrides", "profile-zero-is-adaptive"],
)
def test_percentage_of_nodes_to_score_global_and_per_profile(
    tmp_path: Path, text: str, expected: int | None
) -> None:
    assert profile_of(tmp_path, text).percentage_of_nodes_to_score == expected


@pytest.mark.parametrize(
    ("point", "name", "refusal"),
    [
        ("filter", "UnderlayIP", "the UnderlayIP filter cannot be disabled"),
        ("filter", "*", "the UnderlayIP filter cannot be disabled"),
        ("reserve", "UnderlayIP", "the UnderlayIP reserve plugin cannot be disabled"),
        ("preBind", "*", "the UnderlayIP preBind plugin cannot be disabled"),
    ],
    ids=["filter", "filter-star", "reserve", "prebind-star"],
)
def test_a_config_disabling_underlay_ip_is_refused_at_load(
    tmp_path: Path, point: str, name: str, refusal: str
) -> None:
    text = f"profiles: [{{plugins: {{{point}: {{disabled: [{{name: '{name}'}}]}}}}}}]"
    with pytest.raises(ConfigError, match=re.escape(f"profiles[0].plugins: {refusal}")):
        profile_of(tmp_path, text)


def test_disabling_another_score_plugin_loads() -> None:
    config = SchedulerConfiguration.model_validate(
        {"profiles": [{"plugins": {"score": {"disabled": [{"name": "UnderlayIP"}]}}}]}
    )
    assert underlay_ip_refusal(config) is None


def test_the_default_plugins_fill_their_points() -> None:
    fw = build_profile(UnderlayIPDeps(pool_cache(), None))  # type: ignore[arg-type]
    assert fw.queue_sort.name == "Coscheduling"
    assert names(fw.pre_filter) == [
        "Coscheduling",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "VolumeRestrictions",
        "NodeVolumeLimits",
        "VolumeBinding",
        "VolumeZone",
        "PodTopologySpread",
        "InterPodAffinity",
        "UnderlayIP",
    ]
    assert names(fw.pre_score) == ["NodeAffinity", "PodTopologySpread", "InterPodAffinity"]
    assert (names(fw.post_filter), names(fw.permit)) == (
        ["DefaultPreemption", "Coscheduling"],
        ["Coscheduling"],
    )
    assert names(fw.reserve) == ["VolumeBinding", "UnderlayIP", "Coscheduling"]
    assert names(fw.pre_bind) == ["VolumeBinding", "UnderlayIP"]
    assert names(fw.post_bind) == ["UnderlayIP"]
    assert names(fw.bind) == ["DefaultBinder"]
    underlay = fw.reserve[1]
    assert isinstance(underlay, UnderlayIP)
    assert all(p is underlay for p in (fw.filter[-1], fw.score[0][0]))


# --------------------------------------------------------------------------- the configuration file


@pytest.mark.parametrize("point", EXTENSION_POINTS, ids=list(EXTENSION_POINTS))
def test_config_file_names_unknown_plugins_at_every_point(tmp_path: Path, point: str) -> None:
    path = config_file(tmp_path, f"profiles: [{{plugins: {{{point}: {{enabled: [{{name: Nope}}]}}}}}}]")
    with pytest.raises(
        ConfigError, match=re.escape(f"profiles.0: Value error, unknown {point} plugin 'Nope'; known: ")
    ):
        load_config(path)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("profiles: [{pluginConfig: [{name: UnderlayIP}, {name: UnderlayIP}]}]", "configured twice"),
        ("profiles: [{pluginConfig: [{name: NodePorts, args: {x: 1}}]}]", "plugin 'NodePorts' takes no args"),
        (
            "profiles: [{pluginConfig: [{name: InterPodAffinity, args: {hardPodAffinityWeight: 200}}]}]",
            "profiles.0.pluginConfig.0: Value error, InterPodAffinity args.hardPodAffinityWeight",
        ),
        ("profiles: [{plugins: {filter: {enabled: [{name: '*'}]}}}]", "unknown filter plugin '*'"),
    ],
    ids=["plugin-config-twice", "args-for-argless", "in-tree-args", "star-enabled"],
)
def test_config_file_plugin_config_checked_by_the_registry(tmp_path: Path, text: str, fragment: str) -> None:
    path = config_file(tmp_path, text)
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        load_config(path)


@pytest.mark.parametrize("point", ["filter", "reserve", "preBind"])
@pytest.mark.parametrize("name", ["UnderlayIP", "*"])
def test_underlay_ip_cannot_be_disabled(point: str, name: str) -> None:
    cfg = SchedulerConfiguration.model_validate(
        {"profiles": [{"plugins": {point: {"disabled": [{"name": name}]}}}]},
        context={REGISTRY_CONTEXT: config_registry()},
    )
    with pytest.raises(ValueError, match=f"the UnderlayIP {point}"):
        build_profile(UnderlayIPDeps(pool_cache(), None), cfg)  # type: ignore[arg-type]


def test_config_registry_cannot_make_underlay_ip() -> None:
    with pytest.raises(RuntimeError, match="with_underlay_ip"):
        config_registry().new_plugin("UnderlayIP", None, HANDLE)


@pytest.mark.parametrize(
    ("args", "strategy", "multus", "expected"),
    [
        ({}, None, None, ("spread", None)),
        ({}, "binpack", "net", ("binpack", "net")),
        ({"multusNetwork": "file"}, "binpack", "net", ("binpack", "file")),
        ({"strategy": "spread"}, "binpack", None, ("spread", None)),
    ],
    ids=["nothing", "flags", "file-network-flag-strategy", "file-strategy"],
)
def test_underlay_ip_flags_are_defaults_plugin_config_overrides(
    args: dict[str, Any], strategy: Any, multus: str | None, expected: tuple[str, str | None]
) -> None:
    registry = plugin_registry(with_underlay_ip(UnderlayIPDeps(pool_cache(), None), strategy, multus))  # type: ignore[arg-type]
    plugin = registry.new_plugin("UnderlayIP", args, HANDLE)
    assert isinstance(plugin, UnderlayIP)
    assert (plugin.strategy, plugin.multus_network) == expected


# --------------------------------------------------------------------------- NetworkTraffic

NETWORK_TRAFFIC = """
apiVersion: ipscheduler.io/v1alpha1
kind: IPSchedulerConfiguration
profiles:
  - plugins:
      score:
        enabled: [{name: NetworkTraffic, weight: 3}]
    pluginConfig:
      - name: NetworkTraffic
        args: {prometheusAddress: "http://127.0.0.1:9090", interval: 10s, queryTimeout: 2s, nodeLabel: node}
"""


def test_network_traffic_is_off_by_default(tmp_path: Path) -> None:
    assert "NetworkTraffic" in config_registry()
    assert "NetworkTraffic" not in SCORE_WEIGHTS
    assert network_traffic_reader(load_config(config_file(tmp_path, ""))) is None
    assert not scores_with_network_traffic(profile_of(tmp_path, ""))


def test_network_traffic_enabled_through_the_config_gets_its_reader(tmp_path: Path) -> None:
    failures: list[str] = []
    config = load_config(config_file(tmp_path, NETWORK_TRAFFIC))
    reader = network_traffic_reader(config, on_failure=lambda: failures.append("x"))
    prof = build_profile(UnderlayIPDeps(pool_cache(), None), config, traffic=reader)  # type: ignore[arg-type]
    assert {p.name: w for p, w in prof.score}["NetworkTraffic"] == 3
    assert scores_with_network_traffic(prof)
    assert reader is not None
    assert (reader.url, reader.node_label, reader.interval, reader.timeout) == (
        "http://127.0.0.1:9090/api/v1/query",
        "node",
        10.0,
        2.0,
    )
    assert reader.query.startswith("sum by (node) (rate(node_network_receive_bytes_total")
    [plugin] = [p for p, _ in prof.score if p.name == "NetworkTraffic"]
    assert isinstance(plugin, NetworkTraffic) and plugin.max_age == 30.0
    assert plugin.source is reader, "the plugin reads what the wiring runs"
    reader.on_failure()
    assert failures == ["x"]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ("{}", "NetworkTraffic args.prometheusAddress: Field required"),
        ('{prometheusAddress: "127.0.0.1:9090"}', "is not an http(s) URL"),
        ('{prometheusAddress: "http://p:9090", device: eth1}', "args.device: Extra inputs are not permitted"),
    ],
    ids=["no-address", "bad-url", "unknown-field"],
)
def test_network_traffic_args_are_checked_by_the_config(tmp_path: Path, args: str, error: str) -> None:
    text = NETWORK_TRAFFIC.replace(
        '{prometheusAddress: "http://127.0.0.1:9090", interval: 10s, queryTimeout: 2s, nodeLabel: node}', args
    )
    with pytest.raises(ConfigError, match=re.escape(error)):
        load_config(config_file(tmp_path, text))


def test_the_example_config_enables_network_traffic() -> None:
    example = Path(__file__).resolve().parents[3] / "examples" / "networktraffic-config.yaml"
    config = load_config(example)
    prof = build_profile(UnderlayIPDeps(pool_cache(), None), config)  # type: ignore[arg-type]
    assert scores_with_network_traffic(prof)
    reader = network_traffic_reader(config)
    assert reader is not None and reader.interval == 15.0
