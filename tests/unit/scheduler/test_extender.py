"""scheduler/extender: the four verbs over the UnderlayIP profile, a real pool cache and
writer; only the API server is in memory."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.cmd.profiles import build_profile, extender_profile
from ipscheduler.framework.extender import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderPreemptionArgs,
)
from ipscheduler.framework.interface import CycleState
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.kube.client import live_pod
from ipscheduler.scheduler.extender import ERR_UNKNOWN_NODE, ExtenderVerbs
from ipscheduler.underlayip.plugin import ERR_NO_FREE, ERR_NO_POOL, UnderlayIPDeps
from ipscheduler.underlayip.pool import PoolView
from ipscheduler.underlayip.writer import PoolWriter
from tests.builders import SCHEDULER, alloc, container, pod_body, pool_body
from tests.unit.fakes import ExtenderEnv as Env
from tests.unit.fakes import PodApi, pool_cache

NODES = ("node-1", "node-2", "node-3")


def node_list(*names: str) -> dict[str, Any]:
    return {"kind": "NodeList", "apiVersion": "v1", "items": [{"metadata": {"name": n}} for n in names]}


# --------------------------------------------------------------------------- filter


@pytest.mark.parametrize("by_name", [True, False], ids=["NodeNames", "Nodes"])
def test_filter_keeps_nodes_with_a_free_address_and_says_why_of_the_others(by_name: bool) -> None:
    env = Env()
    args = {"Pod": env.pod(), **({"NodeNames": list(NODES)} if by_name else {"Nodes": node_list(*NODES)})}
    result = env.verbs.filter(ExtenderArgs.model_validate(args))
    if by_name:
        assert result.node_names == ["node-1"] and result.nodes is None
    else:
        assert [i["metadata"]["name"] for i in result.nodes["items"]] == ["node-1"]  # type: ignore[index]
        assert result.node_names is None
    assert result.failed_nodes == {"node-3": ERR_NO_FREE}  # evicting a pod there would free one
    assert result.failed_and_unresolvable_nodes == {"node-2": ERR_NO_POOL}  # no eviction helps
    assert result.error == ""


def test_filter_names_nodes_it_does_not_know() -> None:
    env = Env()
    result = env.verbs.filter(
        ExtenderArgs.model_validate({"Pod": env.pod(), "NodeNames": ["node-1", "node-9"]})
    )
    assert (result.node_names, result.failed_nodes) == (["node-1"], {"node-9": ERR_UNKNOWN_NODE})


def test_filter_of_a_pod_naming_a_missing_pool_fails_every_node_with_that_reason() -> None:
    env = Env()
    pod = env.pod()
    pod["metadata"]["annotations"] = {"ipscheduler.io/pools": "nope"}
    result = env.verbs.filter(ExtenderArgs.model_validate({"Pod": pod, "NodeNames": ["node-1", "node-3"]}))
    assert result.node_names == []
    assert set(result.failed_nodes) == {"node-1", "node-3"}
    assert "nope" in result.failed_nodes["node-1"]


def test_filter_of_an_unreadable_pod_is_an_error() -> None:
    env = Env()
    result = env.verbs.filter(ExtenderArgs.model_validate({"Pod": {"spec": "?"}, "NodeNames": ["node-1"]}))
    assert result.error.startswith("cannot read the pod")


# --------------------------------------------------------------------------- prioritize


def test_prioritize_scores_0_to_10_and_0_for_nodes_that_do_not_fit() -> None:
    env = Env()
    scores = env.verbs.prioritize(ExtenderArgs.model_validate({"Pod": env.pod(), "NodeNames": list(NODES)}))
    assert [(h.host, h.score) for h in scores] == [("node-1", 10), ("node-2", 0), ("node-3", 0)]


# --------------------------------------------------------------------------- bind


def bind_args(node: str = "node-1", uid: str = "u-web") -> ExtenderBindingArgs:
    return ExtenderBindingArgs.model_validate(
        {"PodName": "web", "PodNamespace": "ns", "PodUID": uid, "Node": node}
    )


async def test_bind_reserves_the_lowest_free_address_and_binds_with_the_annotations() -> None:
    env = Env()
    env.pod()
    result = await env.verbs.bind(bind_args())
    assert result.error == ""
    assert env.api.bindings == ["web"]
    live = env.api.pods[("ns", "web")]
    assert live["spec"]["nodeName"] == "node-1"
    assert live["metadata"]["annotations"]["ipscheduler.io/ip"] == "10.0.1.1"
    assert live["metadata"]["annotations"]["ipscheduler.io/pool"] == "p1"
    assert env.allocations()["u-web"]["ip"] == "10.0.1.1"


async def test_a_retried_bind_of_a_bound_pod_succeeds_without_a_second_address() -> None:
    env = Env()
    env.pod()
    await env.verbs.bind(bind_args())
    again = await env.verbs.bind(bind_args())
    assert again.error == "" and env.api.bindings == ["web"] and len(env.allocations()) == 1


@pytest.mark.parametrize(
    ("node", "uid", "error"),
    [
        ("node-3", "u-web", "does not fit node-3: " + ERR_NO_FREE),
        ("node-2", "u-web", "does not fit node-2: " + ERR_NO_POOL),
        ("node-9", "u-web", "node node-9 is not known"),
        ("node-1", "other-uid", "no longer exists"),
    ],
    ids=["full", "no-pool", "unknown-node", "replaced-pod"],
)
async def test_bind_refuses_and_reserves_nothing(node: str, uid: str, error: str) -> None:
    env = Env()
    env.pod()
    result = await env.verbs.bind(bind_args(node, uid))
    assert error in result.error
    assert env.api.bindings == [] and env.allocations() == {}


async def test_a_failed_binding_releases_the_reservation_and_says_why() -> None:
    env = Env()
    env.pod()
    env.api.bind_error = ApiException(status=500, reason="Internal Server Error")
    result = await env.verbs.bind(bind_args())
    assert "HTTP 500" in result.error
    assert env.allocations() == {}, "Unreserve released the address"


# --------------------------------------------------------------------------- preempt


def test_preempt_keeps_only_nodes_where_a_victim_frees_a_usable_address() -> None:
    env = Env()
    victims = {
        "node-3": {"Pods": [{"UID": "holder"}], "NumPDBViolations": 0},  # frees 10.0.3.1
        "node-2": {"Pods": [{"UID": "x"}], "NumPDBViolations": 0},  # no pool: never fits
        "node-1": {"Pods": [{"UID": "y"}], "NumPDBViolations": 1},  # fits already (CPU victims)
    }
    result = env.verbs.preempt(
        ExtenderPreemptionArgs.model_validate({"Pod": env.pod(), "NodeNameToMetaVictims": victims})
    )
    assert sorted(result.node_name_to_meta_victims) == ["node-1", "node-3"]
    assert result.node_name_to_meta_victims["node-1"].num_pdb_violations == 1


def test_preempt_drops_a_full_node_whose_victims_hold_no_address_there() -> None:
    env = Env()
    victims = {"node-3": {"Pods": [{"UID": "someone-else"}]}}
    result = env.verbs.preempt(
        ExtenderPreemptionArgs.model_validate({"Pod": env.pod(), "NodeNameToMetaVictims": victims})
    )
    assert result.node_name_to_meta_victims == {}


def test_preempt_takes_full_victim_pods_too() -> None:
    env = Env()
    victims = {"node-3": {"Pods": [{"metadata": {"uid": "holder", "name": "h", "namespace": "ns"}}]}}
    result = env.verbs.preempt(
        ExtenderPreemptionArgs.model_validate({"Pod": env.pod(), "NodeNameToVictims": victims})
    )
    assert [p.uid for p in result.node_name_to_meta_victims["node-3"].pods] == ["holder"]


# --------------------------------------------------------------------------- preempt agrees


def victim_alloc(ip: str | None, **fields: Any) -> dict[str, Any]:
    """The victim's wire-form allocation, Bound unless ``fields`` say otherwise."""
    return {**alloc(ip, pod="ns/victim", phase="Bound"), **fields}


