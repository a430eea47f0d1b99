"""Extender mode: kube-scheduler's extender verbs answered by this scheduler's framework.

kube-scheduler (``pkg/scheduler/extender.go``) calls an extender after its own plugins:
``filter`` with the nodes that passed them, ``prioritize`` with those that passed ours
too, ``bind`` with the node it chose (the extender then binds: it is the one binder), and
``preempt`` with the victims its preemption picked. Here each verb runs the extension
points of a profile (in production the UnderlayIP profile of ``cmd/profiles``) over the
same cache, plugins and pool writer as scheduler mode:

- ``filter``: PreFilter, then Filter on every candidate node; a node rejected with
  UnschedulableAndUnresolvable goes to ``FailedAndUnresolvableNodes`` (preemption cannot
  help there), others to ``FailedNodes``, each with the plugin's reason;
- ``prioritize``: the profile's weighted scores, 0..100, mapped to 0..10;
- ``bind``: a live read of the pod (by UID), PreFilter and Filter on the node, Reserve,
  PreBind, Bind (the Binding carries the PreBind annotations), PostBind; any failure
  unreserves and returns ``Error``, so kube-scheduler retries the pod;
- ``preempt``: a candidate node is kept only when the profile says the pod fits there
  once the victims are gone (:class:`~ipscheduler.framework.interface.PreemptionAware`
  plugins decide for their resource), else dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ipscheduler.backend.cache import Cache
from ipscheduler.framework.extender import (
    MAX_EXTENDER_PRIORITY,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderPreemptionArgs,
    ExtenderPreemptionResult,
    HostPriority,
)
from ipscheduler.framework.interface import MAX_NODE_SCORE, Code, CycleState, PreemptionAware, Status
from ipscheduler.framework.klog import V2, kv
from ipscheduler.framework.runtime import Framework
from ipscheduler.framework.types import NodeInfo, PodInfo

log = logging.getLogger(__name__)

ERR_UNKNOWN_NODE = "node(s) were not known to the extender yet"

PodReader = Callable[[str, str], Awaitable[PodInfo | None]]
"""``(uid, namespace/name) → the pod as the API server has it now (None: gone)``."""


class ExtenderVerbs:
    """The four verbs over ``profile`` and ``cache`` (nodes and bound pods, filled by the
    informers). ``read_pod`` reads a pod live before ``bind``."""

    def __init__(self, profile: Framework, cache: Cache, read_pod: PodReader) -> None:
        self.profile = profile
        self.cache = cache
        self.read_pod = read_pod

    # -- helpers ---------------------------------------------------------------------
    def _nodes(self, names: list[str], objects: Mapping[str, Mapping[str, Any]]) -> dict[str, NodeInfo]:
        """The candidate nodes as this cache knows them (with their pods); one the cache has
        not seen yet comes from the object kube-scheduler sent, if it sent one."""
        known = self.cache.nodes()
        out: dict[str, NodeInfo] = {}
        for name in names:
            node = known.get(name)
            if node is None and name in objects:
                try:
                    node = NodeInfo.from_obj(objects[name])
                except ValueError:
                    node = None
            if node is not None:
                out[name] = node
        return out

    # -- filter ----------------------------------------------------------------------
    def filter(self, args: ExtenderArgs) -> ExtenderFilterResult:
        """The candidates that pass PreFilter and every Filter, in the form they came in."""
        try:
            pod = PodInfo.from_obj(args.pod)
        except ValueError as e:
            return ExtenderFilterResult(error=f"cannot read the pod: {e}")
        names = args.candidate_names()
        objects = args.node_objects()
        nodes = self._nodes(names, objects)
        feasible, diagnosis = self.profile.find_feasible(CycleState(), pod, nodes, find_all=True)
        passed = {n.name for n in feasible}
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        for name in names:
            if name in passed:
                continue
            st = diagnosis.pre_filter or diagnosis.node_to_status.get(name)
            if st is None:  # not in the cache, and no object came with it
                failed[name] = ERR_UNKNOWN_NODE
                continue
            reason = "; ".join(st.reasons) or st.code.value
            (unresolvable if st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE else failed)[name] = reason
        keep = [n for n in names if n in passed]
        result = ExtenderFilterResult(failed_nodes=failed, failed_and_unresolvable_nodes=unresolvable)
        if args.node_names is not None:
            result.node_names = keep
        else:
            result.nodes = {**(args.nodes or {}), "items": [objects[n] for n in keep]}
        log.log(
            V2,
            "extender filter %s: %d of %d nodes pass",
            pod.key,
            len(keep),
            len(names),
            extra=kv(pod=pod.key, uid=pod.uid),
        )
        return result

    # -- prioritize --------------------------------------------------------------------
    def prioritize(self, args: ExtenderArgs) -> list[HostPriority]:
        """Every candidate's score, 0..10: the profile's weighted total over its weights
        (0..100) scaled by ``MAX_EXTENDER_PRIORITY / MAX_NODE_SCORE``; a node that does not
        pass the filters (or that the cache does not know) scores 0. Raises ValueError for
        a pod that cannot be read."""
        pod = PodInfo.from_obj(args.pod)
        names = args.candidate_names()
        nodes = self._nodes(names, args.node_objects())
        state = CycleState()
        feasible, _ = self.profile.find_feasible(state, pod, nodes, find_all=True)
        totals = self.profile.score_totals(state, pod, feasible) if feasible else {}
        weight = sum(w for _, w in self.profile.score) or 1
        return [
            HostPriority(host=n, score=totals.get(n, 0) * MAX_EXTENDER_PRIORITY // (weight * MAX_NODE_SCORE))
            for n in names
        ]

    # -- bind --------------------------------------------------------------------------
    async def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        """Reserve the pod on ``args.node``, then the framework's binding cycle (PreBind, Bind,
        PostBind, as the scheduler binds); ``Error`` (and nothing reserved) when it cannot be."""
        key = f"{args.pod_namespace}/{args.pod_name}"
        try:
            pod = await self.read_pod(args.pod_uid, key)
        except Exception as e:  # an API error: kube-scheduler retries the pod
            return ExtenderBindingResult(error=f"reading pod {key} failed: {e!r}")
        if pod is None:
            return ExtenderBindingResult(error=f"pod {key} (UID {args.pod_uid}) no longer exists")
        if pod.bound:
            if pod.node_name == args.node:
                return ExtenderBindingResult()  # a retry of a bind that went through
            return ExtenderBindingResult(error=f"pod {key} is already bound to {pod.node_name}")
        node = self.cache.nodes().get(args.node)
        if node is None:
            return ExtenderBindingResult(error=f"node {args.node} is not known to the extender yet")
        state = CycleState()
        feasible, diagnosis = self.profile.find_feasible(state, pod, {node.name: node}, find_all=True)
        if not feasible:
            st = diagnosis.pre_filter or diagnosis.node_to_status.get(node.name) or Status.unschedulable()
            return ExtenderBindingResult(error=f"{key} does not fit {node.name}: {'; '.join(st.reasons)}")
        st = await self.profile.run_reserve(state, pod, node)  # unreserves itself on failure
        if not st.is_success():
            return ExtenderBindingResult(error=f"reserve failed: {'; '.join(st.reasons)}")
        try:
            st = await self.profile.run_binding_cycle(state, pod, node)
        except Exception as e:
            st = Status.error(repr(e))
        if not st.is_success():
            await self.profile.run_unreserve(state, pod, node)
            log.warning(
                "extender bind of %s to %s failed: %s",
                key,
                node.name,
                "; ".join(st.reasons),
                extra=kv(pod=key, node=node.name, uid=pod.uid),
            )
            return ExtenderBindingResult(error="; ".join(st.reasons) or st.code.value)
        log.log(V2, "extender bound %s to %s", key, node.name, extra=kv(pod=key, node=node.name, uid=pod.uid))
        return ExtenderBindingResult()

    # -- preempt -----------------------------------------------------------------------
    def preempt(self, args: ExtenderPreemptionArgs) -> ExtenderPreemptionResult:
        """The candidate nodes where the pod fits once their victims are gone, with the
        victims unchanged (by UID). Raises ValueError for a pod that cannot be read."""
        pod = PodInfo.from_obj(args.pod)
        candidates = args.candidates()
        nodes = self._nodes(list(candidates), {})
        state = CycleState()
        _, diagnosis = self.profile.find_feasible(state, pod, nodes, find_all=True)
        if diagnosis.pre_filter is not None:
            return ExtenderPreemptionResult()
        aware = [p for p in self.profile.filter if isinstance(p, PreemptionAware)]
        kept = {}
        for name, victims in candidates.items():
            node = nodes.get(name)
            if node is None:
                continue
            uids = frozenset(v.uid for v in victims.pods)
            if all(p.fits_after_evicting(state, pod, node, uids) for p in aware):
                kept[name] = victims
        return ExtenderPreemptionResult(node_name_to_meta_victims=kept)
