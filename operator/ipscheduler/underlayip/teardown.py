"""When a gone pod's node has let its address go: the release rules, pure, no I/O.

The API server removes a pod deleted without its grace period at once
(``kubectl delete --grace-period=0 --force``, ``terminationGracePeriodSeconds: 0``, a
StatefulSet pod force-deleted to unstick it, the pod garbage collector removing the pods of a
lost node), while the kubelet's CNI DEL of its sandbox may come seconds later (minutes with
the kubelet down). Released at once, the address could go to a new pod whose sandbox comes up
beside the old one: two live interfaces with one address on an underlay network.

So a pod's address goes back to the pool at once only when the node confirmed the teardown,
or no sandbox can hold it:

- the kubelet ended the pod (:func:`kubelet_let_go`): it turned terminal, or its deletion was
  graceful, which only the kubelet completes, after it stopped the containers and the sandbox
  (CNI DEL) (``pkg/kubelet/status/status_manager.go``, ``canBeDeleted``);
- its node no longer exists (deleted from the cluster: its sandboxes are gone with it);
- its node is simulated by kwok (annotation :data:`SIMULATED_NODE_ANNOTATION`): no runtime,
  no sandbox, no interface.

Any other removal leaves the allocation ``Releasing`` (still taken, shown by ``kubectl get
nip`` and ``ipscheduler ip list``) until the node has been Ready for ``--release-delay``
(:func:`release_at`): from the moment the pod was seen gone, or the moment the node turned
Ready again when it was not (a node that is not Ready may hold the sandbox as long as it
likes; a kubelet that comes back tears its orphans down within seconds). Spiderpool's GC
waits an ``additionalGraceDelay`` for the same reason. The node itself is the last line of
defence: ``ipscheduler-ipam`` refuses an address that another sandbox on the node still holds
(``cni/internal/ledger``), so a delay that was too short costs the next pod a retried sandbox,
never an address on two interfaces.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ipscheduler.framework.types import TERMINAL_PHASES
from ipscheduler.underlayip.models import BOUND, RESERVED, Allocation

SIMULATED_NODE_ANNOTATION = "kwok.x-k8s.io/node"
"""kwok's annotation on the nodes it simulates (``fake``): such a node runs no container
runtime, so no sandbox ever holds an address there."""

DEFAULT_RELEASE_DELAY = 15.0
"""``--release-delay``'s default, in seconds: about twice the longest teardown of a
force-deleted pod seen on a busy node (7 s with 50 pods deleted at once)."""


@dataclass(frozen=True)
class NodeState:
    """What the release rules need of a node that exists.

    ``ready``: its Ready condition is True; ``ready_since``: that condition's
    ``lastTransitionTime`` (None when absent or unparsable); ``simulated``: kwok simulates it
    (:data:`SIMULATED_NODE_ANNOTATION`)."""

    ready: bool
    ready_since: datetime.datetime | None = None
    simulated: bool = False


def node_state(body: Mapping[str, Any]) -> NodeState:
    """The :class:`NodeState` of a Node body (malformed fields read as absent)."""
    meta = body.get("metadata")
    status = body.get("status")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    simulated = isinstance(annotations, Mapping) and bool(annotations.get(SIMULATED_NODE_ANNOTATION))
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for c in conditions if isinstance(conditions, list) else []:
        if isinstance(c, Mapping) and c.get("type") == "Ready":
            ready = c.get("status") == "True"
            return NodeState(ready, _time(c.get("lastTransitionTime")) if ready else None, simulated)
    return NodeState(False, None, simulated)


def _time(value: object) -> datetime.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        t = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=datetime.UTC)


def kubelet_let_go(last: Mapping[str, Any]) -> bool:
    """Did the kubelet end this pod, tearing its sandbox down, before it left the watch of bound
    pods? ``last`` is the object of the DELETED event: a watch narrowed by a field selector
    reports a pod that stops matching (turned terminal) with its previous state, the last one
    it matched (``k8s.io/apiserver/pkg/storage/cacher/cache_watcher.go``,
    ``convertToWatchEvent``), and a pod deleted with its last state. True when that state

    - is terminal (``Succeeded``/``Failed``);
    - has no ``deletionTimestamp``: the pod left the selection without a deletion, by turning
      terminal, which for a bound pod only its kubelet reports;
    - has one with a ``deletionGracePeriodSeconds`` above 0: a graceful deletion, which only the
      kubelet completes (it stops the containers and the sandbox, CNI DEL included, then
      reports the pod terminal or deletes it; ``pkg/kubelet/status/status_manager.go``).

    False for a grace period of 0 (``--force --grace-period=0``, ``terminationGracePeriodSeconds:
    0``, the pod garbage collector: the API server marks the pod with 0 and removes it at once,
    also when it shortens a graceful deletion) and for a re-LIST's DELETED, which carries no
    state."""
    meta, status = last.get("metadata"), last.get("status")
    if not isinstance(meta, Mapping) or not isinstance(status, Mapping):
        return False
    if status.get("phase") in TERMINAL_PHASES or meta.get("deletionTimestamp") is None:
        return True
    grace = meta.get("deletionGracePeriodSeconds")
    return isinstance(grace, int) and not isinstance(grace, bool) and grace > 0


def on_an_interface(a: Allocation) -> bool:
    """May a sandbox's interface hold allocation ``a``'s address: a Reserved or Bound one with
    an address (a count-only slot, a Nominated place or a Retained one has none on the node)?
    Only such an allocation waits ``Releasing`` for its node."""
    return a.ip is not None and a.phase in (RESERVED, BOUND)


def confirmed(kubelet: bool, node: NodeState | None) -> bool:
    """Has the address of a pod that is gone left every sandbox? True when the kubelet ended
    the pod (``kubelet``: :func:`kubelet_let_go`), when its node no longer exists (``node``
    None) or when kwok simulates it; else it goes ``Releasing``."""
    return kubelet or node is None or node.simulated


def release_at(
    releasing_since: datetime.datetime, node: NodeState | None, delay: float
) -> datetime.datetime | None:
    """When a ``Releasing`` allocation (its pod seen gone at ``releasing_since``) may go: at
    once (``releasing_since``) when its node no longer exists (``node`` None) or is simulated;
    None while the node is not Ready (it waits for Ready); else ``delay`` seconds
    (``--release-delay``) after the later of ``releasing_since`` and the node's turning
    Ready."""
    if releasing_since.tzinfo is None:
        releasing_since = releasing_since.replace(tzinfo=datetime.UTC)
    if node is None or node.simulated:
        return releasing_since
    if not node.ready:
        return None
    start = max(releasing_since, node.ready_since) if node.ready_since is not None else releasing_since
    return start + datetime.timedelta(seconds=delay)
