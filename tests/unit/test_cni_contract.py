"""The CNI hand-off contract (``testdata/cni-contract/``), the scheduler's side.

The same files are read by the plugin's Go tests (``cni/internal/ipam/contract_test.go``):
here, that UnderlayIP's Reserve + PreBind write exactly the contract's annotations and
allocation for each case, and that ``cni/README.md``'s error table lists exactly the
contract's codes and messages; there, that ADD turns those annotations into exactly the
contract's result or error.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from ipscheduler.framework.interface import BIND_ANNOTATIONS, CycleState
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.underlayip.binder import PoolBinder
from ipscheduler.underlayip.models import (
    ANNOTATION_INTERFACES,
    ANNOTATION_IP,
    ANNOTATION_IPS,
    ANNOTATION_NETWORK,
    ANNOTATION_POOL,
)
from ipscheduler.underlayip.multus import NETWORKS_ANNOTATION
from ipscheduler.underlayip.plugin import UnderlayIP
from ipscheduler.underlayip.pool import PoolView
from ipscheduler.underlayip.sticky import StickyAddresses
from ipscheduler.underlayip.writer import PoolWriter
from tests.unit.fakes import FakePoolApi, pool_cache

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "testdata" / "cni-contract"
CNI_README = ROOT / "cni" / "README.md"

NETWORK: dict[str, Any] = json.loads((CONTRACT / "network.json").read_text())
ERRORS: list[dict[str, Any]] = json.loads((CONTRACT / "errors.json").read_text())["errors"]
POD: dict[str, str] = NETWORK["pod"]
CASES: list[dict[str, Any]] = NETWORK["cases"]
ALL_CASES: list[dict[str, Any]] = CASES + NETWORK["cniOnly"]


def _ids(cases: list[dict[str, Any]]) -> list[str]:
    return [c["name"] for c in cases]


async def _schedule(case: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """Reserve + PreBind of the contract's pod on its node with the case's pool: the
    Binding's annotations and the pod's allocation as written to the pool's status."""
    given = (case["pool"], case.get("firstPool"), case.get("secondPool"))
    bodies = [copy.deepcopy(b) for b in given if b is not None]
    for b in bodies:
        b["metadata"].setdefault("resourceVersion", "1")
    name = bodies[0]["metadata"]["name"]
    node = NodeInfo(name=POD["nodeName"], ready=True)
    cache = pool_cache({node.name: [node]}, {b["metadata"]["name"]: [PoolView.from_obj(b)] for b in bodies})
    api = FakePoolApi(bodies)
    writer = PoolWriter(api, cache)  # type: ignore[arg-type]
    binder = PoolBinder(cache, writer)
    plugin = UnderlayIP(binder, StickyAddresses(writer), "spread", multus_network=case.get("multusNetwork"))
    pod = PodInfo(
        uid=POD["uid"],
        namespace=POD["namespace"],
        name=POD["name"],
        scheduler_name=POD["schedulerName"],
        annotations=case.get("podAnnotations", {}),
    )
    state = CycleState()
    assert plugin.pre_filter(state, pod, cache.node_cache.nodes()).is_success()
    bound_node = cache.node_cache.node(node.name)
    assert bound_node is not None
    assert (await plugin.reserve(state, pod, bound_node)).is_success()
    assert (await plugin.pre_bind(state, pod, bound_node)).is_success()
    await writer.flush()
    written = api.bodies[name]["status"]["allocations"][POD["uid"]]
    if "secondPool" in case:  # dual-stack from two pools: the second family's allocation
        second = api.bodies[case["secondPool"]["metadata"]["name"]]["status"]["allocations"][POD["uid"]]
        assert second == {**second, **case["secondAllocation"]}
    return dict(state.get(BIND_ANNOTATIONS) or {}), written


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
async def test_the_scheduler_writes_the_contracts_annotations_and_allocation(case: dict[str, Any]) -> None:
    annotations, allocation = await _schedule(case)
    assert annotations == case["annotations"]
    assert allocation.get("ip") == case["allocation"].get("ip")
    assert allocation.get("ips") == case["allocation"].get("ips")
    assert allocation.get("interface") == case["allocation"].get("interface")
    assert allocation["pod"] == f"{POD['namespace']}/{POD['name']}"


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_the_network_annotation_is_the_cni_result_without_cni_version(case: dict[str, Any]) -> None:
    """ipscheduler.io/network is a CNI IPAM result without interfaces (models.ANNOTATION_NETWORK):
    what the plugin prints is it plus cniVersion; an empty one (a count-only slot) gives an error."""
    network = case["annotations"].get(ANNOTATION_NETWORK)
    further = json.loads(case["annotations"].get(ANNOTATION_INTERFACES) or "{}")
    if case.get("ifName") in further:  # a further interface: its entry's network
        assert case["result"] == {"cniVersion": NETWORK["cniVersion"], **further[case["ifName"]]["network"]}
        return
    if not network:
        assert "error" in case
        return
    assert case["result"] == {"cniVersion": NETWORK["cniVersion"], **json.loads(network)}
    assert json.dumps(json.loads(network), separators=(",", ":")) == network  # compact


@pytest.mark.parametrize("case", ALL_CASES, ids=_ids(ALL_CASES))
def test_each_case_has_one_outcome_from_errors_json(case: dict[str, Any]) -> None:
    assert ("result" in case) != ("error" in case)
    if "error" in case:
        assert {"code": case["error"]["code"], "msg": case["error"]["msg"]} in [
            {"code": e["code"], "msg": e["msg"]} for e in ERRORS
        ]
    else:
        assert case["result"]["cniVersion"] == NETWORK["cniVersion"]


def test_the_contract_uses_the_schedulers_annotation_keys() -> None:
    ours = {ANNOTATION_POOL, ANNOTATION_IP, ANNOTATION_IPS, ANNOTATION_NETWORK, ANNOTATION_INTERFACES}
    for case in CASES:
        assert set(case["annotations"]) - ours <= {NETWORKS_ANNOTATION}, case["name"]


def test_errors_json_is_ordered_by_code_without_duplicates() -> None:
    pairs = [(e["code"], e["msg"]) for e in ERRORS]
    assert pairs == sorted(pairs, key=lambda p: p[0])
    assert len(set(pairs)) == len(pairs)
    assert {c for c, _ in pairs} >= set(range(100, 114))


def _readme_error_table() -> list[tuple[int, str]]:
    """(code, msg) of each row of the table under ``## Errors`` in cni/README.md."""
    section = CNI_README.read_text().split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert rows[0].startswith("| code | msg |") and rows[1].startswith("| --- |"), rows[:2]
    out = []
    for row in rows[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        m = re.fullmatch(r"`([^`]+)`", cells[1])
        assert m is not None, f"msg not in backticks: {row}"
        out.append((int(cells[0]), m.group(1)))
    return out


def test_the_readme_error_table_lists_exactly_errors_json() -> None:
    assert _readme_error_table() == [(e["code"], e["msg"]) for e in ERRORS]
