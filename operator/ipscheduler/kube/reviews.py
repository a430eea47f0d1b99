"""Delegated authentication and authorization: TokenReview and SubjectAccessReview, cached.

What kube-scheduler's secure port does through ``k8s.io/apiserver``'s delegating
authenticator and authorizer (``staging/src/k8s.io/apiserver/pkg/authentication/
authenticatorfactory/delegating.go``, ``.../authorization/authorizerfactory/delegating.go``),
for the bearer tokens and non-resource paths of this scheduler's own endpoints:

- :meth:`DelegatingAuth.authenticate` POSTs a ``authentication.k8s.io/v1`` TokenReview and
  keeps the answer (a user, or None) for ``token_ttl`` seconds, keyed by a SHA-256 of the
  token (the token itself is never kept); kube's ``--authentication-token-webhook-cache-ttl``
  defaults to 10 s (``staging/src/k8s.io/apiserver/pkg/server/options/authentication.go``,
  ``NewDelegatingAuthenticationOptions``: ``CacheTTL: 10 * time.Second``).
- :meth:`DelegatingAuth.authorize` POSTs a ``authorization.k8s.io/v1`` SubjectAccessReview
  with ``nonResourceAttributes`` (path, verb) and keeps an allowed answer ``allow_ttl``
  seconds and a denied one ``deny_ttl`` seconds (``--authorization-webhook-cache-authorized-ttl``
  and ``-unauthorized-ttl``, both 10 s: ``.../server/options/authorization.go``,
  ``NewDelegatingAuthorizationOptions``). A review that fails (the API server unreachable)
  is not cached.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio import client

from ipscheduler.framework.aio import TTLMap
from ipscheduler.kube.client import KubeApi

DEFAULT_TOKEN_TTL = 10.0
"""Seconds a TokenReview answer is kept (kube's ``--authentication-token-webhook-cache-ttl``)."""
DEFAULT_ALLOW_TTL = 10.0
"""Seconds an allowed SubjectAccessReview is kept (``--authorization-webhook-cache-authorized-ttl``)."""
DEFAULT_DENY_TTL = 10.0
"""Seconds a denied SubjectAccessReview is kept (``--authorization-webhook-cache-unauthorized-ttl``)."""

MAX_ENTRIES = 4096
"""Entries each cache keeps at most; the oldest goes first (a flood of random tokens
cannot grow memory without bound)."""


@dataclass(frozen=True)
class UserInfo:
    """An authenticated user as a TokenReview's ``status.user`` (or a client certificate)
    names it: ``name`` (``system:serviceaccount:<ns>:<name>``...), ``uid``, ``groups`` and
    ``extra`` (key → values, as sorted pairs so the object can key a cache)."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = field(default=())

    @classmethod
    def from_status(cls, user: dict[str, Any]) -> UserInfo:
        """From a TokenReview's ``status.user``. Raises ValueError when it has no username."""
        name = user.get("username")
        if not isinstance(name, str) or not name:
            raise ValueError("TokenReview status.user has no username")
        extra = user.get("extra") or {}
        return cls(
            name=name,
            uid=str(user.get("uid") or ""),
            groups=tuple(str(g) for g in user.get("groups") or ()),
            extra=tuple(sorted((str(k), tuple(str(x) for x in v or ())) for k, v in extra.items())),
        )


@dataclass(frozen=True)
class Decision:
    """A SubjectAccessReview's answer: ``allowed``, and the authorizer's ``reason`` ('' if none)."""

    allowed: bool
    reason: str = ""


class DelegatingAuth:
    """TokenReview and SubjectAccessReview through ``api_client``, each answer cached (see
    the module doc). ``clock`` is for tests. Both methods raise ``ApiException`` or a
    transport error (``TRANSIENT_ERRORS``) when the review cannot be made; such a failure
    is not cached."""

    def __init__(
        self,
        api_client: client.ApiClient,
        token_ttl: float = DEFAULT_TOKEN_TTL,
        allow_ttl: float = DEFAULT_ALLOW_TTL,
        deny_ttl: float = DEFAULT_DENY_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api_client = api_client
        self.token_ttl = token_ttl
        self.allow_ttl = allow_ttl
        self.deny_ttl = deny_ttl
        self._tokens: TTLMap[str, tuple[UserInfo | None]] = TTLMap(clock, MAX_ENTRIES)
        """sha256(token) → (the user,); a 1-tuple so a rejected token (None) is cached too."""
        self._decisions: TTLMap[tuple[UserInfo, str, str], Decision] = TTLMap(clock, MAX_ENTRIES)
        self.reviews = 0
        """TokenReviews and SubjectAccessReviews sent (what the caches saved shows here)."""

    async def close(self) -> None:
        """Close the API client."""
        await self._api_client.close()

    async def token_review(self, token: str) -> dict[str, Any]:
        """POST a TokenReview of ``token``; its ``status`` (``{}`` when none)."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        authn: Any = client.AuthenticationV1Api(self._api_client)
        answer = await KubeApi.read_json(authn.create_token_review(body, _preload_content=False))
        return dict(answer.get("status") or {})

    async def access_review(self, user: UserInfo, verb: str, path: str) -> dict[str, Any]:
        """POST a SubjectAccessReview of ``verb`` on the non-resource ``path`` by ``user``;
        its ``status`` (``{}`` when none)."""
        spec: dict[str, Any] = {
            "user": user.name,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra}
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        authz: Any = client.AuthorizationV1Api(self._api_client)
        answer = await KubeApi.read_json(authz.create_subject_access_review(body, _preload_content=False))
        return dict(answer.get("status") or {})

    async def authenticate(self, token: str) -> UserInfo | None:
        """The user ``token`` belongs to, or None when the API server does not accept it."""
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = self._tokens.get(key)
        if cached is not None:
            return cached[0]
        self.reviews += 1
        status = await self.token_review(token)
        user: UserInfo | None = None
        if status.get("authenticated"):
            try:
                user = UserInfo.from_status(dict(status.get("user") or {}))
            except ValueError:
                user = None
        self._tokens.put(key, (user,), self.token_ttl)
        return user

    async def authorize(self, user: UserInfo, verb: str, path: str) -> Decision:
        """Whether ``user`` may ``verb`` the non-resource ``path`` (``get``, ``/metrics``)."""
        key = (user, verb, path)
        cached = self._decisions.get(key)
        if cached is not None:
            return cached
        self.reviews += 1
        status = await self.access_review(user, verb, path)
        decision = Decision(allowed=bool(status.get("allowed")), reason=str(status.get("reason") or ""))
        self._decisions.put(key, decision, self.allow_ttl if decision.allowed else self.deny_ttl)
        return decision
