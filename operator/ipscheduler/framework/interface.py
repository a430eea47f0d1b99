"""The scheduling framework: extension points, per-cycle state, statuses.

Mirrors kube-scheduler's ``pkg/scheduler/framework/interface.go``: a scheduling
cycle runs QueueSort → PreFilter → Filter (→ PostFilter when no node fits) →
PreScore → Score (+ NormalizeScore) → Reserve → Permit, then the binding
cycle runs PreBind → Bind → PostBind, and any failure after Reserve runs
Unreserve.

Plugins are plain objects that satisfy one or more of the Protocols below;
the :class:`~ipscheduler.framework.runtime.Framework` is built from a
:class:`~ipscheduler.framework.registry.Registry` and the configuration, and
every plugin gets a :class:`Handle` for what it needs from outside.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ipscheduler.framework.types import NodeInfo, PodInfo

MAX_NODE_SCORE = 100
"""Scores are normalized into ``0..MAX_NODE_SCORE`` (framework.MaxNodeScore)."""


class Code(enum.Enum):
    """Result code of a plugin call (framework ``Code``)."""

    SUCCESS = "Success"
    ERROR = "Error"
    UNSCHEDULABLE = "Unschedulable"
    UNSCHEDULABLE_AND_UNRESOLVABLE = "UnschedulableAndUnresolvable"
    SKIP = "Skip"


@dataclass(frozen=True)
class Status:
    """What a plugin call returned: a code, human-readable reasons, the plugin.

    ``reasons`` are the strings that go into the ``FailedScheduling``
    histogram, e.g. ``"node(s) had untolerated taint {dedicated: gpu}"``.
    """

    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""

    @classmethod
    def success(cls) -> Status:
        return _SUCCESS

    @classmethod
    def unschedulable(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.UNSCHEDULABLE, reasons, plugin)

    @classmethod
    def unresolvable(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons, plugin)

    @classmethod
    def error(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.ERROR, reasons, plugin)

    @classmethod
    def skip(cls) -> Status:
        return cls(Code.SKIP)

    def is_success(self) -> bool:
        return self.code is Code.SUCCESS

    def is_rejected(self) -> bool:
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)


_SUCCESS = Status()


BIND_ANNOTATIONS = "Bind/annotations"
"""CycleState key: annotations (``dict[str, str]``) a PreBind plugin wants on the Binding;
the Bind plugin sends them (the Binding API copies them onto the pod)."""


class CycleState:
    """Per-cycle scratch space shared by the plugins of one scheduling cycle.

    Keys are plugin-chosen strings (by convention ``"<Plugin>/<what>"``);
    values are anything. A fresh CycleState is made for every pod attempt.
    """

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}

    def write(self, key: str, value: Any) -> None:
        self._data[key] = value

    def read(self, key: str) -> Any:
        """Return the value for ``key``; raises KeyError if absent."""
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)


@dataclass(order=False)
class QueuedPodInfo:
    """A pod as the queue holds it (framework ``QueuedPodInfo``).

    ``timestamp`` is when the pod was (last) added to the queue, monotonic
    seconds; ``attempts`` counts scheduling attempts so far; ``cycle`` is the
    scheduling cycle in which the pod was last popped.
    """

    pod: PodInfo
    timestamp: float
    attempts: int = 0
    initial_attempt_timestamp: float | None = None
    unschedulable_plugins: set[str] = field(default_factory=set)
    cycle: int = -1


@runtime_checkable
class Plugin(Protocol):
    """Every plugin has a unique name (as in a KubeSchedulerConfiguration)."""

    name: str


@runtime_checkable
class QueueSortPlugin(Plugin, Protocol):
    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        """True if ``a`` should be popped before ``b``."""


@runtime_checkable
class PreFilterPlugin(Plugin, Protocol):
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Status:
        """Precompute per-pod data into ``state``; a rejection fails the pod on every node."""


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Return success if ``pod`` may run on ``node``, else Unschedulable with a reason."""


@runtime_checkable
class PostFilterPlugin(Plugin, Protocol):
    async def post_filter(self, state: CycleState, pod: PodInfo, statuses: Mapping[str, Status]) -> Status:
        """Called when no node fits (``statuses``: node name → its Filter rejection), e.g. to
        preempt; success means the plugin made room (the pod is retried), Unschedulable
        lets the next PostFilter plugin try, Error stops them."""


@runtime_checkable
class PreScorePlugin(Plugin, Protocol):
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        """Precompute per-pod score data from the feasible ``nodes``; Skip leaves this
        plugin's Score out for the pod (upstream ``SkipScorePlugins``)."""


@runtime_checkable
class ScorePlugin(Plugin, Protocol):
    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """Raw score of ``node`` for ``pod`` (any non-negative int)."""

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> None:
        """Rescale ``scores`` (node name → raw score) in place into ``0..MAX_NODE_SCORE``."""


@runtime_checkable
class ReservePlugin(Plugin, Protocol):
    async def reserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Claim resources for ``pod`` on ``node`` before binding."""

    async def unreserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> None:
        """Undo :meth:`reserve`; must be idempotent and never raise."""


@runtime_checkable
class PermitPlugin(Plugin, Protocol):
    def permit(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Approve (success) or reject binding; waiting is not supported yet."""


@runtime_checkable
class PreBindPlugin(Plugin, Protocol):
    async def pre_bind(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Work that must happen before Bind (e.g. prepare annotations)."""


@runtime_checkable
class BindPlugin(Plugin, Protocol):
    async def bind(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Bind ``pod`` to ``node``; return :meth:`Status.skip` to let the next binder try."""


@runtime_checkable
class PostBindPlugin(Plugin, Protocol):
    async def post_bind(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> None:
        """Informational: called after a successful bind."""


class Binder(Protocol):
    """Something that can POST a Binding (``KubeApi.bind`` has this shape)."""

    async def bind(self, pod: PodInfo, node: str, annotations: dict[str, str]) -> None:
        """Bind ``pod`` (by UID) to ``node`` with ``annotations``; raises what the API call raises."""


class Handle(Protocol):
    """What a plugin may use from outside the framework (upstream ``framework.Handle``, kept
    to what in-tree plugins need). Given to every plugin factory ``new(args, handle)``."""

    @property
    def binder(self) -> Binder:
        """Posts Bindings (DefaultBinder)."""


def default_normalize(scores: dict[str, int], reverse: bool = False) -> None:
    """Scale ``scores`` linearly so the highest becomes MAX_NODE_SCORE.

    With ``reverse`` the lowest raw score gets MAX_NODE_SCORE (as
    ``pkg/scheduler/framework/plugins/helper/normalize_score.go``
    DefaultNormalizeScore). All-zero input stays zero (or all max when reversed).
    """
    if not scores:
        return
    top = max(scores.values())
    if top == 0:
        if reverse:
            for k in scores:
                scores[k] = MAX_NODE_SCORE
        return
    for k, v in scores.items():
        s = MAX_NODE_SCORE * v // top
        scores[k] = MAX_NODE_SCORE - s if reverse else s
