"""Why a pod fits no node: the per-node statuses of a scheduling cycle and kube-scheduler's
``FitError`` text (``pkg/scheduler/framework/types.go``), for the ``FailedScheduling``
event, PostFilter (preemption reads which nodes were Unschedulable) and ``explain``."""

from __future__ import annotations

from dataclasses import dataclass, field

from ipscheduler.framework.status import Status


@dataclass
class Diagnosis:
    """Why a pod fits no node: per-node rejection, for the FailedScheduling message."""

    node_to_status: dict[str, Status] = field(default_factory=dict)
    pre_filter: Status | None = None
    num_all_nodes: int = 0

    @property
    def unschedulable_plugins(self) -> set[str]:
        """The plugins that rejected the pod (upstream ``Diagnosis.UnschedulablePlugins``):
        the PreFilter that failed it, else every Filter that rejected some node."""
        if self.pre_filter is not None:
            return {self.pre_filter.plugin} if self.pre_filter.plugin else set()
        return {st.plugin for st in self.node_to_status.values() if st.plugin}

    def histogram(self) -> dict[str, int]:
        """Reason → number of nodes that gave it (only the first failing filter counts)."""
        counts: dict[str, int] = {}
        statuses = (
            [self.pre_filter] * self.num_all_nodes if self.pre_filter else list(self.node_to_status.values())
        )
        for st in statuses:
            for reason in st.reasons:
                counts[reason] = counts.get(reason, 0) + 1
        return counts

    def message(self) -> str:
        """kube-scheduler's FitError text (``pkg/scheduler/framework/types.go``).

        ``0/N nodes are available: <count> <reason>, ....`` with the
        "<count> <reason>" strings sorted as strings, as upstream does; when a PreFilter
        rejected the pod, ``0/N nodes are available: <its message>.`` (upstream adds its
        message once, not once per node).
        """
        if self.num_all_nodes == 0:
            return "no nodes available to schedule pods"
        if self.pre_filter is not None:
            return f"0/{self.num_all_nodes} nodes are available: {', '.join(self.pre_filter.reasons)}."
        parts = sorted(f"{n} {reason}" for reason, n in self.histogram().items())
        return f"0/{self.num_all_nodes} nodes are available: {', '.join(parts)}."
