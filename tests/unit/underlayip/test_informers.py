"""underlayip/informers: the NodeIPPools by name (our own write's echo not parsed again) and
the namespaces that carry default pools and the NetworkAttachmentDefinitions that carry our
annotations, by namespace/name."""

from __future__ import annotations

from typing import Any

import pytest

from ipscheduler.underlayip.informers import (
    NETWORK_ATTACHMENT_DEFINITIONS,
    namespace_informer,
    network_informer,
    pool_informer,
)
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


def nad(namespace: str, name: str, annotations: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": namespace, "name": name}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"config": "{}"}}


@pytest.mark.parametrize(
    ("events", "kept"),
    [
        pytest.param(
            [("ADDED", nad("a", "rdma", {"ipscheduler.io/pools": "p"}))], {"a/rdma": "p"}, id="pools"
        ),
        pytest.param(
            [("ADDED", nad("a", "v6", {"ipscheduler.io/ip-families": "IPv6"}))],
            {"a/v6": None},
            id="families-only",
        ),
        pytest.param(
            [("ADDED", nad("a", "x", {"ipscheduler.io/pools": "p"})), ("ADDED", nad("b", "x"))],
            {"a/x": "p"},
            id="by-namespace-and-name-without-annotations-left-out",
        ),
        pytest.param(
            [("ADDED", nad("a", "x", {"k8s.v1.cni.cncf.io/resourceName": "r"}))],
            {},
            id="other-annotations-left-out",
        ),
        pytest.param(
            [("ADDED", nad("a", "x", {"ipscheduler.io/pools": "p"})), ("MODIFIED", nad("a", "x", {}))],
            {},
            id="annotation-removed-leaves",
        ),
        pytest.param(
            [("ADDED", nad("a", "x", {"ipscheduler.io/pools": "p"})), ("DELETED", nad("a", "x"))],
            {},
            id="deleted",
        ),
        pytest.param([("ADDED", {"metadata": {"name": "x"}})], {}, id="no-namespace-ignored"),
    ],
)
def test_only_the_network_attachment_definitions_naming_our_annotations_are_kept(
    events: list[tuple[str, dict[str, Any]]], kept: dict[str, str | None]
) -> None:
    optional = network_informer()
    assert optional.resource == NETWORK_ATTACHMENT_DEFINITIONS
    assert NETWORK_ATTACHMENT_DEFINITIONS.api_version == "k8s.cni.cncf.io/v1"
    for kind, body in events:
        optional.store.apply(kind, body)
    assert {key: value.pools for key, (value,) in optional.store.index.items()} == kept
