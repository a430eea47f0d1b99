"""``ipscheduler explain [<namespace>/]<pod>`` (also ``kubectl ipscheduler explain``): why a pod
is (or would be) placed where.

A dry run of one scheduling cycle against live state: it lists nodes,
NodeIPPools and bound pods (and, for a pod with a Multus annotation, the
NetworkAttachmentDefinitions, when their API is served), runs PreFilter and Filter on every node and the
Score plugins on the feasible ones, and prints per node which filter
rejected the pod and why, or its scores. Nothing is written. The framework
is built as ``run`` builds it (:func:`ipscheduler.cmd.profiles.build_profile`),
so it honours ``--config``: its profile's plugins and score weights are the ones
evaluated and printed. The command line (``-n``, ``--context``) is in
:mod:`ipscheduler.cmd.tools`.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes_asyncio import client

from ipscheduler.backend.cache import Cache
from ipscheduler.cmd.profiles import build_profile
from ipscheduler.cmd.wiring import (
    BOUND_PODS_SELECTOR,
    bound_pod_parse,
    csi_node_parse,
    pv_parse,
    pvc_parse,
    storage_class_parse,
)
from ipscheduler.coscheduling.controller import POD_GROUPS
from ipscheduler.coscheduling.groups import GroupIndex, Member
from ipscheduler.coscheduling.models import POD_GROUP_LABEL, PodGroupView, group_key
from ipscheduler.framework.config import SchedulerConfiguration
from ipscheduler.framework.interface import CycleState
from ipscheduler.framework.runtime import Framework
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.framework.volumes import (
    CSINodeInfo,
    MapVolumeListers,
    PVCInfo,
    PVInfo,
    StorageClassInfo,
    VolumeListers,
)
from ipscheduler.kube.client import KubeApi, load_client_config
from ipscheduler.kube.informer import namespaced_key
from ipscheduler.plugins.defaultpreemption import DefaultPreemption
from ipscheduler.underlayip.args import Strategy
from ipscheduler.underlayip.cache import PoolCache
from ipscheduler.underlayip.families import annotated_ips
from ipscheduler.underlayip.informers import NETWORK_ATTACHMENT_DEFINITIONS, namespace_informer
from ipscheduler.underlayip.interfaces import (
    NetworkPools,
    further_interfaces,
    interface_entries,
    network_pools,
)
from ipscheduler.underlayip.models import ANNOTATION_IP, ANNOTATION_POOL, POOLS
from ipscheduler.underlayip.multus import NETWORKS_ANNOTATION
from ipscheduler.underlayip.plugin import UnderlayIPDeps
from ipscheduler.underlayip.pool import PoolView
from ipscheduler.underlayip.retention import retention_of
from ipscheduler.underlayip.selection import pool_choice, tenancy_problem
from ipscheduler.underlayip.sticky import kept_address
from ipscheduler.underlayip.writer import PoolWriter


@dataclasses.dataclass
class NodeVerdict:
    """One node's outcome: the rejecting plugin and reasons, or the scores."""

    node: str
    feasible: bool
    plugin: str = ""
    reasons: tuple[str, ...] = ()
    scores: Mapping[str, int] = dataclasses.field(default_factory=dict)
    total: int = 0


