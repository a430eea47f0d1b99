"""framework/events: how a node or assigned-pod update is classified (its action flags)."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any

import pytest

from ipscheduler.framework import events
from ipscheduler.framework.interface import ActionType
from ipscheduler.framework.types import NodeInfo, PodInfo

N = NodeInfo(
    name="n1", labels={"zone": "a"}, ready=True, allocatable={"cpu": Decimal(4), "pods": Decimal(110)}
)
P = PodInfo(uid="u", namespace="ns", name="p")
P_CPU8 = PodInfo(uid="u", namespace="ns", name="p", requests={"cpu": Decimal(8)})


def _replace(obj: Any, **kw: Any) -> Any:
    return dataclasses.replace(obj, **kw)


def test_an_unchanged_node_sends_no_update_event() -> None:
    assert events.node_update_event(N, _replace(N)) is None


@pytest.mark.parametrize(
    ("old", "new", "action"),
    [
        (P, PodInfo(uid="u", namespace="ns", name="p", labels={"app": "x"}), ActionType.UPDATE_POD_LABEL),
        (P_CPU8, P, ActionType.UPDATE_POD_SCALE_DOWN),
        (P, _replace(P, resource_version="2"), ActionType.UPDATE_OTHER),
        (P, P, None),
    ],
    ids=["labels", "scale-down", "other", "unchanged"],
)
def test_assigned_pod_update_event(old: PodInfo, new: PodInfo, action: ActionType | None) -> None:
    event = events.assigned_pod_update_event(old, new)
    assert (event.action_type if event else None) == action