STICKY = {"releasePolicy": "StatefulSet", "identity": "ns/victim", "ownerUID": "uid-sts"}
OTHER = {"uid-other": alloc("10.0.0.1", pod="ns/other", phase="Bound")}
VICTIMS = [
    # (pool node-1 has, whether evicting the victim makes room)
    pytest.param(
        {"addresses": ["10.0.0.1"], "allocations": {"uid-victim": victim_alloc("10.0.0.1")}},
        True,
        id="pod-policy",
    ),
    pytest.param(
        {"addresses": ["10.0.0.1"], "allocations": {"uid-victim": victim_alloc("10.0.0.1", **STICKY)}},
        False,
        id="sticky",
    ),
    pytest.param(
        {
            "addresses": ["10.0.0.1"],
            "allocations": {**OTHER, "uid-victim": victim_alloc(None, phase="Nominated")},
        },
        False,
        id="nominated-place",
    ),
    pytest.param(
        {"addresses": ["10.0.0.1"], "allocations": {**OTHER, "uid-victim": victim_alloc("10.0.9.9")}},
        False,
        id="foreign-hold",
    ),
    pytest.param(
        {
            "addresses": ["10.0.0.1"],
            "allocations": {"uid-victim": victim_alloc("10.0.0.1")},
            "deleting": True,
        },
        False,
        id="pool-being-deleted",
    ),
]


