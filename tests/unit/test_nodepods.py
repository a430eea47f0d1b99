"""NodePods: the pods-by-node index that resource and port filters read."""

from __future__ import annotations

from typing import Any

import pytest

from ipscheduler.backend.nodepods import NodePods


def pod(uid: str, node: str = "", phase: str = "Running", cpu: str = "100m") -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "namespace": "ns", "name": uid},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"phase": phase},
    }


def test_upsert_indexes_by_node_and_moves() -> None:
    freed: list[str] = []
    idx = NodePods(on_change=lambda p: freed.append(p.node_name))
    idx.upsert(pod("a", "n1"))
    idx.upsert(pod("b", "n1"))
    assert [p.uid for p in idx.pods_on("n1")] == ["a", "b"]
    idx.upsert(pod("a", "n2"))
    assert [p.uid for p in idx.pods_on("n1")] == ["b"] and [p.uid for p in idx.pods_on("n2")] == ["a"]
    assert freed == []  # adds never signal freed capacity


@pytest.mark.parametrize(
    "change",
    [
        lambda i: i.remove("a"),
        lambda i: i.upsert(pod("a", "n1", phase="Succeeded")),
        lambda i: i.upsert(pod("a")),
    ],
    ids=["deleted", "terminal", "unbound"],
)
def test_pod_leaving_a_node_frees_it(change: Any) -> None:
    freed: list[str] = []
    idx = NodePods(on_change=lambda p: freed.append(p.node_name))
    idx.upsert(pod("a", "n1"))
    change(idx)
    assert idx.pods_on("n1") == () and idx.get("a") is None and len(idx) == 0
    assert freed == ["n1"]


def test_replace_all_and_node_requested_sum() -> None:
    from decimal import Decimal

    from ipscheduler.framework.types import NodeInfo

    idx = NodePods()
    idx.upsert(pod("old", "n1"))
    idx.replace_all([pod("x", "n1", cpu="250m"), pod("y", "n1", cpu="1"), pod("z", "", cpu="9")])
    node = NodeInfo(name="n1", pods=idx.pods_on("n1"))
    assert node.requested == {"pods": Decimal(2), "cpu": Decimal("1.250")}
    assert idx.get("old") is None and idx.get("z") is None


def test_relist_reports_pods_that_left_while_the_watch_was_down() -> None:
    gone: list[str] = []
    idx = NodePods(on_change=lambda p: gone.append(p.uid))
    idx.upsert(pod("stays", "n1"))
    idx.upsert(pod("deleted", "n1"))
    idx.replace_all([pod("stays", "n1"), pod("new", "n2")])
    assert gone == ["deleted"]
    assert sorted(p.uid for p in idx.values()) == ["new", "stays"]


async def test_raw_watch_decodes_once_tracks_the_resource_version_and_raises_410() -> None:
    import json

    import pytest
    from kubernetes_asyncio.client.exceptions import ApiException

    from ipscheduler.kube.informer import RawWatch

    w = RawWatch()
    pod = {"metadata": {"name": "p", "resourceVersion": "42"}, "spec": {"nodeName": "n1"}}
    event = w.unmarshal_event(json.dumps({"type": "MODIFIED", "object": pod}), "object")
    assert event["object"] is event["raw_object"]
    assert event["object"] == pod
    assert w.resource_version == "42"
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "50"}}}
    assert w.unmarshal_event(json.dumps(bookmark), None)["type"] == "BOOKMARK"
    assert w.resource_version == "50"
    gone = {"type": "ERROR", "object": {"code": 410, "reason": "Expired", "message": "too old"}}
    with pytest.raises(ApiException) as err:
        w.unmarshal_event(json.dumps(gone), None)
    assert err.value.status == 410
    with pytest.raises(ValueError, match="undecodable watch event"):
        w.unmarshal_event('{"type": "MODIFIED", "obj', None)  # a line cut mid-way


def test_raw_watch_builds_no_api_client_of_its_own() -> None:
    """Upstream's Watch() builds an ApiClient (SSL context, aiohttp session: it even needs a
    running loop); ours must not (it costs ~35 ms per watch opened)."""
    import asyncio

    from ipscheduler.kube.informer import RawWatch

    w = RawWatch()  # no running loop here: upstream's constructor would raise
    assert not hasattr(w, "_api_client")
    asyncio.run(w.close())
