"""Options of ``ipscheduler run`` (filled by :mod:`ipscheduler.cmd.cli`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ipscheduler.cmd.election import ElectionSettings, identity
from ipscheduler.framework.config import SchedulerConfiguration
from ipscheduler.underlayip.args import Strategy
from ipscheduler.underlayip.teardown import DEFAULT_RELEASE_DELAY


@dataclass(frozen=True)
class SecureServing:
    """kube-scheduler's secure serving and delegated auth flags (``cmd/serving``)."""

    port: int = 10259
    """``--secure-port``; 0: not served."""
    bind_address: str = "0.0.0.0"
    tls_cert_file: str | None = None
    tls_private_key_file: str | None = None
    """Both None: a generated self-signed certificate."""
    client_ca_file: str | None = None
    always_allow_paths: tuple[str, ...] = ("/healthz", "/readyz", "/livez")
    token_ttl: float = 10.0
    """Seconds a TokenReview answer is cached."""
    allow_ttl: float = 10.0
    deny_ttl: float = 10.0
    """Seconds an allowed / denied SubjectAccessReview answer is cached."""

    @property
    def address(self) -> str:
        """``host:port`` (an IPv6 host in brackets)."""
        host = f"[{self.bind_address}]" if ":" in self.bind_address else self.bind_address
        return f"{host}:{self.port}"


@dataclass
class RunConfig:
    """Options of ``ipscheduler run``."""

    kubeconfig: str | None = None
    scheduler_name: str = "ip-scheduler"
    ip_strategy: Strategy = "spread"
    bind_concurrency: int = 256
    gc_interval: float = 30.0
    reserved_ttl: float = 60.0
    bound_mark_delay: float = 300.0
    """Seconds a deferred Bound mark waits to ride along with its pool's next write before
    the GC sweep writes it (``Reconciler.bound_mark_delay``)."""
    release_delay: float = DEFAULT_RELEASE_DELAY
    """``--release-delay``: seconds the address of a pod removed without its node confirming the
    teardown stays Releasing once the node is Ready (:mod:`ipscheduler.underlayip.teardown`)."""
    multus_network: str | None = None
    health_addr: str = ""
    """Plain HTTP, no authentication (local development only); '' off."""
    secure: SecureServing = field(default_factory=SecureServing)
    leader_elect: bool = False
    election: ElectionSettings = field(default_factory=ElectionSettings)
    config: SchedulerConfiguration | None = None
    watch_timeout: float = 90.0
    """Seconds an informer may be without a working LIST+WATCH before /healthz fails."""
    extender_listen: str | None = None
    """host:port of the extender verbs (``ipscheduler extender``); None: not served."""
    extender_https: bool = False
    """Serve the extender verbs over HTTPS (``secure``'s certificate; its client CA, if
    any, then demands a client certificate)."""
    publish_resource: str | None = None
    """The extended resource kept on every node with a pool (its pools' capacity); None: none."""
    kube_api_qps: float = 0.0
    """Sustained requests per second to the API server (0: no limit)."""
    kube_api_burst: int = 0
    """Requests allowed at once above ``kube_api_qps``."""
    identity: str = field(default_factory=identity)
    """This replica: the Lease holder identity and the reservedBy prefix of its reservations."""
