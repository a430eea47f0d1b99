"""UnderlayIP's ``pluginConfig`` args, apart from the plugin as upstream keeps every
plugin's args apart (``pkg/scheduler/apis/config/types_pluginargs.go``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ipscheduler.framework.registry import PluginArgs
from ipscheduler.underlayip import multus

Strategy = Literal["spread", "binpack"]


class UnderlayIPArgs(PluginArgs):
    """``pluginConfig`` args of UnderlayIP: the address strategy and the Multus network
    (``[namespace/]name``, checked by :func:`ipscheduler.underlayip.multus.parse_network_name`)."""

    strategy: Strategy = "spread"
    multus_network: str | None = Field(default=None, alias="multusNetwork")

    @model_validator(mode="after")
    def _network_name(self) -> UnderlayIPArgs:
        if self.multus_network is not None:
            try:
                multus.parse_network_name(self.multus_network)
            except multus.MultusError as e:
                raise ValueError(str(e)) from e
        return self

    def defaulted(self, strategy: Strategy | None, multus_network: str | None) -> UnderlayIPArgs:
        """These args over the command line's (``--ip-strategy``, ``--multus-network``):
        the file's ``strategy`` if it sets one, else ``strategy`` (None: ``spread``); the
        file's ``multusNetwork`` if it names one, else ``multus_network``."""
        return UnderlayIPArgs(
            strategy=self.strategy if "strategy" in self.model_fields_set else (strategy or "spread"),
            multus_network=self.multus_network or multus_network,
        )