def evaluate(
    profile: Framework, pod: PodInfo, nodes: Mapping[str, NodeInfo]
) -> tuple[list[NodeVerdict], str]:
    """Run the scheduling cycle's PreFilter/Filter/Score for ``pod`` on every node (no
    ``percentageOfNodesToScore`` limit); no Reserve, no writes.

    Returns the per-node verdicts (feasible first, best total first) and
    the FailedScheduling-style summary (empty when some node fits).
    """
    state = CycleState()
    feasible, diagnosis = profile.find_feasible(state, pod, nodes, find_all=True)
    verdicts: list[NodeVerdict] = []
    if feasible:
        per_plugin = profile.run_scores(state, pod, feasible)
        totals = profile.total_scores(per_plugin, feasible)
        for n in feasible:
            scores = {p: s[n.name] for p, s in per_plugin.items()}
            verdicts.append(NodeVerdict(n.name, True, scores=scores, total=totals[n.name]))
        verdicts.sort(key=lambda v: (-v.total, v.node))
    rejected = diagnosis.node_to_status
    for name in sorted(nodes):
        if name in rejected:
            st = rejected[name]
            verdicts.append(NodeVerdict(name, False, plugin=st.plugin, reasons=st.reasons))
        elif diagnosis.pre_filter is not None:
            st = diagnosis.pre_filter
            verdicts.append(NodeVerdict(name, False, plugin=st.plugin or "PreFilter", reasons=st.reasons))
    return verdicts, ("" if feasible else diagnosis.message())


def pools_line(pod: PodInfo, cache: PoolCache) -> str:
    """Which NodeIPPools ``pod`` may use, and why (:mod:`ipscheduler.underlayip.selection`)."""
    choice = pool_choice(pod, cache.default_pools(pod.namespace))
    if choice.problem:
        return f"Pools: none ({choice.problem})"
    reserved = sorted(p.name for p in cache.namespaced_pools().values() if not p.serves(pod.namespace))
    but = f"; not {', '.join(reserved)} (reserved for other namespaces)" if reserved else ""
    if not choice.names:
        return f"Pools: any pool of the node{but}"
    return f"Pools: {', '.join(choice.names)} (in this order, from {choice.source}){but}"


def address_line(pod: PodInfo, cache: PoolCache) -> str:
    """For a bound pod carrying ``ipscheduler.io/pool``: its address, its pool, and whether
    the pool records it; when not, and the pod may not use the pool, the rule that refuses
    it (:func:`~ipscheduler.underlayip.selection.tenancy_problem`: the scheduler does not
    adopt such a pod, the CNI plugin refuses it). ``""`` for any other pod."""
    pool_name = pod.annotations.get(ANNOTATION_POOL)
    if not pod.node_name or not pool_name:
        return ""
    ips = annotated_ips(pod.annotations)
    label = "Addresses" if len(ips) > 1 else "Address"
    shown = ", ".join(ips) or pod.annotations.get(ANNOTATION_IP) or "(slot)"
    what = f"{label}: {shown} of NodeIPPool {pool_name}"
    pool = cache.pool(pool_name)
    if pool is None:
        return f"{what} (the pool does not exist)"
    if pod.uid in pool.allocations:
        return f"{what} (recorded, {pool.allocations[pod.uid].phase})"
    problem = tenancy_problem(pod, pool, cache.default_pools(pod.namespace))
    if problem is not None:
        return f"{what} (not recorded: the pod may not use the pool: {problem})"
    return f"{what} (not recorded)"


def interfaces_line(pod: PodInfo, cache: PoolCache) -> str:
    """The pod's further interfaces (:mod:`ipscheduler.underlayip.interfaces`): for a bound
    pod, each one's addresses and pool from its ``ipscheduler.io/interfaces`` and whether the
    pool records them; else the pools each may use. ``""`` for a pod with none."""
    asked = further_interfaces(pod, cache.networks)
    if asked.problem:
        return f"Interfaces: {asked.problem}"
    parts = []
    entries = interface_entries(pod.annotations) if pod.node_name else {}
    for need in asked.interfaces:
        entry = entries.get(need.interface)
        if entry is None:
            parts.append(f"{need.interface} from {', '.join(need.choice.names)}")
            continue
        pool = cache.pool(str(entry.get("pool")))
        held = (
            pool is not None
            and (a := pool.allocations.get(pod.uid)) is not None
            and a.interface == need.interface
        )
        ips = ", ".join(str(ip) for ip in entry.get("ips") or ())
        state = "recorded" if held else "not recorded"
        parts.append(f"{need.interface} {ips} of NodeIPPool {entry.get('pool')} ({state})")
    return f"Interfaces: {'; '.join(parts)}" if parts else ""


