"""The PodGroup controller: keeps :class:`~ipscheduler.coscheduling.groups.GroupIndex`
current from two informers, moves the queue when a group or a member appears, and writes
each group's status as its pods show it (upstream scheduler-plugins runs this as a
separate controller, ``pkg/controllers/podgroup_controller.go``; here the scheduler does it,
so ``kubectl get podgroups`` works with nothing else installed).

Without the PodGroup API (no CRD), :meth:`PodGroupController.run` says so once, marks the
index so pods with the group label get that reason, and checks again every
:data:`PROBE_INTERVAL` seconds; the informers start once it is there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import functools
import logging
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.backend.health import HealthState
from ipscheduler.coscheduling import events
from ipscheduler.coscheduling.groups import GroupIndex, desired_status
from ipscheduler.coscheduling.informers import member_informer, podgroup_informer
from ipscheduler.coscheduling.models import (
    API_VERSION,
    FAILED,
    FINISHED,
    GROUP,
    KIND,
    PLURAL,
    POD_GROUP_LABEL,
    RUNNING,
    SCHEDULED,
    VERSION,
    PodGroupView,
)
from ipscheduler.framework.aio import Batch, WorkQueue
from ipscheduler.framework.backoff import Backoff
from ipscheduler.framework.interface import Requeue
from ipscheduler.kube.client import TRANSIENT_ERRORS, ClusterResource, KubeApi
from ipscheduler.kube.events import EventRecorder, object_ref

log = logging.getLogger(__name__)

POD_GROUPS = ClusterResource(GROUP, VERSION, PLURAL, KIND)
"""The PodGroup resource (namespaced; LIST and WATCH across namespaces)."""

PROBE_INTERVAL = 30.0
"""Seconds between checks for the PodGroup API while it is not installed."""

WRITE_DELAY = 0.2
"""Seconds status writes are gathered for (a gang's pods bind within moments)."""

RETRY_MAX = 5.0
"""Seconds a group whose status write keeps failing waits at most before the next try
(the wait doubles from :data:`WRITE_DELAY`)."""


class PodGroupController:
    """See the module doc. ``requeue(event, old, new)`` moves the unschedulable pods an event
    may help (the queue's ``move_all_to_active_or_backoff``)."""

    def __init__(
        self,
        api: KubeApi,
        index: GroupIndex,
        recorder: EventRecorder | None = None,
        requeue: Requeue = lambda event, old, new: None,
        health: HealthState | None = None,
        watch_timeout: float = 120.0,
    ) -> None:
        self.api = api
        self.index = index
        self.recorder = recorder
        self.requeue = requeue
        self.health = health
        self.watch_timeout = watch_timeout
        self.groups = podgroup_informer(index)
        self.members = member_informer()
        self.groups.subscribe(self.on_group)
        self.members.subscribe(self.on_member)
        self.status_queue: WorkQueue[str] = WorkQueue(WRITE_DELAY, lambda: Backoff(WRITE_DELAY, RETRY_MAX))
        """Group keys whose status to write (:meth:`sync`), gathered for :data:`WRITE_DELAY`."""
        self.probe_interval = PROBE_INTERVAL
        self.writes = 0
        """Status writes made (for tests and logs)."""

    # -- informer events ---------------------------------------------------------
    def on_group(self, kind: str | None, key: str, body: Any, old: Any, new: Any) -> None:
        """A PodGroup came, changed or went: index it; a new one or a new spec moves its
        pods (the first LIST's too: pods tried before it arrived wait for it)."""
        self.index.set_group(key, new)
        if kind == "DELETED":
            self.index.invalid.pop(key, None)
        if new is not None and (
            old is None
            or (old.min_member, old.timeout, old.min_resources)
            != (new.min_member, new.timeout, new.min_resources)
        ):
            self.requeue(events.POD_GROUP_CHANGE, old, new)
        if new is not None:
            self.status_queue.add(key)

    def on_member(self, kind: str | None, uid: str, body: Any, old: Any, new: Any) -> None:
        """A pod with the group label came, changed or went: index it; a new member moves
        its group's pods (its siblings may reach ``minMember`` now)."""
        self.index.set_member(uid, new)
        if new is not None and old is None:
            self.requeue(events.GROUP_MEMBER_ADD, None, new)
        for member in (old, new):
            if member is not None:
                self.status_queue.add(member.group)

    # -- running -------------------------------------------------------------------
    async def run(self, api_client: client.ApiClient) -> None:
        """Wait for the PodGroup API, then run both informers and the status writer. Never
        returns; raises what an informer raises (the supervisor restarts it)."""
        while True:
            if await self._served():
                break
            await asyncio.sleep(self.probe_interval)
        if self.health is not None:
            self.health.checks["podgroups-watch"] = functools.partial(self.groups.health, self.watch_timeout)
            self.health.checks["podgroup-members-watch"] = functools.partial(
                self.members.health, self.watch_timeout
            )
        await asyncio.gather(
            self.groups.run(api_client),
            self.members.run(api_client),
            self.status_queue.run(self._write),
        )

    async def _served(self) -> bool:
        try:
            served = await self.api.serves(POD_GROUPS)
        except (ApiException, *TRANSIENT_ERRORS) as e:
            log.warning("could not check for the PodGroup API: %r", e)
            return False
        if served != self.index.installed or not served:
            if not served and self.index.installed:
                log.warning(
                    "PodGroup API %s is not installed: pods with the %s label stay Pending "
                    "(kubectl apply -f crds/); checking again every %.0fs",
                    API_VERSION,
                    POD_GROUP_LABEL,
                    self.probe_interval,
                )
            self.index.installed = served
            if served:
                self.requeue(events.POD_GROUP_CHANGE, None, None)
        return served

    async def _write(self, keys: Batch[str]) -> None:
        """:meth:`sync` each group of the batch (keys are only ever added one by one); a
        failed write is tried again after the group's backoff."""
        for key in sorted(keys or ()):
            try:
                await self.sync(key)
            except (ApiException, *TRANSIENT_ERRORS) as e:
                log.warning("could not write the status of PodGroup %s: %r", key, e)
                self.status_queue.add_rate_limited(key)
            else:
                self.status_queue.forget(key)

    async def sync(self, key: str) -> bool:
        """Write the status of group ``key`` if its pods say something else than it does;
        True when written. A phase reached that matters to users (Scheduled, Running,
        Finished, Failed) gets an event on the PodGroup."""
        group = self.index.group(key)
        if group is None:
            return False
        now = datetime.datetime.now(datetime.UTC)
        desired = desired_status(group, self.index.members_of(key), now)
        if all(group.status.get(k) == v for k, v in desired.items()):
            return False
        if not await self.api.patch_namespaced_status(POD_GROUPS, group.namespace, group.name, desired):
            return False
        self.writes += 1
        phase, was = desired.get("phase"), group.status.get("phase")
        # The informer's echo replaces this view; until then the index holds what we wrote.
        self.index.set_group(key, dataclasses.replace(group, status={**group.status, **desired}))
        if phase != was and phase in (SCHEDULED, RUNNING, FINISHED, FAILED):
            self._event(
                group, "Warning" if phase == FAILED else "Normal", phase, _phase_message(group, desired)
            )
        return True

    def _event(self, group: PodGroupView, event_type: str, reason: str, message: str) -> None:
        if self.recorder is None:
            return
        ref = object_ref(KIND, API_VERSION, group.name, group.namespace, group.uid)
        self.recorder.emit(ref, event_type, reason, message)


def _phase_message(group: PodGroupView, status: dict[str, Any]) -> str:
    n = group.min_member
    return {
        SCHEDULED: f"{status.get('scheduled', 0)} pod(s) bound, minMember {n} reached",
        RUNNING: f"{status.get('running', 0)} pod(s) running, minMember {n} reached",
        FINISHED: f"{status.get('succeeded', 0)} pod(s) succeeded, minMember {n} reached",
        FAILED: f"{status.get('failed', 0)} pod(s) failed",
    }.get(str(status.get("phase")), "")
