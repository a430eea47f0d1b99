"""framework/registry: plugin name → new(args, handle), merged with out-of-tree registrations."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import Field

from ipscheduler.framework.interface import Binder, Handle
from ipscheduler.framework.registry import PluginArgs, Registry, with_plugin
from ipscheduler.plugins import interpodaffinity, noderesources
from ipscheduler.plugins.registry import new_in_tree_registry


@dataclass(frozen=True)
class FakeHandle:
    binder: Binder


HANDLE: Handle = FakeHandle(binder=None)  # type: ignore[arg-type]


@dataclass
class Named:
    name: str
    args: Any = None


class FakeArgs(PluginArgs):
    size: int = Field(default=1, ge=1)
    multus_network: str | None = Field(default=None, alias="multusNetwork")


def registry(**plugins: type[PluginArgs] | None) -> Registry:
    r = Registry()
    for name, args in plugins.items():
        r.register(name, functools.partial(make_named, name), args)
    return r


def make_named(name: str, args: Any, handle: Handle) -> Named:
    return Named(name, args)


# --------------------------------------------------------------------------- register / merge


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: registry(A=None).register("A", Named, None), "a plugin named 'A' already exists"),
        (lambda: registry(A=None).merge(registry(B=None, A=None)), "a plugin named 'A' already exists"),
        (lambda: registry(A=None).unregister("B"), "no plugin named 'B' exists"),
        (lambda: Registry().register("", Named), "a plugin needs a name"),
        (
            lambda: new_in_tree_registry().merge(with_plugin("NodePorts", Named)),
            "a plugin named 'NodePorts' already exists",
        ),
    ],
    ids=["register-twice", "merge-duplicate", "unregister-unknown", "no-name", "out-of-tree-shadows-in-tree"],
)
def test_registry_refuses(build: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()


def test_failed_merge_adds_nothing() -> None:
    r = registry(A=None)
    with pytest.raises(ValueError):
        r.merge(registry(B=None, A=None))
    assert r.names() == ["A"]


def test_out_of_tree_registration_is_merged() -> None:
    """upstream app.WithPlugin(name, New): one registry per out-of-tree plugin, merged in."""
    r = new_in_tree_registry()
    in_tree = len(r)
    r.merge(with_plugin("Extra", lambda args, handle: Named("Extra", args), FakeArgs))
    assert "Extra" in r and len(r) == in_tree + 1
    plugin = r.new_plugin("Extra", {"size": 3}, HANDLE)
    assert isinstance(plugin, Named) and plugin.args == FakeArgs(size=3)


# --------------------------------------------------------------------------- args


@pytest.mark.parametrize(
    ("name", "raw", "expected"),
    [
        ("A", None, FakeArgs()),
        ("A", {}, FakeArgs()),
        ("A", {"size": 5, "multusNetwork": "x"}, FakeArgs(size=5, multus_network="x")),
        ("B", None, None),
        ("B", {}, None),
        ("InterPodAffinity", None, interpodaffinity.InterPodAffinityArgs()),
        (
            "InterPodAffinity",
            {"hardPodAffinityWeight": 0, "ignorePreferredTermsOfExistingPods": True},
            interpodaffinity.InterPodAffinityArgs(
                hard_pod_affinity_weight=0, ignore_preferred_terms_of_existing_pods=True
            ),
        ),
        (
            "NodeResourcesLeastAllocated",
            {"resources": [{"name": "cpu", "weight": 3}]},
            noderesources.ResourcesArgs(resources=[noderesources.ResourceSpec(name="cpu", weight=3)]),
        ),
    ],
    ids=[
        "none",
        "empty",
        "camel-case",
        "no-model-none",
        "no-model-empty",
        "in-tree-default",
        "in-tree",
        "resources",
    ],
)
def test_args_are_validated_into_the_model(name: str, raw: dict[str, Any] | None, expected: Any) -> None:
    r = new_in_tree_registry()
    r.merge(registry(A=FakeArgs, B=None))
    assert r.validate_args(name, raw) == expected


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        ("A", {"size": 0}, "A args.size: Input should be greater than or equal to 1"),
        ("A", {"colour": "red"}, "A args.colour: Extra inputs are not permitted"),
        ("B", {"size": 1}, "plugin 'B' takes no args"),
        ("C", {}, "unknown plugin 'C'; known: A, B"),
        ("InterPodAffinity", {"hardPodAffinityWeight": 101}, "InterPodAffinity args.hardPodAffinityWeight"),
        ("NodeResourcesBalancedAllocation", {"resources": []}, "args.resources"),
    ],
    ids=["range", "unknown-key", "takes-none", "unknown-plugin", "in-tree-range", "in-tree-empty"],
)
def test_bad_args_name_the_plugin_and_field(name: str, raw: dict[str, Any], message: str) -> None:
    r = registry(A=FakeArgs, B=None) if name in ("A", "B", "C") else new_in_tree_registry()
    with pytest.raises(ValueError, match=message):
        r.new_plugin(name, raw, HANDLE)


def test_require_lists_the_known_names_for_a_point() -> None:
    with pytest.raises(ValueError, match=r"^unknown score plugin 'Nope'; known: A, B$"):
        registry(A=None, B=None).require("Nope", "score")


def test_factory_must_make_a_plugin_of_its_name() -> None:
    r = Registry()
    r.register("A", lambda args, handle: Named("B"))
    with pytest.raises(ValueError, match="the factory of plugin 'A' made a plugin named 'B'"):
        r.new_plugin("A", None, HANDLE)