def retention_line(pod: PodInfo, cache: PoolCache) -> str:
    """The pod's release policy and the address its identity keeps, if any
    (:mod:`ipscheduler.underlayip.retention`)."""
    retention = retention_of(pod)
    line = f"Release policy: {retention.policy}"
    if retention.identity:
        line += f" (identity {retention.identity})"
    if retention.problem:
        line += f"; {retention.problem}"
    kept = kept_address(cache, pod, retention, datetime.datetime.now(datetime.UTC))
    if kept is not None:
        line += f"; {kept.describe()}"
    return line


def group_line(pod: PodInfo, groups: GroupIndex) -> str:
    """The pod's PodGroup as Coscheduling sees it (``""`` for a pod outside a group): its
    ``minMember``, its pods bound and pending, and that a node found here still waits at
    Permit for the rest of the group."""
    found = groups.lookup(pod.namespace, pod.labels)
    if found.key is None:
        return ""
    if found.group is None:
        return f"PodGroup: {found.key} ({found.why})"
    key, group = found.key, found.group
    members = [m for m in groups.members_of(key) if m.active]
    bound = sum(1 for m in members if m.node_name)
    line = f"PodGroup: {key}, minMember {group.min_member}: {len(members)} pods, {bound} bound"
    if bound < group.min_member:
        line += f"; a node found here holds the pod at Permit until {group.min_member} are placed"
    return line


async def preemption_line(profile: Framework, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> str:
    """What DefaultPreemption would do for ``pod`` if it fits no node, without doing it
    (its :class:`~ipscheduler.framework.preemption.Evaluator`'s ``plan``: the victims on
    the node it would nominate, or why preemption would not help); "" when the pod fits or
    the profile does not preempt."""
    plugin = next((p for p in profile.post_filter if isinstance(p, DefaultPreemption)), None)
    if plugin is None:
        return ""
    state = CycleState()
    feasible, diagnosis = profile.find_feasible(state, pod, nodes, find_all=True)
    if feasible:
        return ""
    plan = await plugin.evaluator.plan(state, pod, diagnosis.node_to_status)
    if plan.candidate is None:
        return f"Preemption: would not help: {plan.status.message}"
    victims = ", ".join(f"{v.key} (priority {v.priority})" for v in plan.victims)
    return f"Preemption: would evict {victims} on {plan.candidate.node}, and nominate the pod there."


def render(
    pod: PodInfo,
    verdicts: list[NodeVerdict],
    summary: str,
    weights: Mapping[str, int],
    pools: str = "",
    preemption: str = "",
) -> str:
    """Human-readable table, kubectl style; ``pools``: :func:`pools_line`, printed under the
    pod's line when given; ``preemption``: :func:`preemption_line`, after the summary."""
    where = f"bound to {pod.node_name}" if pod.node_name else "Pending"
    lines = [
        f"Pod {pod.key} ({where}; priority {pod.priority}; QoS {pod.qos_class}; "
        f"scheduler {pod.scheduler_name})",
        *([pools] if pools else []),
        "",
    ]
    rows = [("NODE", "RESULT", "FILTER / SCORE", "DETAIL")]
    for v in verdicts:
        if v.feasible:
            detail = ", ".join(f"{p} {s}x{weights.get(p, 1)}" for p, s in v.scores.items())
            rows.append((v.node, "feasible", f"total {v.total}", detail))
        else:
            rows.append((v.node, "rejected", v.plugin, ", ".join(v.reasons)))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        lines.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(r[:3])) + "  " + r[3])
    lines.append("")
    if summary:
        lines.append(f"Unschedulable: {summary}")
        if preemption:
            lines.append(preemption)
    else:
        best = next(v for v in verdicts if v.feasible)
        lines.append(f"Would be scheduled to {best.node} (highest total score).")
    return "\n".join(lines) + "\n"


