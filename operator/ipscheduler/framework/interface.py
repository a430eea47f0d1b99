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

Size: one module, as upstream keeps every contract in one ``interface.go`` (and its
``types.go`` for the cluster events): a plugin author reads the extension points, the
handle, the what-if runs preemption makes and the cluster events side by side.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, runtime_checkable

from ipscheduler.framework.status import Code as Code  # noqa: PLC0414 (re-exported)
from ipscheduler.framework.status import Status as Status  # noqa: PLC0414 (re-exported)
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.framework.volumes import VolumeListers, VolumeWriter

if TYPE_CHECKING:
    from ipscheduler.framework.waiting import WaitingPods

MAX_NODE_SCORE = 100
"""Scores are normalized into ``0..MAX_NODE_SCORE`` (framework.MaxNodeScore)."""


BIND_ANNOTATIONS = "Bind/annotations"
"""CycleState key: annotations (``dict[str, str]``) a PreBind plugin wants on the Binding;
the Bind plugin sends them (the Binding API copies them onto the pod)."""

SCHEDULED_NOTE = "Bind/note"
"""CycleState key: a short note (``str``, e.g. ``IP 10.0.0.5``) a PreBind plugin adds to the
``Scheduled`` event and the log line of a successful bind, in parentheses."""

LOG_FIELDS = "Bind/log-fields"
"""CycleState key: structured fields (``dict[str, str]``, e.g. ``{"pool": ..., "ip": ...}``) a
PreBind plugin adds to the log record of a successful bind (``--logging-format=json``)."""


PODS_TO_ACTIVATE = "framework/pods-to-activate"
"""CycleState key: UIDs (``set[str]``) of pending pods a plugin wants moved to activeQ at the
end of the cycle, out of backoff or the unschedulable pods (upstream ``PodsToActivateKey``;
Coscheduling wakes a waiting pod's siblings)."""

PERMIT_TIMED_OUT = "framework/permit-timed-out"
"""CycleState key: the plugins (``frozenset[str]``) whose Permit timeout ended the pod's wait,
written before Unreserve runs (Coscheduling tells a group that timed out from one given back;
upstream's plugins see only the rejection's message)."""


T = TypeVar("T")


@dataclass(frozen=True)
class Room:
    """How many more pods like one pod a plugin's resource has room for on a set of nodes
    (:class:`CapacityAware`), with the plugin and what it counts (``"free underlay IPs"``)."""

    pods: int
    plugin: str
    resource: str


