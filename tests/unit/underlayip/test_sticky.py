"""underlayip/sticky: what the address a pod's identity keeps means for the pod now
(``kept_address``, ``KeptAddress.describe``) and the acts that go with it (StickyAddresses:
the refusal said once, one retain-timeout timer per pod, re-homing by CAS)."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.framework.types import PodInfo
from ipscheduler.underlayip.pool import PoolView
from ipscheduler.underlayip.retention import Retention
from ipscheduler.underlayip.sticky import (
    PINNED,
    REHOME,
    WAITING,
    Claim,
    KeptAddress,
    StickyAddresses,
    kept_address,
)
from ipscheduler.underlayip.writer import PoolWriter
from tests.builders import SINCE, SINCE_TIME, alloc, pool_body
from tests.unit.fakes import EventLog, FakePoolApi, pool_cache

TIMEOUT = 300.0
STS = Retention("StatefulSet", "ns/web-0", "uid-sts", 0, TIMEOUT)
"""web-0 of StatefulSet web (UID uid-sts), retain-timeout 5m."""
MICROSECOND = datetime.timedelta(microseconds=1)


def at(seconds: float) -> datetime.datetime:
    """``seconds`` after :data:`SINCE_TIME`."""
    return SINCE_TIME + datetime.timedelta(seconds=seconds)


def stamp(seconds: float) -> str:
    """The RFC 3339 timestamp ``seconds`` after :data:`SINCE_TIME`, to the microsecond."""
    return at(seconds).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def kept(phase: str = "Retained", ip: str | None = "10.0.2.5", **fields: Any) -> dict[str, Any]:
    """A wire-form allocation recorded for identity ns/web-0 of StatefulSet uid-sts (Retained
    since :data:`SINCE` unless told)."""
    body = {
        **alloc(ip, pod="ns/web-0", phase=phase),
        "releasePolicy": "StatefulSet",
        "identity": "ns/web-0",
        "ownerUID": "uid-sts",
    }
    if phase == "Retained":
        body["retainedSince"] = SINCE
    return {**body, **fields}


def web0(uid: str = "uid-new", creation: datetime.datetime | None = SINCE_TIME) -> PodInfo:
    return PodInfo(uid=uid, namespace="ns", name="web-0", creation=creation)


def pb(allocations: dict[str, Any]) -> dict[str, Any]:
    """Pool pb on node-b holding ``allocations``."""
    return pool_body("pb", "node-b", addresses=["10.0.2.1-10.0.2.9"], rv="10", allocations=allocations)


def view(allocations: dict[str, Any]) -> PoolView:
    return PoolView.from_obj(pb(allocations))


def found(
    allocations: dict[str, Any],
    now: datetime.datetime,
    pod: PodInfo | None = None,
    retention: Retention = STS,
) -> tuple[str, str, float | None] | None:
    """``(kind, uid of the claim, timeout_in)`` of what ``kept_address`` finds, None for nothing."""
    cache = pool_cache(pools={"pb": [view(allocations)]})
    got = kept_address(cache, pod or web0(), retention, now)
    return None if got is None else (got.kind, got.claim.uid, got.timeout_in)


@pytest.mark.parametrize(
    ("allocations", "now", "pod", "retention", "want"),
    [
        ({}, at(10), None, STS, None),
        ({"uid-old": kept()}, at(100), None, STS, (PINNED, "uid-old", 200.0)),
        (
            {"uid-old": kept()},
            at(10**6),
            None,
            Retention("StatefulSet", "ns/web-0", "uid-sts", 0, None),
            (PINNED, "uid-old", None),
        ),
        ({"uid-old": kept()}, at(TIMEOUT), None, STS, (PINNED, "uid-old", 0.0)),
        ({"uid-old": kept()}, at(TIMEOUT) + MICROSECOND, None, STS, (REHOME, "uid-old", None)),
        ({"uid-old": kept()}, at(TIMEOUT + 60), web0(creation=at(100)), STS, (PINNED, "uid-old", 40.0)),
        (
            {"uid-old": kept(retainedSince=stamp(200))},
            at(TIMEOUT + 60),
            None,
            STS,
            (PINNED, "uid-old", 140.0),
        ),
        (
            {"uid-old": kept(since=stamp(250))},
            at(TIMEOUT + 100),
            web0(creation=None),
            STS,
            (PINNED, "uid-old", 150.0),
        ),
        (
            {"uid-old": kept(retainedSince=stamp(1e-6))},
            at(TIMEOUT) + MICROSECOND,
            None,
            STS,
            (PINNED, "uid-old", 0.0),
        ),
        ({"uid-old": kept(ownerUID="uid-sts-recreated")}, at(10), None, STS, None),
        ({"uid-old": kept(identity="ns/web-1")}, at(10), None, STS, None),
        (
            {"uid-old": kept(releasePolicy="Never", ownerUID=None)},
            at(10),
            None,
            Retention("Pod"),
            (PINNED, "uid-old", TIMEOUT - 10),
        ),
        ({"uid-old": kept("Bound")}, at(10), None, STS, (WAITING, "uid-old", None)),
        ({"uid-old": kept("Releasing", releasingSince=SINCE)}, at(10), None, STS, (WAITING, "uid-old", None)),
        ({"uid-new": kept("Reserved")}, at(10), None, STS, (WAITING, "uid-new", None)),
        ({"uid-new": kept("Nominated", ip=None)}, at(10), None, STS, None),
        ({"uid-new": kept("Reserved"), "uid-old": kept()}, at(10), None, STS, (WAITING, "uid-new", None)),
    ],
    ids=[
        "none-kept",
        "held-with-the-time-left",
        "held-for-ever-without-a-timeout",
        "held-at-the-timeout-exactly",
        "rehome-a-microsecond-past-it",
        "the-wait-counts-from-the-pods-creation-when-later",
        "from-retained-since-when-later",
        "from-since-when-later-and-no-creation",
        "a-stamp-read-to-the-microsecond",
        "a-recreated-statefulset-does-not-inherit",
        "another-identitys-address",
        "a-pod-policy-pod-gets-back-its-names-never-address",
        "waiting-while-recorded-for-the-previous-pod",
        "waiting-while-releasing",
        "waiting-on-its-own-reservation-by-another-cycle",
        "its-own-nominated-place-is-no-kept-address",
        "its-own-allocation-first",
    ],
)
def test_kept_address(
    allocations: dict[str, Any],
    now: datetime.datetime,
    pod: PodInfo | None,
    retention: Retention,
    want: tuple[str, str, float | None] | None,
) -> None:
    assert found(allocations, now, pod, retention) == want


def test_its_own_allocation_not_yet_retained_comes_before_its_own_retained_one() -> None:
    """Its Unreserve kept one address for it (Retained, in pa) while another cycle took the
    identity's address in pb back for it (Reserved): it waits for that one."""
    pa = pool_body(
        "pa", "node-a", addresses=["10.0.1.1-10.0.1.9"], allocations={"uid-new": kept(ip="10.0.1.5")}
    )
    cache = pool_cache(pools={"pa": [PoolView.from_obj(pa)], "pb": [view({"uid-new": kept("Reserved")})]})
    got = kept_address(cache, web0(), STS, at(10))
    assert got is not None and (got.kind, got.claim.pool.name) == (WAITING, "pb")