def explain_profile(
    cache: PoolCache,
    api: KubeApi,
    writer: PoolWriter,
    config: SchedulerConfiguration | None,
    scheduler_name: str = "ip-scheduler",
    strategy: Strategy = "spread",
    groups: GroupIndex | None = None,
    volumes: VolumeListers | None = None,
) -> Framework:
    """The framework ``explain`` evaluates: ``run``'s (:func:`~ipscheduler.cmd.profiles.build_profile`)
    for ``config`` (the ``--config`` file; None: the defaults for ``scheduler_name``), with
    ``strategy`` (``--ip-strategy``) unless the file sets UnderlayIP's, Coscheduling over
    ``groups``, the volume plugins over ``volumes`` (None: empty listers). Raises ValueError
    as build_profile does (e.g. a profile that disables the UnderlayIP filter)."""
    if config is None:
        config = SchedulerConfiguration.defaults(scheduler_name)
    return build_profile(
        UnderlayIPDeps(cache, writer), config, api=api, strategy=strategy, groups=groups, volumes=volumes
    )


async def volume_listers_for(api: KubeApi, pod: PodInfo) -> MapVolumeListers:
    """The storage objects as the scheduler's informers hold them, LISTed, for a pod with
    claims (a pod without any gets empty listers: nothing is read, so no storage RBAC is
    needed). Raises what the reads raise."""
    if not pod.pvc_names and not pod.ephemeral_pvc_names:
        return MapVolumeListers()
    core, storage = client.CoreV1Api(api.client), client.StorageV1Api(api.client)
    objects: list[PVCInfo | PVInfo | StorageClassInfo | CSINodeInfo] = []
    for call, parse in (
        (core.list_persistent_volume_claim_for_all_namespaces, pvc_parse),
        (core.list_persistent_volume, pv_parse),
        (storage.list_storage_class, storage_class_parse),
        (storage.list_csi_node, csi_node_parse),
    ):
        body = await api.read_json(call(_preload_content=False))
        items = body.get("items") if isinstance(body, dict) else None
        for item in items if isinstance(items, list) else []:
            view = parse(item) if isinstance(item, dict) else None
            if view is not None:
                objects.append(view)
    return MapVolumeListers.of(*objects)


async def group_index_for(api: KubeApi, pod: PodInfo) -> GroupIndex:
    """The PodGroup index as the scheduler would hold it for ``pod``: its PodGroup and the
    pods of its group (LISTed), or an empty index for a pod outside a group. Raises what
    the reads raise."""
    index = GroupIndex()
    key = group_key(pod.namespace, pod.labels)
    if key is None:
        return index
    if not await api.serves(POD_GROUPS):
        index.installed = False
        return index
    for body in await api.list_cluster_objects(POD_GROUPS):
        try:
            view = PodGroupView.from_obj(body)
        except ValueError as e:
            meta = body.get("metadata") or {}
            index.invalid[f"{meta.get('namespace')}/{meta.get('name')}"] = str(e)
            continue
        if view.key == key:
            index.set_group(key, view)
    selector = f"{POD_GROUP_LABEL}={pod.labels[POD_GROUP_LABEL]}"
    for body in await api.list_pods("", selector):
        member = Member.from_obj(body)
        if member is not None and member.namespace == pod.namespace:
            index.set_member(member.uid, member)
    return index


async def networks_for(api: KubeApi, pod: PodInfo) -> dict[str, tuple[NetworkPools]]:
    """The NetworkAttachmentDefinitions of ours as the scheduler's informer holds them
    (``namespace/name`` → (their pools,)), LISTed, for a pod with a Multus annotation; none
    for another pod, or when their API is not served (nothing is read then, so no Multus
    RBAC is needed). Raises what the reads raise."""
    if NETWORKS_ANNOTATION not in pod.annotations or not await api.serves(NETWORK_ATTACHMENT_DEFINITIONS):
        return {}
    out: dict[str, tuple[NetworkPools]] = {}
    for body in await api.list_cluster_objects(NETWORK_ATTACHMENT_DEFINITIONS):
        key, pools = namespaced_key(body), network_pools(body)
        if key is not None and pools is not None:
            out[key] = (pools,)
    return out