@runtime_checkable
class CapacityAware(Protocol):
    """A Filter plugin that can count its resource across nodes: how many more pods like
    ``pod`` could be placed on ``nodes`` as far as it is concerned (a plugin such as
    Coscheduling asks, through :meth:`Handle.room_for`, before reserving anything for a
    group: upstream coscheduling checks ``minResources`` against the nodes the same way)."""

    name: str
    room_resource: str
    """What it counts, for messages (e.g. ``"free underlay IPs"``)."""

    def room(self, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> int | None:
        """Pods like ``pod`` that fit on ``nodes`` by this plugin's resource alone (assumed
        reservations deducted); None: the plugin does not limit such pods."""
        ...


@runtime_checkable
class PreemptionAware(Protocol):
    """A Filter plugin that can tell whether evicting some pods would make room for the pod
    on a node (the extender's ``preempt`` verb asks it; kube-scheduler's own plugins learn
    it by re-running Filter on a node without the victims)."""

    name: str

    def fits_after_evicting(
        self, state: CycleState, pod: PodInfo, node: NodeInfo, victims: frozenset[str]
    ) -> bool:
        """Whether ``pod`` passes this plugin on ``node`` once the pods of UIDs ``victims``
        are gone; ``state`` is the cycle state of a PreFilter run for ``pod``."""
        ...


class MetricsRecorder(Protocol):
    """Where the framework reports its timings (upstream ``metricsRecorder``):
    ``scheduler_framework_extension_point_duration_seconds`` and
    ``scheduler_plugin_execution_duration_seconds``. Seconds; ``status`` is the result
    code's string (``Success``, ``Unschedulable``...)."""

    def observe_extension_point(self, point: str, status: str, seconds: float) -> None: ...

    def observe_plugin(self, plugin: str, point: str, status: str, seconds: float) -> None: ...


@runtime_checkable
class PreemptionMetrics(Protocol):
    """Where a preemption plugin reports (upstream ``metrics.PreemptionAttempts`` and
    ``metrics.PreemptionVictims``): ``scheduler_preemption_attempts_total`` and
    ``scheduler_preemption_victims``."""

    def observe_preemption_attempt(self) -> None: ...

    def observe_preemption_victims(self, victims: int) -> None: ...


class CycleState:
    """Per-cycle scratch space shared by the plugins of one scheduling cycle.

    Keys are plugin-chosen strings (by convention ``"<Plugin>/<what>"``);
    values are anything. A fresh CycleState is made for every pod attempt.
    """

    def __init__(self, record_plugin_metrics: bool = False) -> None:
        self._data: dict[str, Any] = {}
        self.record_plugin_metrics = record_plugin_metrics
        """Time each plugin in this cycle (upstream ``CycleState.ShouldRecordPluginMetrics``:
        a sample of the cycles, ``pluginMetricsSamplePercent``)."""

    def write(self, key: str, value: Any) -> None:
        self._data[key] = value

    def read(self, key: str) -> Any:
        """Return the value for ``key``; raises KeyError if absent."""
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def memo(self, key: str, compute: Callable[[], T]) -> T:
        """The value for ``key``, computed by ``compute()`` and written on first use (a
        ``None`` result is kept too): per-cycle memos of what is the same for every node."""
        if key not in self._data:
            self._data[key] = compute()
        value: T = self._data[key]
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def clone(self) -> CycleState:
        """A copy for a what-if run (upstream ``CycleState.Clone``: preemption's dry run
        removes and adds pods on the copy): every value with a ``clone()`` method is cloned,
        the others (immutable, or never changed after PreFilter) are shared."""
        out = CycleState(self.record_plugin_metrics)
        out._data = {
            k: v.clone() if callable(getattr(v, "clone", None)) else v for k, v in self._data.items()
        }
        return out

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)


class ActionType(enum.Flag):
    """What happened to an object (upstream ``ActionType``, ``pkg/scheduler/framework/types.go``).

    The ``UPDATE_*`` flags name the part of a Node or Pod that changed, so a plugin
    can register for, say, label changes only; :attr:`UPDATE` is any of them.
    """

    ADD = enum.auto()
    DELETE = enum.auto()
    UPDATE_NODE_ALLOCATABLE = enum.auto()
    UPDATE_NODE_LABEL = enum.auto()
    UPDATE_NODE_TAINT = enum.auto()
    """Taints or ``spec.unschedulable`` (upstream counts both as taints)."""
    UPDATE_NODE_CONDITION = enum.auto()
    UPDATE_POD_LABEL = enum.auto()
    UPDATE_POD_SCALE_DOWN = enum.auto()
    """A bound pod's requests went down (in-place resize)."""
    UPDATE_OTHER = enum.auto()
    """Any other change (e.g. an extension resource's spec or status)."""
    UPDATE = (
        UPDATE_NODE_ALLOCATABLE
        | UPDATE_NODE_LABEL
        | UPDATE_NODE_TAINT
        | UPDATE_NODE_CONDITION
        | UPDATE_POD_LABEL
        | UPDATE_POD_SCALE_DOWN
        | UPDATE_OTHER
    )
    ALL = ADD | DELETE | UPDATE


class EventResource(str):
    """The kind of object an event is about: a string, as upstream ``EventResource``
    (``pkg/scheduler/framework/types.go``): built-in kinds by name (:attr:`NODE`,
    :attr:`ASSIGNED_POD`), :attr:`WILDCARD` for every resource, and any other resource by
    ``<plural>.<version>.<group>`` (an extension defines its own, e.g. the underlayip wing's
    NodeIPPools)."""

    __slots__ = ()

    NODE: ClassVar[EventResource]
    ASSIGNED_POD: ClassVar[EventResource]
    """A pod bound to a node (by any scheduler)."""
    UNSCHEDULED_POD: ClassVar[EventResource]
    """A pod not bound yet (upstream's ``Pod``, as the queue sees a pod added)."""
    NAMESPACE: ClassVar[EventResource]
    PERSISTENT_VOLUME_CLAIM: ClassVar[EventResource]
    PERSISTENT_VOLUME: ClassVar[EventResource]
    STORAGE_CLASS: ClassVar[EventResource]
    CSI_NODE: ClassVar[EventResource]
    WILDCARD: ClassVar[EventResource]
    """Every resource: an event that may help any pod (e.g. the unschedulable timeout)."""


