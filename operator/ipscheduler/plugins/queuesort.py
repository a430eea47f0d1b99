"""QueueSort: the order in which pending pods are popped from the scheduling queue.

Mirrors ``pkg/scheduler/framework/plugins/queuesort/priority_sort.go``
(PrioritySort.Less: higher priority first, then earlier queue timestamp),
with one addition of ours: between equal priorities, a higher QoS class
(Guaranteed > Burstable > BestEffort, :data:`~ipscheduler.framework.resources.QOS_RANK`)
goes first.
"""

from __future__ import annotations

from ipscheduler.framework.interface import Handle, QueuedPodInfo
from ipscheduler.framework.resources import QOS_RANK

NAME = "PrioritySort"


def priority_then_qos(a: QueuedPodInfo, b: QueuedPodInfo) -> bool | None:
    """``a`` before ``b`` by priority (desc), then QoS class (desc); None when both are equal
    (the caller breaks the tie; a QueueSort plugin of another wing, Coscheduling, shares it)."""
    if a.pod.priority != b.pod.priority:
        return a.pod.priority > b.pod.priority
    qa = QOS_RANK.get(a.pod.qos_class, 0)
    qb = QOS_RANK.get(b.pod.qos_class, 0)
    if qa != qb:
        return qa > qb
    return None


class PrioritySort:
    """Orders pods by priority (desc), then QoS class (desc), then queue timestamp (asc)."""

    name: str = NAME

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        """True if ``a`` should be popped before ``b``."""
        first = priority_then_qos(a, b)
        return first if first is not None else a.timestamp < b.timestamp


def new(args: None, handle: Handle) -> PrioritySort:
    """The plugin's factory (registered as :data:`NAME`; it takes no args)."""
    return PrioritySort()