def caches_from(
    nodes: Iterable[dict[str, Any]],
    bound_pods: Iterable[dict[str, Any]],
    pools: Iterable[dict[str, Any]],
    leave_out: str = "",
) -> PoolCache:
    """A PoolCache over a node :class:`Cache` filled from LISTed bodies, as the informers
    fill them: nodes, bound pods (any pod; unbound or terminal ones are left out, as is
    the pod with UID ``leave_out``) and NodeIPPools. Raises ValueError for a node or pool
    that does not parse."""
    node_cache = Cache()
    for body in nodes:
        node_cache.add_node(NodeInfo.from_obj(body))
    for body in bound_pods:
        pod = bound_pod_parse(body)
        if pod is not None and pod.uid != leave_out:
            node_cache.add_pod(pod)
    node_cache.ready.set()
    cache = PoolCache(node_cache)
    cache.attach({p.name: [p] for p in (PoolView.from_obj(b) for b in pools)})
    return cache


async def explain(
    kubeconfig: str | None,
    target: str,
    scheduler_name: str = "ip-scheduler",
    strategy: Strategy = "spread",
    config: SchedulerConfiguration | None = None,
    context: str | None = None,
) -> tuple[int, str]:
    """``(exit status, text)`` for pod ``target`` (``namespace/name``), read through the
    kubeconfig's ``context`` (None: its current one): 0 when some node fits, 1 when none
    does, 2 on bad input (including a ``config`` no framework can be built from). Raises what
    the reads raise (``ApiException``, ``ConfigException``)."""
    namespace, _, name = target.partition("/")
    if not namespace or not name:
        return 2, f"explain: expected <namespace>/<pod>, got {target!r}\n"
    api = KubeApi(client.ApiClient(await load_client_config(kubeconfig, context)))
    try:
        body = await api.get_pod(namespace, name)
        if body is None:
            return 2, f"explain: pod {target} not found\n"
        pod = PodInfo.from_obj(body)
        cache = caches_from(
            await api.list_nodes(),
            await api.list_pods(BOUND_PODS_SELECTOR),
            await api.list_cluster_objects(POOLS),
            leave_out=pod.uid,  # explain a bound pod as if it were pending again
        )
        defaults = namespace_informer().parse(await api.get_namespace(namespace) or {})
        if defaults is not None:
            cache.attach_namespaces({namespace: (defaults,)})
        cache.attach_networks(await networks_for(api, pod))
        try:
            groups = await group_index_for(api, pod)
            profile = explain_profile(
                cache,
                api,
                PoolWriter(api, cache),
                config,
                scheduler_name,
                strategy,
                groups,
                await volume_listers_for(api, pod),
            )
        except ValueError as e:
            return 2, f"explain: invalid --config: {e}\n"
        nodes = cache.node_cache.snapshot()
        pending = dataclasses.replace(pod, node_name="")
        verdicts, summary = evaluate(profile, pending, nodes)
        preemption = await preemption_line(profile, pending, nodes) if summary else ""
        weights = {p.name: w for p, w in profile.score}
        lines = f"{pools_line(pod, cache)}\n{retention_line(pod, cache)}"
        if address := address_line(pod, cache):
            lines += f"\n{address}"
        if further := interfaces_line(pod, cache):
            lines += f"\n{further}"
        group = group_line(pod, groups)
        if group:
            lines += f"\n{group}"
        return (0 if not summary else 1), render(pod, verdicts, summary, weights, lines, preemption)
    finally:
        await api.close()
