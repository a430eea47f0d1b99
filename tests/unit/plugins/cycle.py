"""One plugin through the extension points of one scheduling cycle, as the framework runs it.

Shared by the plugin tests; each plugin's own cases stay in its ``test_<plugin>.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any

import pytest

from ipscheduler.framework import events
from ipscheduler.framework.interface import Code, CycleState, QueueingHint, Status
from ipscheduler.framework.types import NodeInfo, PodInfo, Snapshot

# --------------------------------------------------------------------------- the plugin itself


def assert_plugin(plugin: Any, name: str, *kinds: type) -> None:
    """``plugin`` is named ``name`` and implements every extension point of ``kinds``."""
    assert plugin.name == name
    for kind in kinds:
        assert isinstance(plugin, kind)


# --------------------------------------------------------------------------- filter and score


def run_filter(plugin: Any, pod: PodInfo, node: NodeInfo) -> Status:
    """Filter alone, in a fresh cycle."""
    return plugin.filter(CycleState(), pod, node)


def run_score(plugin: Any, pod: PodInfo, nodes: list[NodeInfo]) -> dict[str, int]:
    """Score + NormalizeScore over ``nodes`` in one cycle, without PreFilter."""
    state = CycleState()
    scores = {n.name: plugin.score(state, pod, n) for n in nodes}
    plugin.normalize_score(state, pod, scores)
    return scores


def by_name(nodes: list[NodeInfo], snapshot: bool = False) -> Mapping[str, NodeInfo]:
    """The nodes as a plain mapping, or as the cache's :class:`Snapshot` (with its list of
    nodes that have pods with affinity terms)."""
    if not snapshot:
        return {n.name: n for n in nodes}
    snap = Snapshot()
    for node in nodes:
        snap.put(node)
    return snap


def cycle_filter(
    plugin: Any, pod: PodInfo, nodes: list[NodeInfo], snapshot: bool = False
) -> tuple[Status, dict[str, Status]]:
    """PreFilter over all nodes, then Filter each node with the same CycleState."""
    state = CycleState()
    pre = plugin.pre_filter(state, pod, by_name(nodes, snapshot))
    return pre, {n.name: plugin.filter(state, pod, n) for n in nodes}


def cycle_score(
    plugin: Any,
    pod: PodInfo,
    nodes: list[NodeInfo],
    feasible: Iterable[str] | None = None,
    snapshot: bool = False,
) -> dict[str, int]:
    """PreFilter over all nodes, Score + NormalizeScore over the feasible ones."""
    state = CycleState()
    plugin.pre_filter(state, pod, by_name(nodes, snapshot))
    names = set(feasible) if feasible is not None else {n.name for n in nodes}
    scores = {n.name: plugin.score(state, pod, n) for n in nodes if n.name in names}
    plugin.normalize_score(state, pod, scores)
    return scores


def assert_statuses(
    got: dict[str, Status], want: Mapping[str, str | None], plugin: str, code_of: Mapping[str, Code]
) -> None:
    """Each node's status is success (None) or ``plugin``'s rejection with that one reason,
    at the code ``code_of`` gives the reason."""
    for name, reason in want.items():
        st = got[name]
        if reason is None:
            assert st.is_success(), f"{name}: {st}"
        else:
            assert st.code is code_of[reason], f"{name}: {st}"
            assert st.reasons == (reason,), f"{name}: {st}"
            assert st.plugin == plugin


def pre_point_code(plugin: Any, point: str, fields: dict[str, Any]) -> Code:
    """The code of ``plugin``'s ``pre_filter`` or ``pre_score`` for a pod with these
    PodInfo ``fields`` on one Ready node (Skip: the pod gives it nothing to do)."""
    pod = dataclasses.replace(PodInfo(uid="u1", namespace="ns", name="p1"), **fields)
    node = NodeInfo(name="n1", ready=True)
    arg: Any = {"n1": node} if point == "pre_filter" else [node]
    code: Code = getattr(plugin, point)(CycleState(), pod, arg).code
    return code


# --------------------------------------------------------------------------- queueing hints

HINT_NODE = NodeInfo(
    name="n1", labels={"zone": "a"}, ready=True, allocatable={"cpu": Decimal(4), "pods": Decimal(110)}
)
"""The node the queueing-hint cases vary (``dataclasses.replace``)."""
HINT_POD = PodInfo(uid="u", namespace="ns", name="p")
"""A pod that asks for nothing in particular."""


def ask(plugin: Any, event: Any, p: PodInfo, old: Any, new: Any) -> QueueingHint:
    """What ``plugin`` says about ``event`` (None: the node update from ``old`` to ``new``);
    SKIP when it did not register the event."""
    if event is None:
        event = events.node_update_event(old, new)
        assert event is not None
    for reg in plugin.events_to_register():
        if event.matches(reg.event):
            if reg.queueing_hint_fn is None:
                return QueueingHint.QUEUE
            got = reg.queueing_hint_fn(p, old, new)
            if got is QueueingHint.QUEUE:
                return got
    return QueueingHint.SKIP


def hint_cases(cases: list[tuple[Any, ...]]) -> list[Any]:
    """``(id, event, pod, old, new, expected)`` rows as pytest params with their ids."""
    return [pytest.param(*case[1:], id=case[0]) for case in cases]


def hints_test(plugin: Callable[[], Any], cases: list[tuple[Any, ...]]) -> Callable[..., None]:
    """The test that ``plugin()`` answers each ``(id, event, pod, old, new, expected)`` row of
    ``cases`` (:func:`ask`); a plugin's test module binds it to a ``test_`` name."""

    @pytest.mark.parametrize(("event", "p", "old", "new", "expected"), hint_cases(cases))
    def test(event: Any, p: PodInfo, old: Any, new: Any, expected: QueueingHint) -> None:
        assert ask(plugin(), event, p, old, new) is expected

    return test


def assert_fit(st: Status, fits: bool, reason: str, plugin: str) -> None:
    """``st`` is a success when ``fits``, else Unschedulable with ``reason`` from ``plugin``."""
    if fits:
        assert st.is_success(), st
    else:
        assert (st.code, st.reasons, st.plugin) == (Code.UNSCHEDULABLE, (reason,), plugin)
