"""``--config``: the scheduler configuration file, validated by pydantic.

Shaped like kube-scheduler's KubeSchedulerConfiguration
(``staging/src/k8s.io/kube-scheduler/config/v1/types.go``) where it makes
sense: one profile with ``plugins.<extensionPoint>.enabled/disabled`` and
``pluginConfig`` args. Example::

    apiVersion: ipscheduler.io/v1alpha1
    kind: IPSchedulerConfiguration
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

Unknown keys, unknown plugin names and bad weights are errors with the
field path in the message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ipscheduler.underlayip.multus import MultusError, parse_network_name


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class PluginRef(_Strict):
    """A plugin by name, with a score weight (score extension point only)."""

    name: str = Field(min_length=1)
    weight: int | None = Field(default=None, ge=0, le=100)


class PluginSet(_Strict):
    """Plugins enabled (added, or re-weighted) and disabled (``*`` disables all defaults)."""

    enabled: list[PluginRef] = Field(default_factory=list)
    disabled: list[PluginRef] = Field(default_factory=list)


class Plugins(_Strict):
    """Per extension point overrides of the default profile."""

    filter: PluginSet = Field(default_factory=PluginSet)
    score: PluginSet = Field(default_factory=PluginSet)


class UnderlayIPArgs(_Strict):
    """``pluginConfig`` of UnderlayIP."""

    strategy: Literal["spread", "binpack"] = "spread"
    multus_network: str | None = Field(default=None, alias="multusNetwork")

    @model_validator(mode="after")
    def _network_name(self) -> UnderlayIPArgs:
        if self.multus_network is not None:
            try:
                parse_network_name(self.multus_network)
            except MultusError as e:
                raise ValueError(str(e)) from e
        return self


class PluginConfig(_Strict):
    name: Literal["UnderlayIP"]
    args: UnderlayIPArgs = Field(default_factory=UnderlayIPArgs)


class ProfileConfig(_Strict):
    scheduler_name: str = Field(default="ip-scheduler", alias="schedulerName", min_length=1)
    plugins: Plugins = Field(default_factory=Plugins)
    plugin_config: list[PluginConfig] = Field(default_factory=list, alias="pluginConfig")


class SchedulerConfiguration(_Strict):
    """The whole file."""

    api_version: Literal["ipscheduler.io/v1alpha1"] = Field(
        default="ipscheduler.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["IPSchedulerConfiguration"] = "IPSchedulerConfiguration"
    profiles: list[ProfileConfig] = Field(
        default_factory=lambda: [ProfileConfig()], min_length=1, max_length=1
    )

    @model_validator(mode="after")
    def _known_plugins(self) -> SchedulerConfiguration:
        from ipscheduler.cmd.registry import FILTER_PLUGINS, SCORE_PLUGINS

        for point, known in (("filter", FILTER_PLUGINS), ("score", SCORE_PLUGINS)):
            ps: PluginSet = getattr(self.profiles[0].plugins, point)
            for ref in [*ps.enabled, *ps.disabled]:
                if ref.name not in known and not (ref.name == "*" and ref in ps.disabled):
                    raise ValueError(
                        f"unknown {point} plugin {ref.name!r}; known: {', '.join(sorted(known))}"
                    )
                if ref.weight is not None and point != "score":
                    raise ValueError(f"plugin {ref.name!r}: weight is only valid for score plugins")
        return self

    @property
    def profile(self) -> ProfileConfig:
        return self.profiles[0]

    @property
    def multus_network(self) -> str | None:
        """UnderlayIP's ``multusNetwork`` from pluginConfig (None: not set in the file)."""
        for pc in self.profile.plugin_config:
            if pc.name == "UnderlayIP":
                return pc.args.multus_network
        return None

    @property
    def strategy(self) -> Literal["spread", "binpack"] | None:
        """The UnderlayIP strategy from pluginConfig (None: not set in the file)."""
        for pc in self.profile.plugin_config:
            if pc.name == "UnderlayIP":
                return pc.args.strategy
        return None


class ConfigError(Exception):
    """The configuration file is unreadable or invalid; the message says where."""


def load(path: str | Path) -> SchedulerConfiguration:
    """Read and validate a configuration file. Raises ConfigError with the offending field."""
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: {e}") from e
    try:
        return SchedulerConfiguration.model_validate(raw or {})
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "(top level)"
        raise ConfigError(f"{path}: {where}: {first['msg']}") from e
