"""The clock of Releasing allocations: when the address of a gone pod goes back to its pool.

The rules are :mod:`ipscheduler.underlayip.teardown`'s (pure); this module keeps what they
need and acts on it: the state of every node (from the node informer, read when a node
appears or its readiness changes, not on every heartbeat), one timer per Releasing
allocation at the moment it may go, and that move itself (``allocator.settle``, CAS through
the pool writer). The pool controller feeds it the informers' events and asks it whether a
gone pod's node confirmed the teardown; the GC sweep (the
:class:`~ipscheduler.underlayip.reconciler.Reconciler`) plans with the same node states and
settles what a timer missed (a restart, another replica's allocation).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable
from typing import Any

from ipscheduler.backend.supervisor import TaskSet
from ipscheduler.framework.aio import KeyedTimers
from ipscheduler.framework.interface import Requeue
from ipscheduler.framework.types import NodeInfo
from ipscheduler.underlayip import allocator, events
from ipscheduler.underlayip.cache import PoolCache
from ipscheduler.underlayip.models import RELEASING, NodeIPPoolStatus
from ipscheduler.underlayip.pool import PoolView, utc_now
from ipscheduler.underlayip.teardown import (
    DEFAULT_RELEASE_DELAY,
    NodeState,
    confirmed,
    node_state,
    release_at,
)
from ipscheduler.underlayip.writer import PoolWriter

log = logging.getLogger(__name__)

MOVES: dict[str, tuple[str, str, Callable[..., NodeIPPoolStatus | None]]] = {
    "retain": ("is retained for its identity", "retained", allocator.retain),
    "await_teardown": (
        "is Releasing until its node lets it go",
        "releasing",
        functools.partial(allocator.retain, confirmed=False),
    ),
    "settle": ("let go", "settled", allocator.settle),
}
"""The repairs of :func:`~ipscheduler.underlayip.repair.plan` for a gone pod's allocation that
its release policy keeps, or that waits for its node: action → (what the log line says, the
count it adds to, the allocator's move, called with ``uid`` and ``now``)."""


class ReleaseClock:
    """Node states, one timer per Releasing allocation, and the settle write (module doc).

    Built by the wiring and handed to the
    :class:`~ipscheduler.underlayip.reconciler.Reconciler` (the controller holds it through
    its repairs). ``delay``: ``--release-delay`` in seconds. ``requeue``: told
    ``AddressReleased`` once an address went back to its pool. The settle writes run in
    :attr:`tasks`, cancelled by :meth:`stop`."""

    def __init__(
        self,
        cache: PoolCache,
        writer: PoolWriter,
        *,
        requeue: Requeue = lambda event, old, new: None,
        delay: float = DEFAULT_RELEASE_DELAY,
    ) -> None:
        self.cache = cache
        self.writer = writer
        self.tasks = TaskSet()
        """The settle writes in flight."""
        self.requeue = requeue
        self.delay = delay
        self.nodes: dict[str, NodeState] = {}
        """The nodes that exist, by name, as the node informer has them."""
        self._timers: KeyedTimers[tuple[str, str]] = KeyedTimers()

    async def stop(self) -> None:
        """Cancel every timer and the settle writes in flight (the GC sweep settles what is
        left, in this or another replica)."""
        self._timers.cancel_all()
        await self.tasks.cancel()

    def confirmed(self, node_name: str, kubelet: bool) -> bool:
        """Did the node ``node_name`` let a gone pod's address go (:func:`~ipscheduler.
        underlayip.teardown.confirmed`; ``kubelet``: the kubelet ended the pod)? Before the
        caches are ready (the pool cache is attached once the node informer has synced) a node
        missing from :attr:`nodes` may just not be listed yet: only the kubelet counts then."""
        if not self.cache.ready.is_set():
            return kubelet
        return confirmed(kubelet, self.nodes.get(node_name))

    def on_node_event(
        self, name: str, body: dict[str, Any], old: NodeInfo | None, new: NodeInfo | None
    ) -> None:
        """Keep node ``name``'s state; a node deleted, or turned Ready, has the Releasing
        allocations of its pools looked at again."""
        if new is None:
            if self.nodes.pop(name, None) is not None:
                self._arm_node(name)
        elif old is None or old.ready != new.ready or name not in self.nodes:
            self.nodes[name] = node_state(body)
            if new.ready:
                self._arm_node(name)

    def _arm_node(self, node: str) -> None:
        for pool in self.cache.pools_for_node(node):
            self.arm(pool)

    def arm(self, pool: PoolView) -> None:
        """Arm a timer for each Releasing allocation of ``pool`` (the status counts them: a pool
        with none costs nothing) at the moment it may go (:func:`~ipscheduler.underlayip.
        teardown.release_at`); none while its node is not Ready (armed when the node turns
        Ready or is deleted), and none before the caches are ready (the controller arms every
        pool then). Needs a running event loop (none: nothing is armed)."""
        if not pool.status.releasing or not self.cache.ready.is_set():
            return
        node = self.nodes.get(pool.node_name)
        now = utc_now()
        for uid, a in pool.allocations.items():
            if a.phase != RELEASING:
                continue
            when = release_at(a.releasing_since or a.since, node, self.delay)
            if when is not None:
                with contextlib.suppress(RuntimeError):
                    self._timers.call_later((pool.name, uid), (when - now).total_seconds(), self._due)

    def _due(self, key: tuple[str, str]) -> None:
        self.tasks.spawn(self.settle(*key), f"settle {key[1]} in {key[0]}")

    async def settle(self, pool_name: str, uid: str) -> None:
        """Pod ``uid``'s Releasing allocation in ``pool_name`` goes (Retained or released by its
        policy: :func:`~ipscheduler.underlayip.allocator.settle`) if its time came, as the pool
        and its node are now; a timer fired early is armed again. A failed write is logged;
        the GC sweep settles it later."""
        pool = self.cache.pool(pool_name)
        a = pool.allocations.get(uid) if pool is not None else None
        if pool is None or a is None or a.phase != RELEASING:
            return
        when = release_at(a.releasing_since or a.since, self.nodes.get(pool.node_name), self.delay)
        if when is None:
            return
        if when > utc_now():
            self.arm(pool)
            return
        try:
            await self.writer.submit(pool_name, functools.partial(allocator.settle, uid=uid, now=utc_now()))
        except Exception as e:
            log.warning(
                "letting %s of %s go in %s failed (%r); the GC sweep retries", a.ip, a.pod, pool_name, e
            )
            return
        log.info("%s of %s in pool %s let go: its node had time to tear the pod down", a.ip, a.pod, pool_name)
        self.requeue(events.ADDRESS_RELEASED, None, None)