EventResource.NODE = EventResource("Node")
EventResource.ASSIGNED_POD = EventResource("AssignedPod")
EventResource.UNSCHEDULED_POD = EventResource("Pod")
EventResource.NAMESPACE = EventResource("Namespace")
EventResource.PERSISTENT_VOLUME_CLAIM = EventResource("PersistentVolumeClaim")
EventResource.PERSISTENT_VOLUME = EventResource("PersistentVolume")
EventResource.STORAGE_CLASS = EventResource("StorageClass")
EventResource.CSI_NODE = EventResource("CSINode")
EventResource.WILDCARD = EventResource("*")


@dataclass(frozen=True)
class ClusterEvent:
    """An event that may make a pod schedulable (upstream ``ClusterEvent``): a resource,
    what happened to it, and a label for logs and metrics (e.g. ``"NodeTaintChange"``)."""

    resource: EventResource
    action_type: ActionType
    label: str = ""

    def matches(self, registered: ClusterEvent) -> bool:
        """True if a plugin that registered ``registered`` cares about this event: same
        resource (or a wildcard on either side) and an action in common (upstream
        ``ClusterEvent.Match``)."""
        if EventResource.WILDCARD in (self.resource, registered.resource):
            return bool(self.action_type & registered.action_type)
        return self.resource == registered.resource and bool(self.action_type & registered.action_type)


WILDCARD_EVENT = ClusterEvent(EventResource.WILDCARD, ActionType.ALL, "WildCard")
"""Matches every registration: plugins without :class:`EnqueueExtensions` register it, and a
pod that waited :attr:`~ipscheduler.backend.queue.SchedulingQueue.max_unschedulable` is moved by it."""


class QueueingHint(enum.Enum):
    """A plugin's answer to "may this event make the pod schedulable?" (upstream ``QueueingHint``)."""

    SKIP = 0
    """No: the pod stays unschedulable (for this plugin's part)."""
    QUEUE = 1
    """Maybe: move the pod to activeQ (or backoffQ if it is still backing off)."""


QueueingHintFn = Callable[[PodInfo, Any, Any], QueueingHint]
"""``fn(pod, old, new) -> QueueingHint`` (upstream ``QueueingHintFn``): ``pod`` the unschedulable
pod this plugin rejected; ``old`` and ``new`` the event's object before and after (None for an
add's ``old`` and a delete's ``new``; NodeInfo for nodes, PodInfo for pods, an extension's own
view for its resources). May raise; an exception counts as QUEUE (upstream does the same)."""


@dataclass(frozen=True)
class ClusterEventWithHint:
    """An event a plugin registers, with the function that judges each occurrence
    (None: always QUEUE)."""

    event: ClusterEvent
    queueing_hint_fn: QueueingHintFn | None = None


@runtime_checkable
class EnqueueExtensions(Protocol):
    """A plugin that may reject pods says which events may make them schedulable
    (upstream ``EnqueueExtensions``). A rejecting plugin without it is treated as if it
    registered :data:`WILDCARD_EVENT`: every event moves the pods it rejected."""

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """The events that may help a pod this plugin rejected, each with its hint."""


