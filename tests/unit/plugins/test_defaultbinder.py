"""plugins/defaultbinder: DefaultBinder binds through the handle's client."""

from __future__ import annotations

from typing import Any

from ipscheduler.framework.interface import BIND_ANNOTATIONS, CycleState
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.plugins import defaultbinder
from ipscheduler.plugins.registry import new_in_tree_registry
from tests.unit.fakes import handle


async def test_default_binder_binds_through_the_handle() -> None:
    calls: list[tuple[str, str, dict[str, str]]] = []

    class RecordingBinder:
        async def bind(self, pod: Any, node: str, annotations: dict[str, str]) -> None:
            calls.append((pod.key, node, annotations))

    plugin = new_in_tree_registry().new_plugin(defaultbinder.NAME, None, handle(client=RecordingBinder()))
    assert isinstance(plugin, defaultbinder.DefaultBinder)
    state = CycleState()
    state.write(BIND_ANNOTATIONS, {"a": "b"})
    st = await plugin.bind(state, PodInfo(uid="u", namespace="ns", name="p"), NodeInfo(name="n1"))
    assert st.is_success() and calls == [("ns/p", "n1", {"a": "b"})]


async def test_without_a_client_the_bind_is_an_error_not_a_crash() -> None:
    """``explain`` and tests build profiles with no client: a bind there fails as an Error."""
    plugin = new_in_tree_registry().new_plugin(defaultbinder.NAME, None, handle())
    assert isinstance(plugin, defaultbinder.DefaultBinder)
    st = await plugin.bind(CycleState(), PodInfo(uid="u", namespace="ns", name="p"), NodeInfo(name="n1"))
    assert not st.is_success() and st.plugin == defaultbinder.NAME
    assert st.reasons == ("binding failed: no API client to bind with",)
