"""VolumeBinding: a pod's claims bound, or bindable, on the node; binding them before the pod.

Split as kube-scheduler 1.34's ``pkg/scheduler/framework/plugins/volumebinding/``:
``plugin.py`` (``volume_binding.go``: the extension points, the statuses and their messages)
over ``binder.py`` (``binder.go``: the ``SchedulerVolumeBinder`` Protocol and the binder,
which matches claims to volumes node by node, assumes its choices, writes them and waits for
the PV controller; the assumed volumes and claims, upstream's ``assume_cache.go``, are two
maps of it). The package gives what the registry and the profiles use.

Not covered: CSI migration of in-tree volumes, storage capacity (``CSIStorageCapacity``:
``node(s) did not have enough free storage`` is never returned), the volume-capacity Score
(alpha upstream), PreFilterResult's node narrowing (an optimisation), ``VolumeAttributesClass``
matching, and the check that the pod still exists while PreBind waits.
"""

from ipscheduler.plugins.volumebinding.plugin import (
    ERR_REASON_BIND_CONFLICT,
    ERR_REASON_NODE_CONFLICT,
    ERR_REASON_PV_NOT_EXIST,
    ERR_REASON_UNBOUND_IMMEDIATE,
    NAME,
    VolumeBinding,
    VolumeBindingArgs,
    new,
)

__all__ = [
    "ERR_REASON_BIND_CONFLICT",
    "ERR_REASON_NODE_CONFLICT",
    "ERR_REASON_PV_NOT_EXIST",
    "ERR_REASON_UNBOUND_IMMEDIATE",
    "NAME",
    "VolumeBinding",
    "VolumeBindingArgs",
    "new",
]