@dataclass(order=False)
class QueuedPodInfo:
    """A pod as the queue holds it (framework ``QueuedPodInfo``).

    ``timestamp`` is when the pod was (last) added to the queue, monotonic
    seconds; ``attempts`` counts scheduling attempts so far; ``cycle`` is the
    scheduling cycle in which the pod was last popped. ``unschedulable_plugins`` are the
    plugins that rejected it in its last attempt (PreFilter, Filter or Permit; empty when
    it failed for another reason): only events those plugins registered move it back.
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
class PreFilterExtensions(Protocol):
    """A PreFilter plugin whose state depends on the pods of other nodes (upstream
    ``PreFilterExtensions``): told, on a cloned :class:`CycleState`, of a pod added to or
    removed from ``node`` (preemption's dry run, nominated pods), it updates what its Filter
    reads. An error status aborts the what-if run."""

    name: str

    def add_pod(self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node: NodeInfo) -> Status:
        """``pod_to_add`` now counts on ``node`` (``node.pods`` includes it)."""

    def remove_pod(self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node: NodeInfo) -> Status:
        """``pod_to_remove`` no longer counts on ``node`` (``node.pods`` excludes it)."""


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Return success if ``pod`` may run on ``node``, else Unschedulable with a reason."""


@runtime_checkable
class NodeLocal(Protocol):
    """A Filter or Score plugin whose result on a node depends on nothing but the
    :class:`NodeInfo` object and what :meth:`node_local_key` returns for the pod (its args
    are fixed per plugin instance): the framework may reuse a result for an unchanged node
    and a pod of the same shape (:mod:`ipscheduler.framework.nodememo`). Not upstream's:
    kube-scheduler recomputes every cycle."""

    def node_local_key(self, pod: PodInfo) -> Hashable | None:
        """A hashable, compared by value, of every part of ``pod`` (and of what its PreFilter
        or PreScore derives from ``pod`` alone) that this plugin's Filter and Score read;
        None when this pod's result may depend on more (then nothing is reused)."""


@dataclass(frozen=True)
class PostFilterResult:
    """What a PostFilter plugin asks of the pod (upstream ``PostFilterResult`` with its
    ``NominatingInfo`` in ``ModeOverride``): ``nominated_node_name`` becomes the pod's
    ``status.nominatedNodeName`` ("" clears it)."""

    nominated_node_name: str
    victims: frozenset[str] = frozenset()
    """UIDs of the pods evicted to make room there (for :class:`NominationAware` plugins)."""


@runtime_checkable
class NominationAware(Protocol):
    """A Filter plugin that holds, for a pod preemption nominated to a node, what the victims
    free there, so that no other pod takes it while they terminate (ipscheduler's own
    extension point: upstream's nominated pods only count in later cycles of this process,
    KEP-5690). Told too when the pod's nomination is cleared (``node`` "")."""

    name: str

    async def nominated(self, pod: PodInfo, node: str, victims: frozenset[str]) -> None:
        """``pod`` is now nominated to ``node`` ("": to no node) after evicting the pods of
        UIDs ``victims``; hold what they free, drop holds elsewhere. Never raises."""
        ...


@runtime_checkable
class PostFilterPlugin(Plugin, Protocol):
    async def post_filter(
        self, state: CycleState, pod: PodInfo, statuses: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        """Called when no node fits (``statuses``: node name → its Filter rejection), e.g. to
        preempt; success means the plugin made room (the pod is retried), Unschedulable
        lets the next PostFilter plugin try, Error stops them. The result (None: leave the
        pod's nomination as it is) says where the pod is nominated."""


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
    def permit(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> tuple[Status, float]:
        """Approve (success), reject (Unschedulable), or hold the pod (:meth:`Status.wait`)
        for at most the returned number of seconds (upstream ``Permit`` returns ``(*Status,
        time.Duration)``); the timeout is ignored unless the status is Wait. A held pod is
        allowed or rejected through :attr:`Handle.waiting_pods`."""


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


class Client(Binder, VolumeWriter, Protocol):
    """The API calls plugins make through the handle (upstream ``Handle.ClientSet``, narrowed
    to exactly those calls; ``kube/client.KubeApi`` has them all): the Binding
    (:class:`Binder`: DefaultBinder), VolumeBinding's PersistentVolume and claim patches
    (:class:`~ipscheduler.framework.volumes.VolumeWriter`), preemption's PodDisruptionBudget
    LIST, eviction and ``nominatedNodeName`` (:mod:`ipscheduler.framework.preemption`), and
    the live read of a pod (UnderlayIP's Unreserve). Each raises what the API call raises."""

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Pod ``namespace/name`` as the API server has it now; None when it does not exist."""

    async def list_pod_disruption_budgets(self) -> list[dict[str, Any]]:
        """Every PodDisruptionBudget (``policy/v1``, all namespaces; one LIST)."""

    async def preempt_pod(self, victim: PodInfo, message: str) -> bool:
        """Evict ``victim`` as kube-scheduler's ``PreemptPod`` does (the ``DisruptionTarget``
        condition with ``message``, then a DELETE); False when it was gone already."""

    async def set_nominated_node_name(self, pod: PodInfo, node: str) -> None:
        """Set (or with ``""`` clear) ``pod``'s ``status.nominatedNodeName``."""


Requeue = Callable[[ClusterEvent, Any, Any], object]
"""The scheduling queue's move of the unschedulable pods a cluster event may help (upstream
``MoveAllToActiveOrBackoffQueue``): ``requeue(event, old, new)``, with the object before
and after (None when not known). What the wings' controllers are given to tell the queue."""


class PodActivator(Protocol):
    """Moves pending pods to activeQ now (upstream ``framework.PodActivator``: the scheduling
    queue, given to each profile by ``SetPodActivator``)."""

    def activate(self, uids: set[str]) -> object:
        """Move the pods of these UIDs to activeQ, out of backoffQ or the unschedulable pods;
        pods elsewhere (active, in flight, unknown) are left alone."""


class PodNominator(Protocol):
    """The pending pods nominated to nodes by preemption (upstream ``PodNominator``: the
    scheduling queue, given to each profile by ``SetPodNominator``)."""

    def nominated_pods_for_node(self, node: str) -> list[PodInfo]:
        """The pods nominated to ``node`` (empty when none)."""
        ...

    def any_nominated(self) -> bool:
        """Whether any pod is nominated to any node (when not, a cycle skips asking node by
        node)."""
        ...


class EventRecorder(Protocol):
    """Posts Kubernetes Events (upstream ``Handle.EventRecorder``; in the process,
    ``kube/events.EventRecorder``)."""

    def emit(
        self, obj: dict[str, str], event_type: str, reason: str, message: str, namespace: str | None = None
    ) -> None:
        """Post an Event about ``obj`` (an involvedObject reference) without waiting for it."""


class Handle(Protocol):
    """What a plugin may use from outside the framework (upstream ``framework.Handle``, kept
    to what in-tree plugins need). Given to every plugin factory ``new(args, handle)``: the
    profile's :class:`~ipscheduler.framework.runtime.Framework` itself, as upstream's
    ``frameworkImpl`` is the handle its factories get, whole from its construction."""

    @property
    def recorder(self) -> EventRecorder | None:
        """Posts the plugins' Events (None: they are only logged: ``explain``, tests)."""

    @property
    def client(self) -> Client | None:
        """The API calls plugins make (upstream ``Handle.ClientSet``; in the process
        ``kube/client.KubeApi``; None where nothing talks to the API server: ``explain``,
        tests)."""

    def activate(self, uids: set[str]) -> None:
        """Move the pods of these UIDs to activeQ (upstream ``Handle.Activate``), e.g. a pod
        whose wait a plugin's timer ended; nothing before the profile's activator is set.
        Within a cycle, a plugin asks the same through :data:`PODS_TO_ACTIVATE`."""

    @property
    def waiting_pods(self) -> WaitingPods:
        """The pods of this profile held at Permit (upstream ``IterateOverWaitingPods``,
        ``GetWaitingPod``, ``RejectWaitingPod``)."""

    @property
    def volumes(self) -> VolumeListers:
        """Read-only PersistentVolumeClaims, PersistentVolumes, StorageClasses and CSINodes
        (upstream's ``SharedInformerFactory()`` listers, for the volume plugins)."""

    def room_for(self, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Room | None:
        """The least room for pods like ``pod`` on ``nodes`` among the profile's
        :class:`CapacityAware` Filter plugins; None when none limits it."""

    @property
    def metrics(self) -> PreemptionMetrics | None:
        """Where preemption is counted (None: not counted: ``explain``, tests)."""

    def snapshot(self) -> Mapping[str, NodeInfo]:
        """The nodes of the current scheduling cycle, by name (upstream
        ``SnapshotSharedLister``; empty before the first cycle)."""

    def nominated_pods_for_node(self, node: str) -> list[PodInfo]:
        """The pods nominated to ``node`` (upstream ``Handle.NominatedPodsForNode``)."""

    def run_filters_with_nominated_pods(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """The profile's filters on ``node``, counting the pods nominated there of at least
        ``pod``'s priority (upstream ``RunFilterPluginsWithNominatedPods``)."""

    def run_pre_filter_extension_add_pod(
        self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node: NodeInfo
    ) -> Status:
        """Every :class:`PreFilterExtensions` plugin's ``add_pod`` (upstream
        ``RunPreFilterExtensionAddPod``)."""

    def run_pre_filter_extension_remove_pod(
        self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node: NodeInfo
    ) -> Status:
        """Every :class:`PreFilterExtensions` plugin's ``remove_pod`` (upstream
        ``RunPreFilterExtensionRemovePod``)."""


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
