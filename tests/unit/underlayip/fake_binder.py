"""An address binder with canned answers, for UnderlayIP's tests (as upstream's
``volumebinding/fake_binder.go``): it answers what it is told and records every call."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from ipscheduler.framework.types import PodInfo
from ipscheduler.underlayip.binder import Committed, Fit, PodAddresses, Refusal
from ipscheduler.underlayip.retention import retention_of
from ipscheduler.underlayip.selection import ANY


@dataclass
class FakeBinder:
    """:class:`~ipscheduler.underlayip.binder.AddressBinder` with canned answers.

    ``needs``: what :meth:`find` returns (default: a pod that may use any pool, its own
    release policy, nothing free); ``fits``: :meth:`fit` by node name (default NO_POOL);
    ``short``: by node name, the further interface :meth:`fit` records in the cycle's
    ``needs.short`` (as the real binder does for the ``INTERFACE_`` kinds); ``assumed``,
    ``committed``, ``nominated``, ``room_left``, ``evicting_frees``: the other answers.
    ``calls``: (method, pod name, *arguments) for every call, in order."""

    needs: PodAddresses | None = None
    fits: dict[str, Fit] = field(default_factory=dict)
    short: dict[str, str] = field(default_factory=dict)
    room_left: int = 0
    evicting_frees: bool = False
    assumed: Refusal | None = None
    committed: Committed | Refusal | None = None
    nominated: str | None = None
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    def find(self, pod: PodInfo) -> PodAddresses:
        self.calls.append(("find", pod.name))
        return self.needs if self.needs is not None else PodAddresses(ANY, retention_of(pod))

    def needs_of(self, pod: PodInfo) -> PodAddresses:
        self.calls.append(("needs_of", pod.name))
        return self.needs if self.needs is not None else PodAddresses(ANY, retention_of(pod))

    def fit(self, needs: PodAddresses, pod: PodInfo, node: str) -> Fit:
        self.calls.append(("fit", pod.name, node))
        if node in self.short:
            needs.short[node] = self.short[node]
        return self.fits.get(node, Fit.NO_POOL)

    def room(self, pod: PodInfo, nodes: Collection[str]) -> int:
        self.calls.append(("room", pod.name, tuple(sorted(nodes))))
        return self.room_left

    def fits_after_evicting(
        self, needs: PodAddresses, pod: PodInfo, node: str, victims: frozenset[str]
    ) -> bool:
        self.calls.append(("fits_after_evicting", pod.name, node, victims))
        return self.evicting_frees

    def count_eviction(self, needs: PodAddresses, pod: PodInfo, victim: str, node: str) -> None:
        self.calls.append(("count_eviction", pod.name, victim, node))

    def count_addition(self, needs: PodAddresses, pod: PodInfo, other: PodInfo, node: str) -> None:
        self.calls.append(("count_addition", pod.name, other.uid, node))

    async def nominate(self, pod: PodInfo, node: str, victims: frozenset[str]) -> str | None:
        self.calls.append(("nominate", pod.name, node, victims))
        return self.nominated

    def assume(self, needs: PodAddresses, pod: PodInfo, node: str) -> Refusal | None:
        self.calls.append(("assume", pod.name, node))
        return self.assumed

    async def commit(self, needs: PodAddresses, pod: PodInfo, node: str) -> Committed | Refusal | None:
        self.calls.append(("commit", pod.name, node))
        return self.committed

    async def revert(self, needs: PodAddresses, pod: PodInfo, node: str) -> None:
        self.calls.append(("revert", pod.name, node))

    def mark_bound(self, needs: PodAddresses, uid: str) -> None:
        self.calls.append(("mark_bound", uid))
