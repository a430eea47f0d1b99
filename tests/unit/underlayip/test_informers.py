"""underlayip/informers: the NodeIPPools by name (our own write's echo not parsed again) and
the namespaces that carry default pools."""

from __future__ import annotations

from typing import Any

import pytest

from ipscheduler.underlayip.informers import namespace_informer, pool_informer
from ipscheduler.underlayip.models import ANNOTATION_DEFAULT_POOLS
from ipscheduler.underlayip.pool import PoolView
from tests.builders import pool_body
from tests.unit.fakes import pool_cache


def test_a_pool_is_parsed_by_name() -> None:
    store = pool_informer(pool_cache())
    store.apply("ADDED", pool_body("pa", "node-a", addresses=["10.0.0.1-10.0.0.4"], rv="3"))
    got = store.get("pa")
    assert got is not None and (got.name, got.node_name, got.resource_version) == ("pa", "node-a", "3")


@pytest.mark.parametrize(
    ("echo_rv", "reused"),
    [("11", True), ("12", False)],
    ids=["our-writes-echo-reuses-our-view", "a-later-version-is-parsed"],
)
def test_the_echo_of_our_own_write_reuses_the_view_we_built(echo_rv: str, reused: bool) -> None:
    cache = pool_cache()
    ours = PoolView.from_obj(pool_body("pa", "node-a", addresses=["10.0.0.1-10.0.0.4"], rv="11"))
    cache.store_fresh(ours, own_write=True)
    store = pool_informer(cache)
    store.apply("MODIFIED", pool_body("pa", "node-a", addresses=["10.0.0.1-10.0.0.4"], rv=echo_rv))
    assert (store.get("pa") is ours) is reused


def test_a_pool_body_without_a_name_parses_to_nothing() -> None:
    body = pool_body("pa")
    del body["metadata"]["name"]
    assert pool_informer(pool_cache()).parse(body) is None


def namespace(name: str, annotations: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, **({"annotations": annotations} if annotations is not None else {})}}


def test_only_the_namespaces_with_default_pools_are_kept() -> None:
    store = namespace_informer()
    store.apply("ADDED", namespace("team-a", {ANNOTATION_DEFAULT_POOLS: "pa,pb"}))
    store.apply("ADDED", namespace("team-b", {"other": "x"}))
    store.apply("ADDED", namespace("team-c"))
    store.apply("ADDED", namespace("team-d", {ANNOTATION_DEFAULT_POOLS: "pd"}))
    store.apply("MODIFIED", namespace("team-d", {}))  # its annotation removed
    assert {key: value.pools for key, (value,) in store.index.items()} == {"team-a": "pa,pb"}
