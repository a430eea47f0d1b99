"""The garbage collector of a long-running scheduler process.

CPython's cyclic collector runs a young collection every 700 net allocations of container
objects (dicts, lists, dataclass instances), and after ten of those an older one; every
decoded watch event, cycle state and request allocates thousands. A full collection walks
every tracked object, and once the informers have listed the cluster most of those are the
long-lived caches: nodes, NodeIPPools, bound pods (hundreds of thousands of objects over
1000 nodes). Measured in the benchmark (small preset, 1000 pods arriving, uvloop): 5.89
CPU ms per bound pod with the defaults, 4.77 with :func:`tune` (docs/performance.md).

:func:`tune` runs once the caches are filled (``ready_to_schedule``): ``gc.freeze()`` moves
every object tracked then to the permanent generation, which no collection walks (they are
still freed by reference counting; only a reference cycle among them would stay), and the
young generation's threshold is raised to :data:`GEN0_THRESHOLD`, so collections come about
thirty times less often, each over a young generation that is mostly garbage by then.
Reference counting frees nearly everything the scheduler allocates, so memory does not
grow with it (peak RSS in the same runs: 158.0 and 158.5 MB).

Before that, from the process start (:func:`hold`), only young collections run. Starting
means importing kopf and kubernetes-asyncio and listing the cluster into the caches, so the
heap grows from nothing to its full size, and CPython's older collections, which come
whenever the long-lived objects have grown by a quarter, walk it again and again: with the
defaults, 1.2 of the 3.1 CPU s from ``ipscheduler run`` to its first bind over 5000 nodes and
5000 NodeIPPools (docs/performance.md).
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)

GEN0_THRESHOLD = 20_000
"""Net container allocations between two young collections (CPython's default: 700)."""
OLDER_THRESHOLDS = (10, 10)
"""Young collections per middle one, middle ones per full one: CPython's defaults."""
STARTUP_OLDER_THRESHOLDS = (1000, 1000)
"""The same while starting (:func:`hold`): a middle collection every 20 million net
allocations, practically no full one."""


def hold() -> None:
    """From the process start until :func:`tune`: young collections every
    :data:`GEN0_THRESHOLD` net allocations, the older ones practically never (see the module
    doc). Garbage cycles are still found while young; a standby that waits for the Lease
    allocates little."""
    gc.set_threshold(GEN0_THRESHOLD, *STARTUP_OLDER_THRESHOLDS)


def tune() -> None:
    """Freeze what is tracked now and raise the young generation's threshold (see the
    module doc); the older generations get CPython's ratios (10, 10) again."""
    gc.freeze()
    gc.set_threshold(GEN0_THRESHOLD, *OLDER_THRESHOLDS)
    log.debug(
        "garbage collector: %d objects frozen, thresholds %s", gc.get_freeze_count(), gc.get_threshold()
    )
