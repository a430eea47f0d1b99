"""--config: validation with clear errors, and the profile it builds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ipscheduler.cmd.profiles import FILTER_PLUGINS, SCORE_WEIGHTS, build_profile, load_config
from ipscheduler.framework.config import ConfigError
from tests.unit.fakes import pool_cache


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "config.yaml"
    p.write_text(text)
    return p


def profile_of(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    return build_profile(pool_cache(), None, None, load_config(write(tmp_path, text)))  # type: ignore[arg-type]


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
    prof = build_profile(pool_cache(), None, None, load_config(write(tmp_path, text)), multus_network=flag)  # type: ignore[arg-type]
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
        load_config(write(tmp_path, text))


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


def test_underlay_filter_cannot_be_disabled(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="UnderlayIP filter cannot be disabled"):
        profile_of(tmp_path, "profiles: [{plugins: {filter: {disabled: [{name: UnderlayIP}]}}}]")