def claim(allocation: dict[str, Any], uid: str = "uid-old") -> Claim:
    pool = view({uid: allocation})
    return Claim(pool, uid, pool.allocations[uid])


@pytest.mark.parametrize(
    ("kept_address", "line"),
    [
        (
            KeptAddress(PINNED, claim(kept()), 199.6),
            "retained address 10.0.2.5 of pool pb on node-b: the pod may go to node-b only "
            "for 200s more (its retain-timeout)",
        ),
        (
            KeptAddress(PINNED, claim(kept(ip=None))),
            "retained address (slot) of pool pb on node-b: the pod may go to node-b only",
        ),
        (
            KeptAddress(REHOME, claim(kept())),
            "retained address 10.0.2.5 of pool pb on node-b: past the pod's retain-timeout, so placed "
            "anew and that address released",
        ),
        (
            KeptAddress(WAITING, claim(kept("Bound"))),
            "address 10.0.2.5 of pool pb still recorded for the previous pod ns/web-0: the pod waits "
            "until it is retained",
        ),
        (
            KeptAddress(WAITING, claim(kept("Reserved", ip=None))),
            "address (slot) of pool pb still recorded for the previous pod ns/web-0: the pod waits "
            "until it is retained",
        ),
        (
            KeptAddress(WAITING, claim(kept("Releasing", releasingSince=SINCE))),
            "address 10.0.2.5 of pool pb is Releasing: the previous pod ns/web-0 was removed before "
            "node-b confirmed its teardown; the pod waits until it is retained",
        ),
    ],
    ids=["held-for-a-while", "held-for-ever-a-slot", "rehome", "waiting", "waiting-for-a-slot", "releasing"],
)
def test_describe(kept_address: KeptAddress, line: str) -> None:
    assert kept_address.describe() == line


