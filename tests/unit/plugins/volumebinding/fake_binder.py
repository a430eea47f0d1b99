"""A volume binder with canned answers, for the plugin's tests (upstream's
``fake_binder.go``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.plugins.volumebinding.binder import ConflictReason, PodVolumeClaims, PodVolumes


@dataclass
class FakeBinder:
    """A :class:`~ipscheduler.plugins.volumebinding.binder.SchedulerVolumeBinder` that answers
    ``claims`` (or raises ``claims_error``), finds ``volumes`` with ``reasons`` on every node
    (or raises ``find_error``), says ``all_bound`` when assuming, and raises ``bind_error`` when
    binding; ``calls`` records each call with its arguments (pods and nodes by name)."""

    claims: PodVolumeClaims = field(default_factory=PodVolumeClaims)
    claims_error: Exception | None = None
    volumes: PodVolumes = field(default_factory=PodVolumes)
    reasons: list[ConflictReason] = field(default_factory=list)
    find_error: Exception | None = None
    all_bound: bool = False
    bind_error: Exception | None = None
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    def get_pod_volume_claims(self, pod: PodInfo) -> PodVolumeClaims:
        self.calls.append(("claims", pod.name))
        if self.claims_error is not None:
            raise self.claims_error
        return self.claims

    def find_pod_volumes(
        self, claims: PodVolumeClaims, node: NodeInfo
    ) -> tuple[PodVolumes, list[ConflictReason]]:
        self.calls.append(("find", claims, node.name))
        if self.find_error is not None:
            raise self.find_error
        return self.volumes, self.reasons

    def assume_pod_volumes(self, node: str, volumes: PodVolumes) -> bool:
        self.calls.append(("assume", node, volumes))
        return self.all_bound

    def revert_assumed_pod_volumes(self, volumes: PodVolumes) -> None:
        self.calls.append(("revert", volumes))

    async def bind_pod_volumes(self, pod: PodInfo, node: NodeInfo, volumes: PodVolumes) -> None:
        self.calls.append(("bind", pod.name, node.name, volumes))
        if self.bind_error is not None:
            raise self.bind_error

    def called(self) -> list[str]:
        """The methods called, in order (``claims``, ``find``, ``assume``, ``revert``, ``bind``)."""
        return [c[0] for c in self.calls]
