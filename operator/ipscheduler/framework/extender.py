"""kube-scheduler's extender protocol, the wire types (``k8s.io/kube-scheduler/extender/v1``,
``types.go``; the caller is ``pkg/scheduler/extender.go``).

The Go types carry no JSON tags, so the keys are the Go field names (``Pod``,
``NodeNames``, ``FailedNodes``...); Go's decoder matches keys case-insensitively, and so
do these models (a client that writes ``nodenames`` is understood). Pods and nodes stay
raw JSON objects (``v1.Pod``, ``v1.NodeList``): the caller parses what it needs.

- ``filter``: :class:`ExtenderArgs` → :class:`ExtenderFilterResult`;
- ``prioritize``: :class:`ExtenderArgs` → a list of :class:`HostPriority` (0..10,
  :data:`MAX_EXTENDER_PRIORITY`);
- ``bind``: :class:`ExtenderBindingArgs` → :class:`ExtenderBindingResult`;
- ``preempt``: :class:`ExtenderPreemptionArgs` → :class:`ExtenderPreemptionResult`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

MIN_EXTENDER_PRIORITY = 0
MAX_EXTENDER_PRIORITY = 10
"""An extender's scores are 0..10 (``extenderv1.MaxExtenderPriority``); kube-scheduler
multiplies them by the extender's weight and by ``MaxNodeScore / MaxExtenderPriority``."""


class _Wire(BaseModel):
    """Go field names as aliases; keys matched case-insensitively, as Go's json decoder does."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _case_insensitive(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        by_lower = {(f.alias or name).lower(): f.alias or name for name, f in cls.model_fields.items()}
        return {by_lower.get(str(k).lower(), k): v for k, v in data.items()}

    def to_wire(self) -> dict[str, Any]:
        """The JSON object kube-scheduler reads (Go field names; None fields left out)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class ExtenderArgs(_Wire):
    """The body of ``filter`` and ``prioritize``: the pod and the candidate nodes, as full
    objects (``Nodes``, a v1.NodeList) or, with ``nodeCacheCapable: true``, by name."""

    pod: dict[str, Any] = Field(alias="Pod")
    nodes: dict[str, Any] | None = Field(default=None, alias="Nodes")
    node_names: list[str] | None = Field(default=None, alias="NodeNames")

    def candidate_names(self) -> list[str]:
        """The candidate nodes' names, in the order given (``NodeNames``, else the items of
        ``Nodes``)."""
        if self.node_names is not None:
            return list(self.node_names)
        items = (self.nodes or {}).get("items") or []
        return [str((i.get("metadata") or {}).get("name", "")) for i in items if isinstance(i, dict)]

    def node_objects(self) -> dict[str, dict[str, Any]]:
        """The full node objects of ``Nodes`` by name (empty with ``NodeNames``)."""
        items = (self.nodes or {}).get("items") or []
        return {str((i.get("metadata") or {}).get("name", "")): i for i in items if isinstance(i, dict)}


class ExtenderFilterResult(_Wire):
    """The answer to ``filter``: the nodes that pass (in the form they came in), those that
    do not with a reason each, those where preemption cannot help either, or an error
    (kube-scheduler then fails the attempt unless the extender is ``ignorable``)."""

    nodes: dict[str, Any] | None = Field(default=None, alias="Nodes")
    node_names: list[str] | None = Field(default=None, alias="NodeNames")
    failed_nodes: dict[str, str] = Field(default_factory=dict, alias="FailedNodes")
    failed_and_unresolvable_nodes: dict[str, str] = Field(
        default_factory=dict, alias="FailedAndUnresolvableNodes"
    )
    error: str = Field(default="", alias="Error")


class HostPriority(_Wire):
    """One node's score from ``prioritize`` (0..10)."""

    host: str = Field(alias="Host")
    score: int = Field(alias="Score")


class ExtenderBindingArgs(_Wire):
    """The body of ``bind``: the pod by namespace, name and UID, and the node chosen."""

    pod_name: str = Field(alias="PodName")
    pod_namespace: str = Field(alias="PodNamespace")
    pod_uid: str = Field(alias="PodUID")
    node: str = Field(alias="Node")


class ExtenderBindingResult(_Wire):
    """The answer to ``bind``: empty on success, else the error (kube-scheduler retries)."""

    error: str = Field(default="", alias="Error")

    def to_wire(self) -> dict[str, Any]:
        return {"Error": self.error}


class MetaPod(_Wire):
    """A victim by UID (``nodeCacheCapable``)."""

    uid: str = Field(alias="UID")


class MetaVictims(_Wire):
    """The pods preemption would evict on one node, by UID, and the PDBs it would violate."""

    pods: list[MetaPod] = Field(default_factory=list, alias="Pods")
    num_pdb_violations: int = Field(default=0, alias="NumPDBViolations")


class Victims(_Wire):
    """The pods preemption would evict on one node, as full objects."""

    pods: list[dict[str, Any]] = Field(default_factory=list, alias="Pods")
    num_pdb_violations: int = Field(default=0, alias="NumPDBViolations")

    def meta(self) -> MetaVictims:
        """The same victims by UID."""
        uids = [str((p.get("metadata") or {}).get("uid", "")) for p in self.pods]
        return MetaVictims(pods=[MetaPod(uid=u) for u in uids], num_pdb_violations=self.num_pdb_violations)


class ExtenderPreemptionArgs(_Wire):
    """The body of ``preempt``: the preemptor and, per candidate node, the victims
    kube-scheduler chose (full pods, or by UID with ``nodeCacheCapable``)."""

    pod: dict[str, Any] = Field(alias="Pod")
    node_name_to_victims: dict[str, Victims] | None = Field(default=None, alias="NodeNameToVictims")
    node_name_to_meta_victims: dict[str, MetaVictims] | None = Field(
        default=None, alias="NodeNameToMetaVictims"
    )

    def candidates(self) -> dict[str, MetaVictims]:
        """Every candidate node's victims by UID, whichever form they came in."""
        if self.node_name_to_meta_victims is not None:
            return dict(self.node_name_to_meta_victims)
        return {node: v.meta() for node, v in (self.node_name_to_victims or {}).items()}


class ExtenderPreemptionResult(_Wire):
    """The answer to ``preempt``: the candidate nodes kept, with their victims by UID."""

    node_name_to_meta_victims: dict[str, MetaVictims] = Field(
        default_factory=dict, alias="NodeNameToMetaVictims"
    )
