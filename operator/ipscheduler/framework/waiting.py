"""Pods held at Permit: the waiting pods of a profile (upstream ``waitingPodsMap`` and
``waitingPod``, ``pkg/scheduler/framework/runtime/waiting_pods_map.go``).

A Permit plugin that answers Wait (with a timeout) keeps the pod here: reserved and
assumed, its binding cycle blocked in :meth:`WaitingPod.wait`. Each plugin that made it
wait must :meth:`~WaitingPod.allow` it, or one :meth:`~WaitingPod.reject` (any plugin, or
the timeout of one that made it wait) sends it back through the failure handler, which
runs Unreserve. Plugins reach the map through their
:class:`~ipscheduler.framework.interface.Handle`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator, Mapping

from ipscheduler.framework.aio import KeyedTimers
from ipscheduler.framework.duration import format_duration
from ipscheduler.framework.status import Status
from ipscheduler.framework.types import PodInfo


class WaitingPod:
    """One pod held at Permit: the plugins it still waits for, each with its timer.

    Made by :meth:`WaitingPods.add` inside a running event loop. The outcome is a
    Status: success once every plugin allowed it; Unschedulable (with the plugin that
    rejected it) on a rejection or a timeout, whose reason is upstream's
    ``"rejected due to timeout after waiting {timeout} at plugin {name}"``.
    """

    def __init__(self, pod: PodInfo, node: str, timeouts: Mapping[str, float]) -> None:
        """``timeouts``: plugin name → seconds it lets the pod wait (> 0)."""
        self.pod = pod
        self.node = node
        self._outcome: asyncio.Future[Status] = asyncio.get_running_loop().create_future()
        self._pending: KeyedTimers[str] = KeyedTimers()
        self.timed_out: frozenset[str] = frozenset()
        """The plugins whose timeout rejected the pod (at most one; empty otherwise)."""
        for plugin, seconds in timeouts.items():
            message = f"rejected due to timeout after waiting {format_duration(seconds)} at plugin {plugin}"
            self._pending.call_later(plugin, seconds, functools.partial(self._time_out, message=message))

    @property
    def pending_plugins(self) -> list[str]:
        """The plugins that have not allowed the pod yet (upstream ``GetPendingPlugins``)."""
        return sorted(self._pending)

    def allow(self, plugin: str) -> None:
        """``plugin`` lets the pod go; once no plugin is pending, it binds. A pod already
        rejected or allowed is left as it is."""
        self._pending.cancel(plugin)
        if not self._pending and not self._outcome.done():
            self._outcome.set_result(Status.success())

    def reject(self, plugin: str, message: str) -> None:
        """Send the pod back as Unschedulable by ``plugin`` with ``message`` (no-op once
        decided)."""
        self._pending.cancel_all()
        if not self._outcome.done():
            self._outcome.set_result(Status.unschedulable(message, plugin=plugin))

    def _time_out(self, plugin: str, message: str) -> None:
        if not self._outcome.done():
            self.timed_out = frozenset({plugin})
        self.reject(plugin, message)

    async def wait(self) -> Status:
        """Until allowed (success) or rejected (Unschedulable, naming the plugin)."""
        return await asyncio.shield(self._outcome)


class WaitingPods:
    """The waiting pods of one profile by UID (upstream ``waitingPodsMap``)."""

    def __init__(self) -> None:
        self._pods: dict[str, WaitingPod] = {}

    def add(self, pod: PodInfo, node: str, timeouts: Mapping[str, float]) -> WaitingPod:
        """Hold ``pod`` (placed on ``node``) for the plugins of ``timeouts`` (name → seconds)."""
        waiting = self._pods[pod.uid] = WaitingPod(pod, node, timeouts)
        return waiting

    def remove(self, uid: str) -> None:
        self._pods.pop(uid, None)

    def get(self, uid: str) -> WaitingPod | None:
        """The waiting pod of ``uid`` (upstream ``GetWaitingPod``), or None."""
        return self._pods.get(uid)

    def __iter__(self) -> Iterator[WaitingPod]:
        """Every waiting pod (a copy: a callback may allow or reject while iterating;
        upstream ``IterateOverWaitingPods``)."""
        return iter(list(self._pods.values()))

    def __len__(self) -> int:
        return len(self._pods)

    def reject(self, uid: str, plugin: str, message: str) -> bool:
        """Reject the waiting pod of ``uid`` (upstream ``RejectWaitingPod``, used when the
        pod is deleted); False if none waits."""
        waiting = self._pods.get(uid)
        if waiting is None:
            return False
        waiting.reject(plugin, message)
        return True
