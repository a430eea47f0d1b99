"""kube/reviews: TokenReview and SubjectAccessReview answers, cached as kube's delegating
authenticator and authorizer do (10 s each by default), with the API calls faked."""

from __future__ import annotations

from typing import Any

import pytest

from ipscheduler.kube import reviews
from ipscheduler.kube.reviews import Decision, DelegatingAuth, UserInfo


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeReviews(DelegatingAuth):
    """DelegatingAuth whose two API calls answer from tables and count themselves."""

    def __init__(self, clock: Clock, users: dict[str, dict[str, Any]], allowed: set[str], **ttl: float):
        self.users, self.allowed = users, allowed
        self.sent: list[Any] = []
        super().__init__(api_client=None, clock=clock, **ttl)  # type: ignore[arg-type]

    async def token_review(self, token: str) -> dict[str, Any]:
        self.sent.append(("token", token))
        user = self.users.get(token)
        return {"authenticated": True, "user": user} if user else {"authenticated": False}

    async def access_review(self, user: UserInfo, verb: str, path: str) -> dict[str, Any]:
        self.sent.append(("access", user.name, verb, path))
        return {"allowed": f"{user.name} {verb} {path}" in self.allowed, "reason": "rbac"}


SA = {"username": "system:serviceaccount:ns:scraper", "uid": "u1", "groups": ["system:serviceaccounts"]}


def test_the_defaults_are_kubes() -> None:
    assert (reviews.DEFAULT_TOKEN_TTL, reviews.DEFAULT_ALLOW_TTL, reviews.DEFAULT_DENY_TTL) == (10, 10, 10)


@pytest.mark.parametrize(
    ("token", "after", "want_reviews"),
    [
        pytest.param("good", 9.9, 1, id="accepted-token-cached-within-ttl"),
        pytest.param("good", 10.0, 2, id="accepted-token-reviewed-again-after-ttl"),
        pytest.param("bad", 9.9, 1, id="rejected-token-cached-too"),
        pytest.param("bad", 10.0, 2, id="rejected-token-reviewed-again-after-ttl"),
    ],
)
async def test_token_reviews_are_cached_for_the_ttl(token: str, after: float, want_reviews: int) -> None:
    clock = Clock()
    auth = FakeReviews(clock, {"good": SA}, set())
    first = await auth.authenticate(token)
    clock.now += after
    second = await auth.authenticate(token)
    assert first == second
    assert (first is not None) == (token == "good")
    assert len(auth.sent) == want_reviews


async def test_a_user_is_read_from_the_review() -> None:
    auth = FakeReviews(Clock(), {"t": {**SA, "extra": {"b": ["2"], "a": ["1"]}}}, set())
    user = await auth.authenticate("t")
    assert user == UserInfo(
        "system:serviceaccount:ns:scraper", "u1", ("system:serviceaccounts",), (("a", ("1",)), ("b", ("2",)))
    )


@pytest.mark.parametrize(
    ("allowed", "ttl", "after", "want_reviews"),
    [
        pytest.param(True, {}, 9.9, 1, id="allowed-cached-10s"),
        pytest.param(True, {}, 10.0, 2, id="allowed-expires-at-10s"),
        pytest.param(False, {}, 9.9, 1, id="denied-cached-10s"),
        pytest.param(False, {"deny_ttl": 1.0}, 1.0, 2, id="denied-own-ttl"),
        pytest.param(True, {"allow_ttl": 0.0}, 0.0, 2, id="ttl-0-not-cached"),
    ],
)
async def test_access_reviews_are_cached_by_answer(
    allowed: bool, ttl: dict[str, float], after: float, want_reviews: int
) -> None:
    clock = Clock()
    user = UserInfo.from_status(SA)
    auth = FakeReviews(clock, {}, {f"{user.name} get /metrics"} if allowed else set(), **ttl)
    first = await auth.authorize(user, "get", "/metrics")
    clock.now += after
    second = await auth.authorize(user, "get", "/metrics")
    assert first == second == Decision(allowed, "rbac")
    assert len(auth.sent) == want_reviews


async def test_a_cached_answer_is_per_user_verb_and_path() -> None:
    auth = FakeReviews(Clock(), {}, {"a get /metrics"})
    a, b = UserInfo("a"), UserInfo("b")
    got = [
        (await auth.authorize(a, "get", "/metrics")).allowed,
        (await auth.authorize(b, "get", "/metrics")).allowed,
        (await auth.authorize(a, "post", "/metrics")).allowed,
        (await auth.authorize(a, "get", "/debug")).allowed,
        (await auth.authorize(a, "get", "/metrics")).allowed,
    ]
    assert got == [True, False, False, False, True]
    assert len(auth.sent) == 4


async def test_a_failed_review_is_not_cached() -> None:
    class Failing(FakeReviews):
        fail = True

        async def token_review(self, token: str) -> dict[str, Any]:
            if self.fail:
                self.fail = False
                raise OSError("connection refused")
            return await super().token_review(token)

    auth = Failing(Clock(), {"good": SA}, set())
    with pytest.raises(OSError):
        await auth.authenticate("good")
    assert await auth.authenticate("good") is not None


@pytest.mark.parametrize(
    "user",
    [
        pytest.param({}, id="empty"),
        pytest.param({"username": ""}, id="blank"),
        pytest.param({"uid": "x"}, id="no-name"),
    ],
)
def test_a_review_without_a_username_is_refused(user: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="no username"):
        UserInfo.from_status(user)
