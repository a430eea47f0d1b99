"""When a gone pod's node has let its address go: the release rules, pure, no I/O.

The API server removes a pod deleted without its grace period at once
(``kubectl delete --grace-period=0 --force``, ``terminationGracePeriodSeconds: 0``, a
StatefulSet pod force-deleted to unstick it, the pod garbage collector removing the pods of a
lost node), while the kubelet's CNI DEL of its sandbox may come seconds later (minutes with
the kubelet down). Released at once, the address could go to a new pod whose sandbox comes up
beside the old one: two live interfaces with one address on an underlay network.

So a pod's address goes back to the pool at once only when the node confirmed the teardown,
or no sandbox can hold it:

- the kubelet reported the pod terminal (``Succeeded``/``Failed``) before it was removed: a
  graceful deletion, where the kubelet stops the containers and the sandbox (CNI DEL) before
  it reports the terminal phase and deletes the pod (``pkg/kubelet/status/status_manager.go``,
  ``canBeDeleted``; since Kubernetes 1.27 a pod being deleted is given a terminal phase first);
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


def reported_terminal(body: Mapping[str, Any]) -> bool:
    """Does a pod's last state (a DELETED watch event's object) show it terminal, as the
    kubelet reports it once it stopped the pod's containers and sandbox? A re-LIST's DELETED
    carries no state: False."""
    status = body.get("status")
    return isinstance(status, Mapping) and status.get("phase") in ("Succeeded", "Failed")


def confirmed(reported_terminal: bool, node: NodeState | None) -> bool:
    """Has the address of a pod that is gone left every sandbox? True when the kubelet
    reported the pod terminal before it went (``reported_terminal``), when its node no longer
    exists (``node`` None) or when kwok simulates it; else it goes ``Releasing``."""
    return reported_terminal or node is None or node.simulated


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