# --------------------------------------------------------------------------- StickyAddresses


def test_a_refusal_is_said_once_per_pod() -> None:
    events = EventLog()
    sticky = StickyAddresses(None, recorder=events)  # type: ignore[arg-type]
    for pod in (web0("uid-1"), web0("uid-1"), web0("uid-2")):
        sticky.refused(pod, "release-policy=Sometimes is not one of Pod, StatefulSet, Never; using Pod")
    assert [(name, kind, reason) for name, kind, reason, _ in events.events] == [
        ("web-0", "Warning", "ReleasePolicyRefused"),
        ("web-0", "Warning", "ReleasePolicyRefused"),
    ]
    assert events.events[0][3] == "release-policy=Sometimes is not one of Pod, StatefulSet, Never; using Pod"


def test_the_pods_told_are_forgotten_past_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ipscheduler.underlayip.sticky.REFUSALS_REMEMBERED", 2)
    events = EventLog()
    sticky = StickyAddresses(None, recorder=events)  # type: ignore[arg-type]
    for uid in ("uid-1", "uid-2", "uid-3", "uid-1"):
        sticky.refused(web0(uid), "x")
    assert len(events.events) == 4  # uid-3 made room by forgetting uid-1 and uid-2


async def test_one_timer_per_pod_activates_that_pod_alone() -> None:
    activated: list[set[str]] = []
    sticky = StickyAddresses(None, activate=activated.append)  # type: ignore[arg-type]
    sticky.activate_at_timeout("uid-1", 0.0)
    sticky.activate_at_timeout("uid-1", 0.0)
    sticky.activate_at_timeout("uid-2", 0.05)
    assert activated == []
    await asyncio.sleep(0.3)
    assert activated == [{"uid-1"}, {"uid-2"}]
    sticky.activate_at_timeout("uid-1", 0.0)  # its timer fired: a later wait sets another
    await asyncio.sleep(0.2)
    assert activated[2:] == [{"uid-1"}]


async def test_no_timer_without_an_activator() -> None:
    sticky = StickyAddresses(None)  # type: ignore[arg-type]
    sticky.activate_at_timeout("uid-1", 0.0)
    assert "uid-1" not in sticky._timers


def test_no_timer_without_an_event_loop() -> None:
    activated: list[set[str]] = []
    sticky = StickyAddresses(None, activate=activated.append)  # type: ignore[arg-type]
    sticky.activate_at_timeout("uid-1", 0.0)
    assert "uid-1" not in sticky._timers


class Rehoming:
    """Pool pb on node-b holding web-0's Retained 10.0.2.5 (and another pod's address), the API
    server in memory, a writer over them; the Events and the rehomed count kept."""

    def __init__(self) -> None:
        self.body = pb({"uid-old": kept(), "uid-other": alloc("10.0.2.6", pod="ns/other", phase="Bound")})
        self.cache = pool_cache(pools={"pb": [PoolView.from_obj(self.body)]})
        self.api = FakePoolApi([self.body])
        self.events = EventLog()
        self.rehomed: list[None] = []
        self.sticky = StickyAddresses(
            PoolWriter(self.api, self.cache),  # type: ignore[arg-type]
            recorder=self.events,
            rehomed=lambda: self.rehomed.append(None),
        )

    def claim(self) -> Claim:
        pool = self.cache.pool("pb")
        assert pool is not None
        return Claim(pool, "uid-old", pool.allocations["uid-old"])

    def allocations(self) -> set[str]:
        return set(self.api.bodies["pb"]["status"]["allocations"])

    async def rehome(self, claim: Claim, ip: str | None = "10.0.1.1") -> None:
        await self.sticky.rehome(web0(), TIMEOUT, claim, "node-a", "pa", ip)


