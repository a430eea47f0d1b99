"""``--config``: the scheduler configuration file, validated by pydantic.

Shaped like kube-scheduler's KubeSchedulerConfiguration
(``staging/src/k8s.io/kube-scheduler/config/v1/types.go``): one profile with
``plugins.<extensionPoint>.enabled/disabled`` for every extension point and
``pluginConfig`` args per plugin. Example::

    apiVersion: ipscheduler.io/v1alpha1
    kind: IPSchedulerConfiguration
    percentageOfNodesToScore: 0        # adaptive, as kube-scheduler (optional)
    profiles:
      - schedulerName: ip-scheduler
        plugins:
          filter:
            disabled: [{name: NodePorts}]
          score:
            enabled:
              - {name: UnderlayIP, weight: 5}
            disabled: [{name: NodeResourcesBalancedAllocation}]
        pluginConfig:
          - name: UnderlayIP
            args: {strategy: binpack, multusNetwork: underlay}

This module is the shape only. Plugin names and each plugin's ``args`` are
checked against a :class:`~ipscheduler.framework.registry.Registry` when one
is given in the validation context (:func:`load` always gives one); the
framework builder (:func:`ipscheduler.framework.building.new_framework`)
checks them again. Unknown keys, unknown plugin names, duplicates and bad
weights or args are errors with the field path in the message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator

from ipscheduler.framework.registry import Registry

REGISTRY_CONTEXT = "registry"
"""Key of the :class:`Registry` in the pydantic validation context (``model_validate(raw,
context={REGISTRY_CONTEXT: registry})``); without it, names and args are not checked."""

EXTENSION_POINTS: tuple[str, ...] = (
    "queueSort",
    "preFilter",
    "filter",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
    "preBind",
    "bind",
    "postBind",
)
"""The configurable extension points, by their name in the file, in the order they run."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _registry(info: ValidationInfo) -> Registry | None:
    context = info.context
    found = context.get(REGISTRY_CONTEXT) if isinstance(context, dict) else None
    return found if isinstance(found, Registry) else None


class PluginRef(_Strict):
    """A plugin by name, with a score weight (score extension point only)."""

    name: str = Field(min_length=1)
    weight: int | None = Field(default=None, ge=0, le=100)


class PluginSet(_Strict):
    """Plugins enabled (added, or re-weighted) and disabled (``*`` disables all defaults)."""

    enabled: list[PluginRef] = Field(default_factory=list)
    disabled: list[PluginRef] = Field(default_factory=list)


class Plugins(_Strict):
    """Per extension point overrides of the default plugins (upstream ``Plugins``)."""

    queue_sort: PluginSet = Field(default_factory=PluginSet, alias="queueSort")
    pre_filter: PluginSet = Field(default_factory=PluginSet, alias="preFilter")
    filter: PluginSet = Field(default_factory=PluginSet)
    post_filter: PluginSet = Field(default_factory=PluginSet, alias="postFilter")
    pre_score: PluginSet = Field(default_factory=PluginSet, alias="preScore")
    score: PluginSet = Field(default_factory=PluginSet)
    reserve: PluginSet = Field(default_factory=PluginSet)
    permit: PluginSet = Field(default_factory=PluginSet)
    pre_bind: PluginSet = Field(default_factory=PluginSet, alias="preBind")
    bind: PluginSet = Field(default_factory=PluginSet)
    post_bind: PluginSet = Field(default_factory=PluginSet, alias="postBind")

    def point(self, name: str) -> PluginSet:
        """The set of extension point ``name`` (one of :data:`EXTENSION_POINTS`).
        Raises KeyError for another name."""
        for field_name, info in type(self).model_fields.items():
            if (info.alias or field_name) == name:
                found: PluginSet = getattr(self, field_name)
                return found
        raise KeyError(name)


class PluginConfig(_Strict):
    """One ``pluginConfig`` entry: a plugin's args, validated by its registration."""

    name: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known_args(self, info: ValidationInfo) -> PluginConfig:
        registry = _registry(info)
        if registry is not None:
            registry.validate_args(self.name, self.args)
        return self


