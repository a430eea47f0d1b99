"""kopf: login, start-up and clean-up, and the pending pods of our schedulerName.

Thin by design: :func:`startup` configures kopf and hands over to
:func:`ipscheduler.cmd.wiring.build`. kopf watches the pending pods of our
schedulerName (one event handler). Nodes, bound pods and NodeIPPools come from
list+watch informers (:mod:`ipscheduler.kube.informer`).
Only ``@kopf.on.event`` is used on pods, and it returns None, so kopf never
writes annotations, finalizers or status onto a pod (``on.create``/``on.update``
would store ``last-handled-configuration``).

**No ``@kopf.index`` on pods, ever.** kopf holds back every handler until every
object of an indexed resource's first LIST has been indexed, with one readiness
toggle per object, and each new toggle wakes every waiting worker
(``ToggleSet.make_toggle`` → ``Condition.notify_all``, kopf 1.45): start-up is
quadratic in the backlog. Measured with 5000 pending pods over
1000 nodes: no pod bound for 170-190 s after start, 50 % of the CPU in
``make_toggle`` and 38 % in ``ToggleSet.wait_for``. The index served only as a
parse cache; without it the first bind comes within seconds (docs/performance.md,
backlog and failover).
The pod watch is narrowed server-side to ``spec.schedulerName=<ours>``.
All handlers are ``async``: kopf runs sync handlers in a thread pool, and the
queue and caches belong to the event loop.
Posting of kopf's own log messages as Events is disabled: the scheduler
posts its own, kube-scheduler style.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from typing import Any

import kopf
from kubernetes_asyncio import client

from ipscheduler.backend.health import HealthState
from ipscheduler.cmd import wiring
from ipscheduler.cmd.options import RunConfig
from ipscheduler.kube.client import LIST_PAGE_SIZE, KubeApi, load_client_config
from ipscheduler.kube.ratelimit import limit_requests

__all__ = ["RunConfig", "run_operator"]

log = logging.getLogger(__name__)


class RetryForever:
    """kopf's default backoffs (1, 1, 2, 3, 5, 8, 13, 21 s), then every 30 s without end.

    Re-iterable (kopf iterates it afresh for each request) and unsized (kopf then
    retries until a request succeeds instead of raising after the last backoff).
    """

    def __iter__(self) -> Iterator[float]:
        yield from (1, 1, 2, 3, 5, 8, 13, 21)
        yield from itertools.repeat(30.0)


class NoDiffBaseStorage(kopf.DiffBaseStorage):
    """A diff base that is never kept.

    kopf computes the "essence" of every object on every event (a deep copy
    of the body) to diff it against the last handled state, which only
    on.create/on.update/on.delete/on.field handlers use. The scheduler has
    none (only on.event and indexes), so the copy is pure overhead on the
    pod and pool watches.
    """

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


@kopf.on.login()
async def login(memo: Any, **_: Any) -> kopf.ConnectionInfo:
    """Credentials for kopf from the same kubeconfig/in-cluster config as our client."""
    cfg: RunConfig = memo.config
    conf = await load_client_config(cfg.kubeconfig)
    memo.client_config = conf
    header: Any = await conf.get_api_key_with_prefix("BearerToken")
    scheme, token = None, None
    if header:
        parts = str(header).split(" ", 1)
        scheme, token = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])
    if not conf.host:
        raise kopf.LoginError("no API server address in the client configuration")
    return kopf.ConnectionInfo(
        server=conf.host,
        ca_path=conf.ssl_ca_cert,
        insecure=not conf.verify_ssl,
        scheme=scheme,
        token=token,
        certificate_path=conf.cert_file,
        private_key_path=conf.key_file,
    )


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    """Configure kopf, build the scheduler, start it, and return once its informers have synced."""
    cfg: RunConfig = memo.config
    # Only our pending pods: once bound a pod leaves this watch (kopf sees DELETED) and the
    # pods-by-node watch follows it until it is deleted or terminal (then it is released).
    settings.watching.field_selectors["v1", "pods"] = (
        f"spec.schedulerName={cfg.scheduler_name},spec.nodeName="
    )
    settings.scanning.disabled = True  # no CRD/namespace watches: less RBAC, CRD must exist at start
    settings.posting.enabled = False
    settings.persistence.diffbase_storage = NoDiffBaseStorage()
    settings.peering.standalone = True
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    settings.watching.inactivity_timeout = 90
    # LIST pending pods 500 at a time (as our informers): 10 000 pending pods are never
    # held as raw JSON all at once.
    settings.watching.chunk_size = LIST_PAGE_SIZE
    settings.networking.request_timeout = 30
    settings.networking.connect_timeout = 10
    # kopf retries connection errors, 5xx and timeouts with these backoffs and then lets
    # the error end its watcher; the pending-pod watch must outlive any API server outage.
    settings.networking.error_backoffs = RetryForever()

    conf = getattr(memo, "client_config", None) or await load_client_config(cfg.kubeconfig)
    api_client = client.ApiClient(conf)
    limit_requests(api_client, cfg.kube_api_qps, cfg.kube_api_burst)
    components = wiring.build(cfg, KubeApi(api_client), memo.health)
    memo.components = components
    components.start()
    log.info(
        "ip-scheduler %r starting (strategy %s, identity %s)",
        cfg.scheduler_name,
        cfg.ip_strategy,
        cfg.identity,
    )
    # kopf opens its watches once the startup handlers are done. Waiting here for the
    # informers (nodes, NodeIPPools, bound pods) keeps kopf's LIST of the pending pods off
    # the API server and this event loop until they are listed, so the first page of a
    # backlog is scheduled as soon as it arrives (with 20 000 pending pods and
    # 5000 nodes, both LISTs at once delayed the first bind).
    await components.controller.ready_to_schedule.wait()


@kopf.on.cleanup()
async def cleanup(memo: Any, **_: Any) -> None:
    components: wiring.Components | None = getattr(memo, "components", None)
    if components is not None:
        await components.stop()


# -- kopf: our pending pods ---------------------------------------------------------


@kopf.on.event("v1", "pods")
async def pod_event(*, event: kopf.RawEvent, body: kopf.Body, uid: str, memo: Any, **_: Any) -> None:
    """Hand the event to its subscribers (the scheduler's queue, the pool controller's release);
    returns None so kopf writes nothing to the pod."""
    components: wiring.Components | None = getattr(memo, "components", None)
    if components is not None:
        try:
            components.pending_pods.on_event(event.get("type"), body)
        except Exception:  # never let one pod's event break kopf's pending-pod path
            log.exception("handling the %s event of pod %s failed", event.get("type"), uid)


async def run_operator(cfg: RunConfig, health: HealthState | None = None) -> None:
    """Run kopf with our handlers until stopped (SIGINT/SIGTERM, or cancelled)."""
    await kopf.operator(
        clusterwide=True,
        standalone=True,
        memo=kopf.Memo(config=cfg, health=health or HealthState()),
    )
