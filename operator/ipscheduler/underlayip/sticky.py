"""Sticky addresses: which address a pod's identity keeps, the retain timer, re-homing.

The release policies themselves (what a pod keeps, for whom) are
:mod:`ipscheduler.underlayip.retention`; this module decides what they mean for one
pending pod now, for UnderlayIP's PreFilter and for ``ipscheduler explain`` alike
(:func:`kept_address`), and carries the acts that go with it (:class:`StickyAddresses`):
a Warning when a policy cannot be honoured, the timer that activates a pod pinned to its
retained address's node when its retain-timeout is reached, and the release of the old
address once a pod that waited too long was placed anew.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

from ipscheduler.framework.aio import KeyedTimers
from ipscheduler.framework.interface import EventRecorder
from ipscheduler.framework.types import PodInfo
from ipscheduler.underlayip import allocator
from ipscheduler.underlayip.cache import PoolCache
from ipscheduler.underlayip.models import NOMINATED, RELEASING, RETAINED, Allocation
from ipscheduler.underlayip.pool import PoolView, age
from ipscheduler.underlayip.retention import Retention, claims
from ipscheduler.underlayip.writer import PoolWriter

log = logging.getLogger(__name__)

REFUSALS_REMEMBERED = 10_000
"""Pods remembered as told ``ReleasePolicyRefused`` (a bound on memory; past it, at worst an
event is said twice)."""


@dataclass(frozen=True)
class Claim:
    """An allocation recorded for a pod's identity: in ``pool``, under the UID ``uid`` of the
    pod that had it."""

    pool: PoolView
    uid: str
    allocation: Allocation


PINNED: Final = "pinned"
REHOME: Final = "rehome"
WAITING: Final = "waiting"


@dataclass(frozen=True)
class KeptAddress:
    """What the address a pod's identity keeps (``claim``) means for the pod now, by ``kind``:

    - ``pinned``: it is Retained; the pod may go only to its pool's node (``timeout_in``:
      seconds until the pod's retain-timeout, None for never);
    - ``rehome``: it is Retained, and the pod waited for its node longer than its
      retain-timeout: the pod is placed anew and this address released once the new one is
      written;
    - ``waiting``: it is still recorded for the previous pod of the identity (that pod is
      gone; the pool controller is about to retain it, or waits Releasing for its node to let
      it go): the pod waits.
    """

    kind: Literal["pinned", "rehome", "waiting"]
    claim: Claim
    timeout_in: float | None = None

    def describe(self) -> str:
        """One line for ``explain``: the address, and where it holds the pod or why not."""
        pool, a = self.claim.pool, self.claim.allocation
        what = f"retained address {a.ip or '(slot)'} of pool {pool.name} on {pool.node_name}"
        if self.kind == PINNED:
            until = (
                "" if self.timeout_in is None else f" for {self.timeout_in:.0f}s more (its retain-timeout)"
            )
            return f"{what}: the pod may go to {pool.node_name} only{until}"
        if self.kind == REHOME:
            return f"{what}: past the pod's retain-timeout, so placed anew and that address released"
        if a.phase == RELEASING:
            return (
                f"address {a.ip} of pool {pool.name} is Releasing: the previous pod {a.pod} was removed "
                f"before {pool.node_name} confirmed its teardown; the pod waits until it is retained"
            )
        return (
            f"address {a.ip or '(slot)'} of pool {pool.name} still recorded for the previous pod "
            f"{a.pod}: the pod waits until it is retained"
        )


def kept_address(
    cache: PoolCache, pod: PodInfo, retention: Retention, now: datetime.datetime
) -> KeptAddress | None:
    """The address ``pod``'s identity keeps (release policies StatefulSet and Never; a pod of
    policy Pod still gets back one kept with Never for its name) as :class:`KeptAddress`, or
    None when it keeps none (:func:`~ipscheduler.underlayip.retention.claims` decides which
    allocations the pod takes back). The pod's wait for its retained address's node counts
    from the latest of its creation, the allocation's ``retainedSince`` and ``since`` (to
    the microsecond, against ``now``, timezone-aware UTC). Only the pod's first interface's
    allocations count (a further interface's, recording an ``interface``, follow it)."""
    identity = retention.identity or pod.key
    # The first interface's address pins the pod; a further interface's follows it (its own
    # pool takes it back in that cycle: allocator.to_take_back).
    recorded = [(pool, uid, a) for pool, uid, a in cache.kept_for(identity) if a.interface is None]
    # The pod's own allocations of the identity come first, not yet Retained ones before
    # Retained ones (a preemption's Nominated place aside): another cycle took the address
    # back for it, or its Unreserve kept it (pinned to it as to another UID's).
    own = sorted(
        ((pool, uid, a) for pool, uid, a in recorded if uid == pod.uid and a.phase != NOMINATED),
        key=lambda entry: entry[2].phase == RETAINED,
    )
    for pool, uid, a in [*own, *claims(pod.uid, retention, recorded)]:
        claim = Claim(pool, uid, a)
        if a.phase != RETAINED:
            # Recorded for the identity's previous pod, another UID of the same name (gone
            # from the API server: a StatefulSet makes the next one only then, even if this
            # process's informer has not said so yet), or for this very pod by another cycle
            # (another active replica's, racing this one) or bound with it (the informer
            # lags). The pod waits for that address, never takes a second one.
            return KeptAddress(WAITING, claim)
        start = max(t for t in (pod.creation, a.retained_since, a.since) if t is not None)
        waited = age(start, now)
        if retention.timeout is not None and waited > retention.timeout:
            return KeptAddress(REHOME, claim)
        return KeptAddress(PINNED, claim, None if retention.timeout is None else retention.timeout - waited)
    return None


class StickyAddresses:
    """The acts of the sticky-address policy for UnderlayIP (see the module doc).

    ``writer``: releases a re-homed pod's old address. ``activate(uids)``: moves pods to
    activeQ (the framework handle's ``activate``; None: a pinned pod waits for another event).
    ``recorder``: posts ``ReleasePolicyRefused`` and ``AddressRehomed`` (None: logged only).
    ``rehomed()``: counts the pods placed anew (``ipscheduler_pods_rehomed_total``)."""

    def __init__(
        self,
        writer: PoolWriter,
        activate: Callable[[set[str]], object] | None = None,
        recorder: EventRecorder | None = None,
        rehomed: Callable[[], object] | None = None,
    ) -> None:
        self.writer = writer
        self.activate = activate
        self.recorder = recorder
        self.rehomed = rehomed
        self._timers: KeyedTimers[str] = KeyedTimers()
        self._refusals: set[str] = set()

    def refused(self, pod: PodInfo, problem: str) -> None:
        """Say once per pod (Warning ``ReleasePolicyRefused``) that its release-policy or
        retain-timeout annotation cannot be honoured as written, and what is used instead."""
        if pod.uid in self._refusals:
            return
        if len(self._refusals) >= REFUSALS_REMEMBERED:
            self._refusals.clear()
        self._refusals.add(pod.uid)
        log.warning("%s: %s", pod.key, problem)
        if self.recorder is not None:
            self.recorder.emit(pod.ref, "Warning", "ReleasePolicyRefused", problem)

    def activate_at_timeout(self, uid: str, seconds: float) -> None:
        """Activate pod ``uid`` (and it alone) once its retain-timeout is reached, ``seconds``
        from now (one timer per pod; nothing without an event loop or an activator)."""
        if self.activate is None or uid in self._timers:
            return
        activate = self.activate
        with contextlib.suppress(RuntimeError):  # no event loop: a synchronous caller (tests)
            self._timers.call_later(uid, seconds + 0.1, lambda u: activate({u}))

    async def rehome(
        self,
        pod: PodInfo,
        retain_timeout: float | None,
        old: Claim,
        node_name: str,
        pool: str,
        ip: str | None,
    ) -> None:
        """Pod ``pod`` waited longer than its retain-timeout (``retain_timeout`` seconds) for its
        retained address's node and got ``ip`` (None: a slot) of ``pool`` on ``node_name``
        instead: release ``old`` (exactly the allocation read, CAS) and say so in a Warning
        ``AddressRehomed`` event. A failed release is logged and the address kept (the GC
        decides later)."""
        a = old.allocation
        waited = f"{retain_timeout:.0f}s" if retain_timeout is not None else "ever"
        message = (
            f"retained address {a.ip or '(slot)'} of NodeIPPool {old.pool.name} released: its node could not "
            f"take the pod for {waited}; the pod now has {ip or 'a slot'} of {pool} on {node_name}"
        )
        try:
            await self.writer.submit(
                old.pool.name, functools.partial(allocator.release, uid=old.uid, expect=a)
            )
        except Exception as e:
            log.warning("%s: releasing its retained address %s failed (%r); kept", pod.key, a.ip, e)
            return
        log.warning("%s: %s", pod.key, message)
        if self.rehomed is not None:
            self.rehomed()
        if self.recorder is not None:
            self.recorder.emit(pod.ref, "Warning", "AddressRehomed", message)
