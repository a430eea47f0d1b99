"""plugins/defaultbinder: DefaultBinder binds through the handle's binder."""

from __future__ import annotations

from typing import Any

from ipscheduler.framework.building import PluginHandle
from ipscheduler.framework.interface import BIND_ANNOTATIONS, CycleState
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.plugins import defaultbinder
from ipscheduler.plugins.registry import new_in_tree_registry


async def test_default_binder_binds_through_the_handle() -> None:
    calls: list[tuple[str, str, dict[str, str]]] = []

    class RecordingBinder:
        async def bind(self, pod: Any, node: str, annotations: dict[str, str]) -> None:
            calls.append((pod.key, node, annotations))

    plugin = new_in_tree_registry().new_plugin(defaultbinder.NAME, None, PluginHandle(RecordingBinder()))
    assert isinstance(plugin, defaultbinder.DefaultBinder)
    state = CycleState()
    state.write(BIND_ANNOTATIONS, {"a": "b"})
    st = await plugin.bind(state, PodInfo(uid="u", namespace="ns", name="p"), NodeInfo(name="n1"))
    assert st.is_success() and calls == [("ns/p", "n1", {"a": "b"})]
