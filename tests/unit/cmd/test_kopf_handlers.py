"""What kopf is given: handlers on pods that never write to a pod and never gate start-up.

kopf holds every handler back until each object of an indexed resource's first LIST has been
indexed, at a cost quadratic in the number of objects (measured: 125-190 s without a
bind under 5000 pending pods). Pods may number in tens of thousands, so they get no index.
"""

from __future__ import annotations

import kopf

import ipscheduler.cmd.kopf_handlers as handlers


def test_pods_get_only_an_event_handler_and_no_index() -> None:
    registry = kopf.get_default_registry()
    assert list(registry._indexing.get_all_handlers()) == []
    assert [h.fn for h in registry._watching.get_all_handlers()] == [handlers.pod_event]
    assert list(registry._changing.get_all_handlers()) == []  # on.create/update/delete write to pods
    assert list(registry._spawning.get_all_handlers()) == []  # daemons and timers add finalizers