async def test_rehome_releases_the_old_address_and_says_so() -> None:
    env = Rehoming()
    await env.rehome(env.claim())
    assert env.allocations() == {"uid-other"}
    assert env.events.events == [
        (
            "web-0",
            "Warning",
            "AddressRehomed",
            "retained address 10.0.2.5 of NodeIPPool pb released: its node could not take the pod "
            "for 300s; the pod now has 10.0.1.1 of pa on node-a",
        )
    ]
    assert len(env.rehomed) == 1


async def test_rehome_to_a_slot_after_waiting_for_ever_says_so() -> None:
    env = Rehoming()
    await env.sticky.rehome(web0(), None, env.claim(), "node-a", "pa", None)
    assert env.events.events[0][3].endswith(
        "could not take the pod for ever; the pod now has a slot of pa on node-a"
    )


async def test_rehome_releases_exactly_the_allocation_it_read() -> None:
    """Compare-and-swap: an allocation that changed since it was read (another cycle took the
    address back) is not released."""
    env = Rehoming()
    stale = env.claim()
    live = env.api.bodies["pb"]
    live["status"]["allocations"]["uid-old"].update(phase="Reserved", reservedBy="r/2")
    live["metadata"]["resourceVersion"] = "11"  # the cache has not seen it yet
    await env.rehome(stale)
    assert env.allocations() == {"uid-old", "uid-other"}


async def test_a_failed_release_keeps_the_address_and_says_nothing() -> None:
    env = Rehoming()

    async def refuse(*args: Any) -> dict[str, Any]:
        raise ApiException(status=500, reason="Internal Server Error")

    env.api.replace_cluster_status = refuse  # type: ignore[method-assign]
    await env.rehome(env.claim())
    assert env.allocations() == {"uid-old", "uid-other"}
    assert (env.events.events, env.rehomed) == ([], [])


# --------------------------------------------------------------------------- further interfaces


@pytest.mark.parametrize(
    ("allocations", "want"),
    [
        pytest.param(
            {"uid-old": kept(interface="net1")}, None, id="a-further-interfaces-retained-address-pins-not"
        ),
        pytest.param({"uid-old": kept("Bound", interface="net1")}, None, id="nor-makes-it-wait"),
        pytest.param(
            {"uid-new": kept("Reserved", interface="net1")}, None, id="nor-its-own-of-another-cycle"
        ),
        pytest.param(
            {"uid-old": kept(), "uid-x": kept(ip="10.0.2.6", interface="net1")},
            (PINNED, "uid-old", 200.0),
            id="the-first-interfaces-pins-it",
        ),
    ],
)
def test_only_the_first_interfaces_kept_address_pins_or_holds_the_pod(
    allocations: dict[str, Any], want: tuple[str, str, float | None] | None
) -> None:
    assert found(allocations, at(100)) == want


def test_the_first_interfaces_address_pins_the_pod_whichever_pool_keeps_net1s() -> None:
    """The identity's first interface's address is Retained in pb (node-b), its net1 address
    in ra (node-a): node-b it is."""
    ra = pool_body(
        "ra",
        "node-a",
        addresses=["10.1.1.1-10.1.1.9"],
        allocations={"uid-old": kept(ip="10.1.1.5", interface="net1")},
    )
    cache = pool_cache(pools={"ra": [PoolView.from_obj(ra)], "pb": [view({"uid-old": kept()})]})
    got = kept_address(cache, web0(), STS, at(10))
    assert got is not None and (got.kind, got.claim.pool.name, got.claim.allocation.ip) == (
        PINNED,
        "pb",
        "10.0.2.5",
    )
