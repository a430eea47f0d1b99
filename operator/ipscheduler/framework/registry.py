"""Registry: plugin name → factory ``new(args, handle)``.

Mirrors ``pkg/scheduler/framework/runtime/registry.go``: ``register`` refuses
a name that is already there, ``merge`` adds the plugins of another registry
(also refusing duplicates), which is how an out-of-tree plugin joins the
in-tree ones: ``with_plugin(NAME, new)`` is upstream's
``app.WithPlugin(name, factory)`` (``cmd/kube-scheduler/app/server.go``).

Unlike upstream, where ``pluginConfig`` args are decoded through the
configuration scheme, a registration here carries the pydantic model of its
plugin's args (a :class:`PluginArgs`), so the registry validates a plugin's
``pluginConfig`` args by name, with errors naming the field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ipscheduler.framework.interface import Handle, Plugin

PluginFactory = Callable[[Any, Handle], Plugin]
"""``new(args, handle) -> plugin``: ``args`` is the validated :class:`PluginArgs` of the
registration's model, or None when the plugin declares none."""


class PluginArgs(BaseModel):
    """Base of a plugin's ``pluginConfig`` args model: unknown keys are errors, fields
    are snake_case in Python and camelCase (their alias) in the file."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


@dataclass(frozen=True)
class Registration:
    """One plugin: its factory, and the model of its args (None: it takes none)."""

    new: PluginFactory
    args: type[PluginArgs] | None = None


class Registry:
    """Plugin name → :class:`Registration` (upstream ``runtime.Registry``)."""

    def __init__(self) -> None:
        self._plugins: dict[str, Registration] = {}

    def register(self, name: str, new: PluginFactory, args: type[PluginArgs] | None = None) -> None:
        """Add plugin ``name``. Raises ValueError if a plugin of that name exists (``Register``)."""
        if not name:
            raise ValueError("a plugin needs a name")
        if name in self._plugins:
            raise ValueError(f"a plugin named {name!r} already exists")
        self._plugins[name] = Registration(new, args)

    def unregister(self, name: str) -> None:
        """Remove plugin ``name``. Raises ValueError if there is none (``Unregister``)."""
        if self._plugins.pop(name, None) is None:
            raise ValueError(f"no plugin named {name!r} exists")

    def merge(self, other: Registry) -> None:
        """Add every plugin of ``other``. Raises ValueError on a name both have (``Merge``);
        nothing is added then."""
        for name in other:
            if name in self._plugins:
                raise ValueError(f"a plugin named {name!r} already exists")
        self._plugins.update(other._plugins)

    def __contains__(self, name: object) -> bool:
        return name in self._plugins

    def __iter__(self) -> Iterator[str]:
        return iter(self._plugins)

    def __len__(self) -> int:
        return len(self._plugins)

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._plugins)

    def require(self, name: str, point: str = "") -> Registration:
        """The registration of ``name``. Raises ValueError naming ``point`` (an extension
        point, e.g. ``"score"``) and listing the known names when there is none."""
        reg = self._plugins.get(name)
        if reg is None:
            where = f"{point} " if point else ""
            raise ValueError(f"unknown {where}plugin {name!r}; known: {', '.join(self.names())}")
        return reg

    def validate_args(self, name: str, raw: Mapping[str, Any] | None = None) -> PluginArgs | None:
        """``raw`` (a ``pluginConfig`` entry's args; None or ``{}``: the defaults) as the
        plugin's args model, or None when it declares none.

        Raises ValueError for an unknown plugin, args given to a plugin that takes
        none, or invalid args; the message names the plugin and the field, e.g.
        ``UnderlayIP args.strategy: Input should be 'spread' or 'binpack'``.
        """
        model = self.require(name).args
        if model is None:
            if raw:
                raise ValueError(f"plugin {name!r} takes no args")
            return None
        try:
            return model.model_validate(dict(raw or {}))
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(["args", *(str(x) for x in first["loc"])])
            msg = str(first["msg"]).removeprefix("Value error, ")
            raise ValueError(f"{name} {where}: {msg}") from e

    def new_plugin(self, name: str, raw_args: Mapping[str, Any] | None, handle: Handle) -> Plugin:
        """Validate ``raw_args`` and call the factory of ``name``.

        Raises ValueError as :meth:`validate_args` does, or when the factory returns a
        plugin whose ``name`` is not ``name`` (the framework keys plugins by name).
        """
        args = self.validate_args(name, raw_args)
        plugin = self._plugins[name].new(args, handle)
        if plugin.name != name:
            raise ValueError(f"the factory of plugin {name!r} made a plugin named {plugin.name!r}")
        return plugin


def with_plugin(name: str, new: PluginFactory, args: type[PluginArgs] | None = None) -> Registry:
    """A registry of one out-of-tree plugin, to :meth:`Registry.merge` into the in-tree one
    (upstream ``app.WithPlugin(name, factory)``)."""
    registry = Registry()
    registry.register(name, new, args)
    return registry
