"""DefaultBinder: POST ``pods/binding``.

As ``pkg/scheduler/framework/plugins/defaultbinder/default_binder.go``, plus
the annotations PreBind plugins put into the cycle state; the API server
copies a Binding's annotations onto the pod
(``pkg/registry/core/pod/storage/storage.go``), so the address needs no
second write. The pod UID is a precondition: a re-created pod of the same
name is never bound by mistake.
"""

from __future__ import annotations

from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.framework.interface import BIND_ANNOTATIONS, Binder, CycleState, Handle, Status
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.kube.client import TRANSIENT_ERRORS, Conflict

NAME = "DefaultBinder"


class DefaultBinder:
    """Bind plugin writing a Binding with the cycle's annotations."""

    name = NAME

    def __init__(self, binder: Binder | None) -> None:
        """``binder`` POSTs the Binding (the handle's client; ``KubeApi`` in production; None
        where nothing talks to the API server: ``explain``, tests)."""
        self.binder = binder

    async def bind(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Error status (with the API's reason) when the bind is refused or cut (a connection
        reset, a timeout: the scheduler's failure handler retries it), or when there is no
        client to bind with."""
        if self.binder is None:
            return Status.error("binding failed: no API client to bind with", plugin=NAME)
        try:
            await self.binder.bind(pod, node.name, dict(state.get(BIND_ANNOTATIONS) or {}))
        except Conflict as e:
            return Status.error(f"binding rejected: {e}", plugin=NAME)
        except ApiException as e:
            return Status.error(f"binding failed: HTTP {e.status} {e.reason}", plugin=NAME)
        except TRANSIENT_ERRORS as e:
            return Status.error(f"binding failed: {e!r}", plugin=NAME)
        return Status.success()


def new(args: None, handle: Handle) -> DefaultBinder:
    """The plugin's factory (registered as :data:`NAME`; it takes no args): binds through
    ``handle.client`` (upstream's ``handle.ClientSet()``)."""
    return DefaultBinder(handle.client)