@pytest.mark.parametrize(("pool", "frees"), VICTIMS)
async def test_preempt_and_in_process_preemption_agree_on_what_a_victim_frees(
    pool: dict[str, Any], frees: bool
) -> None:
    """One question, two paths: the extender's ``/preempt`` keeps node-1 exactly when
    in-process preemption (DefaultPreemption's dry run over UnderlayIP) nominates the pod
    there, for a victim whose address gives a place back or does not."""
    body = pool_body("p", "node-1", rv="5", **pool)
    node = NodeInfo(name="node-1", ready=True, allocatable={"pods": Decimal(110)})
    cache = pool_cache({"node-1": [node]}, {"p": [PoolView.from_obj(body)]})
    victim = PodInfo.from_obj(
        pod_body(
            container(name="c"),
            uid="uid-victim",
            name="victim",
            node="node-1",
            scheduler=SCHEDULER,
            phase="Running",
            priority=0,
        )
    )
    cache.node_cache.add_pod(victim)
    api = PodApi([body])
    preemptor = pod_body(
        container(name="c"), uid="uid-high", name="high", scheduler=SCHEDULER, phase="Pending", priority=100
    )
    api.put_pod(preemptor)
    deps = UnderlayIPDeps(cache, PoolWriter(api, cache))  # type: ignore[arg-type]

    async def read(uid: str, key: str) -> PodInfo | None:
        return await live_pod(api, uid, key)  # type: ignore[arg-type]

    verbs = ExtenderVerbs(extender_profile(deps, api), cache.node_cache, read)  # type: ignore[arg-type]
    args = {"Pod": preemptor, "NodeNameToMetaVictims": {"node-1": {"Pods": [{"UID": "uid-victim"}]}}}
    kept = verbs.preempt(ExtenderPreemptionArgs.model_validate(args)).node_name_to_meta_victims

    fw = build_profile(deps, api=api)  # type: ignore[arg-type]
    state, pod = CycleState(), PodInfo.from_obj(preemptor)
    feasible, diagnosis = fw.find_feasible(state, pod, cache.node_cache.snapshot())
    assert not feasible
    result, _ = await fw.run_post_filter(state, pod, diagnosis)
    nominated = result is not None and result.nominated_node_name == "node-1"

    assert (sorted(kept) == ["node-1"], nominated) == (frees, frees)
