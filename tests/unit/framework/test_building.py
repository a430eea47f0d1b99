"""framework/building: new_framework fills every extension point of a profile's framework
from a registry and the configuration (merged over the defaults, with PreFilter and PreScore
companions), refuses what cannot be built, and is itself the handle its plugin factories get."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import Field

from ipscheduler.cmd.profiles import default_plugins, plugin_registry, with_underlay_ip
from ipscheduler.framework.building import new_framework
from ipscheduler.framework.config import (
    EXTENSION_POINTS,
    REGISTRY_CONTEXT,
    Plugins,
    ProfileConfig,
    SchedulerConfiguration,
)
from ipscheduler.framework.diagnosis import Diagnosis
from ipscheduler.framework.interface import (
    Binder,
    Code,
    CycleState,
    Handle,
    PostFilterResult,
    QueuedPodInfo,
    Status,
)
from ipscheduler.framework.registry import PluginArgs, Registry, with_plugin
from ipscheduler.framework.runtime import Framework
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.framework.volumes import MapVolumeListers
from ipscheduler.plugins.queuesort import PrioritySort
from ipscheduler.underlayip.plugin import UnderlayIPDeps
from tests.unit.fakes import pool_cache

POD = PodInfo(uid="uid-1", namespace="ns", name="pod")


class AllArgs(PluginArgs):
    level: int = Field(default=0, ge=0)


@dataclass
class Everything:
    """A plugin at every extension point; records the calls."""

    name: str
    args: AllArgs | None = None
    calls: list[str] = field(default_factory=list)
    pre_score_status: Status = field(default_factory=Status.success)

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        return False

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Status:
        self.calls.append("preFilter")
        return Status.success()

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        self.calls.append("filter")
        return Status.success()

    async def post_filter(
        self, state: CycleState, pod: PodInfo, statuses: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        self.calls.append("postFilter")
        return None, Status.unschedulable(f"{self.name} found no victims")

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        self.calls.append("preScore")
        return self.pre_score_status

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        self.calls.append("score")
        return 1

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> None:
        pass

    async def reserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return Status.success()

    async def unreserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> None:
        pass

    def permit(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> tuple[Status, float]:
        return Status.success(), 0.0

    async def pre_bind(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return Status.success()

    async def bind(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return Status.success()

    async def post_bind(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> None:
        pass


@dataclass
class FilterOnly:
    name: str

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return Status.success()


def fake_registry(made: dict[str, Everything] | None = None) -> Registry:
    """Everything A, B, C (A with args), Sort and Bind; FilterOnly F."""
    made = {} if made is None else made

    def everything(name: str) -> Any:
        def new(args: AllArgs | None, handle: Any) -> Everything:
            made[name] = Everything(name, args)
            return made[name]

        return new

    r = Registry()
    r.register("A", everything("A"), AllArgs)
    for name in ("B", "C", "Sort", "Bind"):
        r.register(name, everything(name))
    r.register("F", lambda args, handle: FilterOnly("F"))
    return r


MINIMAL = Plugins.model_validate(
    {"queueSort": {"enabled": [{"name": "Sort"}]}, "bind": {"enabled": [{"name": "Bind"}]}}
)


def profile_config(raw: dict[str, Any], registry: Registry | None = None) -> ProfileConfig:
    context = {REGISTRY_CONTEXT: registry} if registry is not None else None
    return ProfileConfig.model_validate(raw, context=context)


def build(plugins: dict[str, Any], plugin_config: list[Any] | None = None, **kw: Any) -> Framework:
    raw = {"plugins": plugins, "pluginConfig": plugin_config or []}
    return new_framework(
        kw.get("registry") or fake_registry(), profile_config(raw), kw.get("defaults", MINIMAL)
    )


def names(plugins: Sequence[Any]) -> list[str]:
    return [p.name for p in plugins]


# --------------------------------------------------------------------------- filling every point


FIELDS = {
    "queueSort": "queue_sort",
    "preFilter": "pre_filter",
    "filter": "filter",
    "postFilter": "post_filter",
    "preScore": "pre_score",
    "score": "score",
    "reserve": "reserve",
    "permit": "permit",
    "preBind": "pre_bind",
    "bind": "bind",
    "postBind": "post_bind",
}


@pytest.mark.parametrize("point", EXTENSION_POINTS, ids=list(EXTENSION_POINTS))
def test_every_extension_point_is_filled_from_the_configuration(point: str) -> None:
    made: dict[str, Everything] = {}
    enabled = [{"name": "A"}] if point == "queueSort" else [{"name": "A"}, {"name": "B"}]
    plugins = {point: {"enabled": enabled, "disabled": [{"name": "*"}]}}
    fw = build(plugins, registry=fake_registry(made))
    got = getattr(fw, FIELDS[point])
    if point == "queueSort":
        assert got is made["A"]
        return
    listed = [p for p, _ in got] if point == "score" else list(got)
    assert names(listed) == ["A", "B"]
    assert listed[0] is made["A"]  # one instance per plugin, shared by its points


def test_one_instance_per_plugin_across_points() -> None:
    made: dict[str, Everything] = {}
    fw = build(
        {"filter": {"enabled": [{"name": "A"}]}, "reserve": {"enabled": [{"name": "A"}]}},
        registry=fake_registry(made),
    )
    shared: list[object] = [fw.filter[0], fw.reserve[0], fw.pre_filter[0]]
    assert all(p is made["A"] for p in shared)


# --------------------------------------------------------------------------- merging with defaults


DEFAULTS = Plugins.model_validate(
    {
        **MINIMAL.model_dump(by_alias=True),
        "filter": {"enabled": [{"name": "A"}, {"name": "B"}, {"name": "F"}]},
        "score": {"enabled": [{"name": "A", "weight": 3}, {"name": "B", "weight": 2}]},
    }
)


@pytest.mark.parametrize(
    ("plugins", "filters", "pre_filters", "scores", "pre_scores"),
    [
        ({}, ["A", "B", "F"], ["A", "B"], [("A", 3), ("B", 2)], ["A", "B"]),
        (
            {"filter": {"disabled": [{"name": "A"}]}, "score": {"disabled": [{"name": "A"}]}},
            ["B", "F"],
            ["B"],
            [("B", 2)],
            ["B"],
        ),
        ({"filter": {"disabled": [{"name": "A"}]}}, ["B", "F"], ["B", "A"], [("A", 3), ("B", 2)], ["A", "B"]),
        (
            {"score": {"enabled": [{"name": "B", "weight": 9}, {"name": "C"}]}},
            ["A", "B", "F"],
            ["A", "B", "C"],
            [("A", 3), ("B", 9), ("C", 1)],
            ["A", "B", "C"],
        ),
        (
            {"score": {"disabled": [{"name": "*"}], "enabled": [{"name": "B"}, {"name": "A", "weight": 0}]}},
            ["A", "B", "F"],
            ["A", "B"],
            [("B", 2)],
            ["B"],
        ),
        (
            {"filter": {"disabled": [{"name": "A"}], "enabled": [{"name": "A"}]}},
            ["B", "F", "A"],
            ["B", "A"],
            [("A", 3), ("B", 2)],
            ["A", "B"],
        ),
        (
            {"preFilter": {"disabled": [{"name": "A"}]}, "preScore": {"disabled": [{"name": "*"}]}},
            ["A", "B", "F"],
            ["B"],
            [("A", 3), ("B", 2)],
            [],
        ),
        (
            {"preFilter": {"enabled": [{"name": "C"}]}},
            ["A", "B", "F"],
            ["A", "B", "C"],
            [("A", 3), ("B", 2)],
            ["A", "B"],
        ),
    ],
    ids=[
        "defaults",
        "disable-both",
        "disabled-filter-keeps-score-companion",
        "reweight-and-add",
        "disable-all-scores",
        "re-enable-moves-last",
        "disable-companions",
        "add-pre-filter",
    ],
)
def test_profile_merges_over_defaults(
    plugins: dict[str, Any],
    filters: list[str],
    pre_filters: list[str],
    scores: list[tuple[str, int]],
    pre_scores: list[str],
) -> None:
    """Upstream mergePluginSet per point; PreFilter/PreScore follow their Filter/Score plugins."""
    fw = build(plugins, defaults=DEFAULTS)
    assert names(fw.filter) == filters
    assert names(fw.pre_filter) == pre_filters
    assert [(p.name, w) for p, w in fw.score] == scores
    assert names(fw.pre_score) == pre_scores


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("plugins", "plugin_config", "defaults", "message"),
    [
        (
            {"filter": {"enabled": [{"name": "Nope"}]}},
            [],
            MINIMAL,
            "unknown filter plugin 'Nope'; known: A, B, Bind, C, F, Sort",
        ),
        ({"postBind": {"enabled": [{"name": "Nope"}]}}, [], MINIMAL, "unknown postBind plugin 'Nope'"),
        ({"score": {"enabled": [{"name": "F"}]}}, [], MINIMAL, "plugin 'F' does not implement score"),
        ({"preFilter": {"enabled": [{"name": "F"}]}}, [], MINIMAL, "plugin 'F' does not implement preFilter"),
        ({"bind": {"enabled": [{"name": "F"}]}}, [], MINIMAL, "plugin 'F' does not implement bind"),
        (
            {},
            [],
            Plugins.model_validate(
                {**MINIMAL.model_dump(by_alias=True), "filter": {"enabled": [{"name": "A"}, {"name": "A"}]}}
            ),
            "plugin 'A' is listed twice in filter",
        ),
        (
            {"queueSort": {"enabled": [{"name": "A"}]}},
            [],
            MINIMAL,
            "queueSort needs exactly one plugin, got 2",
        ),
        (
            {"queueSort": {"disabled": [{"name": "*"}]}},
            [],
            MINIMAL,
            "queueSort needs exactly one plugin, got 0",
        ),
        ({"bind": {"disabled": [{"name": "Bind"}]}}, [], MINIMAL, "at least one bind plugin is needed"),
        (
            {},
            [{"name": "A", "args": {"level": -1}}],
            MINIMAL,
            "A args.level: Input should be greater than or equal to 0",
        ),
        ({}, [{"name": "B", "args": {"level": 1}}], MINIMAL, "plugin 'B' takes no args"),
        ({}, [{"name": "Nope"}], MINIMAL, "unknown plugin 'Nope'; known: A, B, Bind, C, F, Sort"),
    ],
    ids=[
        "unknown-filter",
        "unknown-post-bind",
        "not-a-score-plugin",
        "not-a-pre-filter-plugin",
        "not-a-binder",
        "duplicate",
        "two-queue-sorts",
        "no-queue-sort",
        "no-binder",
        "bad-args",
        "args-for-argless",
        "unknown-plugin-config",
    ],
)
def test_new_framework_refuses(
    plugins: dict[str, Any], plugin_config: list[Any], defaults: Plugins, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        build(plugins, plugin_config, defaults=defaults)


def test_plugin_config_args_reach_the_factory() -> None:
    made: dict[str, Everything] = {}
    build(
        {"filter": {"enabled": [{"name": "A"}]}},
        [{"name": "A", "args": {"level": 4}}],
        registry=fake_registry(made),
    )
    assert made["A"].args == AllArgs(level=4)


# --------------------------------------------------------------------------- out-of-tree


def test_out_of_tree_plugin_merged_and_enabled() -> None:
    """As ``app.WithPlugin``: an out-of-tree plugin joins the in-tree registry and the profile."""
    registry = plugin_registry(with_underlay_ip(UnderlayIPDeps(pool_cache(), None)))  # type: ignore[arg-type]
    registry.merge(with_plugin("Extra", lambda args, handle: Everything("Extra", args), AllArgs))
    raw = {
        "plugins": {"filter": {"enabled": [{"name": "Extra"}]}},
        "pluginConfig": [{"name": "Extra", "args": {"level": 2}}],
    }
    fw = new_framework(registry, profile_config(raw, registry), default_plugins())
    extra = fw.filter[-1]
    assert isinstance(extra, Everything) and extra.name == "Extra" and extra.args == AllArgs(level=2)
    assert extra in fw.pre_filter


# --------------------------------------------------------------------------- PreScore, PostFilter at run time


@pytest.mark.parametrize(
    ("pre_scores", "skip", "scored"),
    [
        ({"enabled": []}, Status.skip(), ["B"]),
        ({"enabled": []}, Status.success(), ["A", "B"]),
        ({"disabled": [{"name": "A"}]}, Status.skip(), ["A", "B"]),
    ],
    ids=["skip-leaves-out-score", "success-keeps-score", "not-at-pre-score-not-called"],
)
def test_pre_score_called_through_the_protocol(
    pre_scores: dict[str, Any], skip: Status, scored: list[str]
) -> None:
    made: dict[str, Everything] = {}
    fw = build(
        {"score": {"enabled": [{"name": "A"}, {"name": "B"}]}, "preScore": pre_scores},
        registry=fake_registry(made),
    )
    made["A"].pre_score_status = skip
    node_list = [NodeInfo(name="n1"), NodeInfo(name="n2")]
    per_plugin = fw.run_scores(CycleState(), POD, node_list)
    assert list(per_plugin) == scored
    assert ("preScore" in made["A"].calls) == ("A" in names(fw.pre_score))
    assert made["B"].calls[:1] == ["preScore"]


async def test_post_filter_runs_in_order_and_merges_rejections() -> None:
    made: dict[str, Everything] = {}
    fw = build({"postFilter": {"enabled": [{"name": "A"}, {"name": "B"}]}}, registry=fake_registry(made))
    result, st = await fw.run_post_filter(CycleState(), POD, Diagnosis(num_all_nodes=1))
    assert result is None
    assert st.code is Code.UNSCHEDULABLE
    assert st.reasons == ("A found no victims", "B found no victims")
    assert made["A"].calls == made["B"].calls == ["postFilter"]


class _Binder:
    async def bind(self, pod: PodInfo, node: str, annotations: dict[str, str]) -> None:
        pass


def test_the_handles_client_reaches_default_binder() -> None:
    binder: Binder = _Binder()
    fw = new_framework(
        plugin_registry(with_underlay_ip(UnderlayIPDeps(pool_cache(), None))),  # type: ignore[arg-type]
        SchedulerConfiguration().profile,
        default_plugins(),
        client=binder,  # type: ignore[arg-type]
    )
    assert getattr(fw.bind[0], "binder", None) is binder


@dataclass
class OnePodPerNode:
    """Rejects a node that has a pod already; keeps the handle its factory got."""

    name: str
    handle: Handle

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return Status.unschedulable("node is taken", plugin=self.name) if node.pods else Status.success()


@dataclass
class Nominated:
    pods: dict[str, list[PodInfo]]

    def nominated_pods_for_node(self, node: str) -> list[PodInfo]:
        return self.pods.get(node, [])

    def any_nominated(self) -> bool:
        return any(self.pods.values())


def test_the_handle_a_factory_gets_is_the_framework_whole_from_its_construction() -> None:
    """As upstream's frameworkImpl: the factory's handle is the framework new_framework
    returns, with the client, recorder, volumes and waiting pods it was made with, nothing
    bound to it afterwards; its what-if runs see the profile's filters and the nominated
    pods the queue (the nominator, set as upstream's SetPodNominator) knows."""
    seen: dict[str, Any] = {}

    def new(args: None, handle: Handle) -> OnePodPerNode:
        seen.update(client=handle.client, recorder=handle.recorder, volumes=handle.volumes)
        seen["waiting_pods"] = handle.waiting_pods
        return OnePodPerNode("One", handle)

    registry = fake_registry()
    registry.register("One", new)
    client, recorder, volumes = object(), object(), MapVolumeListers()
    fw = new_framework(
        registry,
        profile_config({"plugins": {"filter": {"enabled": [{"name": "One"}]}}}),
        MINIMAL,
        client=client,  # type: ignore[arg-type]
        events=recorder,  # type: ignore[arg-type]
        volumes=volumes,
    )
    plugin = fw.filter[0]
    assert isinstance(plugin, OnePodPerNode) and plugin.handle is fw
    assert seen == {
        "client": client,
        "recorder": recorder,
        "volumes": volumes,
        "waiting_pods": fw.waiting_pods,
    }
    node = NodeInfo(name="n1")
    low = PodInfo(uid="low", namespace="ns", name="low", priority=1)
    high = PodInfo(uid="high", namespace="ns", name="high", priority=5)
    assert plugin.handle.run_filters_with_nominated_pods(CycleState(), low, node).is_success()
    fw.set_pod_nominator(Nominated({"n1": [high]}))
    st = plugin.handle.run_filters_with_nominated_pods(CycleState(), low, node)
    assert st.code is Code.UNSCHEDULABLE and st.reasons == ("node is taken",)
    assert plugin.handle.run_filters_with_nominated_pods(
        CycleState(), PodInfo(uid="top", namespace="ns", name="top", priority=9), node
    ).is_success()


def test_the_handle_activates_through_the_activator_set_after_the_queue_is_made() -> None:
    """``activate`` moves pods through the scheduling queue, set on the framework once the
    queue (made from the profile) exists; before that it does nothing."""
    fw = build({})
    activated: list[set[str]] = []
    fw.activate({"u1"})

    class Activator:
        def activate(self, uids: set[str]) -> None:
            activated.append(uids)

    fw.set_pod_activator(Activator())
    fw.activate({"u2"})
    assert activated == [{"u2"}]


def test_the_handle_counts_preemption_only_with_a_recorder_that_counts_it() -> None:
    class Timings:
        def observe_extension_point(self, point: str, status: str, seconds: float) -> None:
            pass

        def observe_plugin(self, plugin: str, point: str, status: str, seconds: float) -> None:
            pass

    class Counting(Timings):
        def observe_preemption_attempt(self) -> None:
            pass

        def observe_preemption_victims(self, victims: int) -> None:
            pass

    timed = Framework(scheduler_name="s", queue_sort=PrioritySort(), metrics_recorder=Timings())
    counting = Counting()
    counted = Framework(scheduler_name="s", queue_sort=PrioritySort(), metrics_recorder=counting)
    assert (timed.metrics, counted.metrics) == (None, counting)


@pytest.mark.parametrize(
    ("profiles", "configured", "want"),
    [(None, None, None), (None, 30, 30), (70, 30, 70), (0, 30, 0)],
    ids=["neither", "the-configurations", "the-profiles-overrides-it", "even-0-overrides-it"],
)
def test_the_profiles_percentage_of_nodes_to_score_overrides_the_configurations(
    profiles: int | None, configured: int | None, want: int | None
) -> None:
    raw = {"plugins": {}, "percentageOfNodesToScore": profiles}
    fw = new_framework(fake_registry(), profile_config(raw), MINIMAL, percentage_of_nodes_to_score=configured)
    assert fw.percentage_of_nodes_to_score == want