class ProfileConfig(_Strict):
    """One scheduling profile: its schedulerName, plugins and their args."""

    scheduler_name: str = Field(default="ip-scheduler", alias="schedulerName", min_length=1)
    percentage_of_nodes_to_score: int | None = Field(
        default=None, ge=0, le=100, alias="percentageOfNodesToScore"
    )
    """Overrides the configuration's for this profile (upstream ``KubeSchedulerProfile``)."""
    plugins: Plugins = Field(default_factory=Plugins)
    plugin_config: list[PluginConfig] = Field(default_factory=list, alias="pluginConfig")

    @model_validator(mode="after")
    def _valid_plugins(self, info: ValidationInfo) -> ProfileConfig:
        """Names known (with a registry), weights at score only, no plugin twice in one
        list nor configured twice (``pkg/scheduler/apis/config/validation/validation.go``)."""
        registry = _registry(info)
        for point in EXTENSION_POINTS:
            ps = self.plugins.point(point)
            for listed in (ps.enabled, ps.disabled):
                seen: set[str] = set()
                for ref in listed:
                    if registry is not None and not (ref.name == "*" and listed is ps.disabled):
                        registry.require(ref.name, point)
                    if ref.weight is not None and point != "score":
                        raise ValueError(f"plugin {ref.name!r}: weight is only valid for score plugins")
                    if ref.name in seen:
                        raise ValueError(f"plugin {ref.name!r} is listed twice in {point}")
                    seen.add(ref.name)
        names = [pc.name for pc in self.plugin_config]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"pluginConfig: plugin {name!r} is configured twice")
        return self

    def plugin_args(self) -> dict[str, dict[str, Any]]:
        """Plugin name → its ``pluginConfig`` args (plugins without an entry are absent)."""
        return {pc.name: pc.args for pc in self.plugin_config}


class SchedulerConfiguration(_Strict):
    """The whole file."""

    api_version: Literal["ipscheduler.io/v1alpha1"] = Field(
        default="ipscheduler.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["IPSchedulerConfiguration"] = "IPSchedulerConfiguration"
    percentage_of_nodes_to_score: int | None = Field(
        default=None, ge=0, le=100, alias="percentageOfNodesToScore"
    )
    """Per cent of the nodes a cycle looks for feasible ones among, once there are 100 or
    more (0 or unset: adaptive, 50 % - nodes/125, at least 5 %; see
    :func:`ipscheduler.framework.runtime.num_feasible_nodes_to_find`)."""
    profiles: list[ProfileConfig] = Field(
        default_factory=lambda: [ProfileConfig()], min_length=1, max_length=1
    )

    @property
    def profile(self) -> ProfileConfig:
        return self.profiles[0]

    @classmethod
    def defaults(cls, scheduler_name: str = "ip-scheduler") -> SchedulerConfiguration:
        """The configuration without a file: every default, one profile for ``scheduler_name``
        (``--scheduler-name``). The one place the defaults are built."""
        return cls(profiles=[ProfileConfig.model_validate({"schedulerName": scheduler_name})])


def merge_plugin_set(defaults: PluginSet, custom: PluginSet) -> list[PluginRef]:
    """The plugins enabled at one extension point: ``defaults`` overridden by ``custom``.

    Upstream ``mergePluginSet`` (``pkg/scheduler/apis/config/v1/default_plugins.go``):
    defaults in their order, minus the disabled ones (all with ``*``); a default
    that ``custom`` enables again is replaced in place (a new weight keeps its
    position); the other plugins ``custom`` enables follow, in their order.
    """
    off = {r.name for r in custom.disabled}
    mine = {r.name: r for r in custom.enabled}
    out: list[PluginRef] = []
    replaced: set[str] = set()
    if "*" not in off:
        for ref in defaults.enabled:
            if ref.name in off:
                continue
            if ref.name in mine:
                replaced.add(ref.name)
            out.append(mine.get(ref.name, ref))
    out += [r for r in custom.enabled if r.name not in replaced]
    return out


class ConfigError(Exception):
    """The configuration file is unreadable or invalid; the message says where."""


def load(path: str | Path, registry: Registry) -> SchedulerConfiguration:
    """Read and validate a configuration file, plugin names and args against ``registry``.

    Raises ConfigError with the offending field, e.g.
    ``config.yaml: profiles.0: Value error, unknown score plugin 'Nope'; known: ...``.
    """
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: {e}") from e
    try:
        return SchedulerConfiguration.model_validate(raw or {}, context={REGISTRY_CONTEXT: registry})
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "(top level)"
        raise ConfigError(f"{path}: {where}: {first['msg']}") from e
