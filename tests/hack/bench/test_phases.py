"""hack/bench/phases.py: which phases run by default and in what order, the contending client
of the contended phases, the pods of a gang (the pods of the dual-stack and interface phases:
test_multi.py)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from bench import multi, multus, phases
from ipscheduler.coscheduling.models import PodGroupSpec


def test_the_running_phase_and_the_several_address_phases_are_not_in_the_default_phases() -> None:
    """``running`` needs root; the dual-stack and interface phases are asked for by name
    (interfaces-16 took longer than the rest of the small preset: docs/performance.md)."""
    real = {"running", *multus.MULTUS_PHASES}  # root, a real node
    assert {*real, *multi.MULTI_PHASES} <= set(phases.PHASES)
    assert set(phases.DEFAULT_PHASES) == set(phases.PHASES) - {*real, *multi.MULTI_PHASES}
    order = list(phases.PHASES)
    assert order.index("failover") < order.index("dualstack-single") < order.index("running")
    assert order.index("running") < order.index("running-interfaces-1") < order.index("running-interfaces-16")


def test_the_contended_phases_run_by_default_after_the_backlogs() -> None:
    order = list(phases.PHASES)
    assert {"contended-ours", "contended-kube50", "contended-kube1000"} <= set(phases.DEFAULT_PHASES)
    assert order.index("backlog-kube1000") < order.index("contended-ours") < order.index("failover")


class _Body:
    def __init__(self) -> None:
        self.read_through = self.released = False

    async def read(self) -> bytes:
        self.read_through = True
        return b'{"items": []}'

    def release(self) -> None:
        self.released = True


async def test_the_contending_client_reads_each_list_and_gives_its_connection_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An unread LIST body keeps its pooled connection: with big bodies the pool ran out and
    the large preset's contended phase never ended."""
    monkeypatch.setattr(phases, "CONTEND_INTERVAL", 0.0)
    done = asyncio.Event()
    bodies: list[_Body] = []

    class Core:
        async def list_pod_for_all_namespaces(self, _preload_content: bool) -> _Body:
            assert _preload_content is False
            bodies.append(_Body())
            if len(bodies) == 3:
                done.set()
            return bodies[-1]

    lists = [0]
    await asyncio.wait_for(phases.contend(cast(Any, Core()), done, lists), timeout=5)
    assert lists == [3]
    assert all(b.read_through and b.released for b in bodies)


async def test_a_gang_is_podgroups_of_size_and_pods_labelled_into_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    created: list[tuple[str, str, str, str, dict[str, Any]]] = []

    class Custom:
        def __init__(self, api: object) -> None:
            pass

        async def create_namespaced_custom_object(
            self, group: str, version: str, ns: str, plural: str, body: dict[str, Any]
        ) -> None:
            created.append((group, version, ns, plural, body))

    monkeypatch.setattr(phases.client, "CustomObjectsApi", Custom)
    await phases.create_podgroups(cast(Any, None), "bench-5", 3, 10)
    assert sorted(body["metadata"]["name"] for *_, body in created) == ["g0", "g1", "g2"]
    for group, version, ns, plural, body in created:
        assert (group, version, ns, plural) == ("scheduling.x-k8s.io", "v1alpha1", "bench-5", "podgroups")
        assert (body["apiVersion"], body["kind"]) == ("scheduling.x-k8s.io/v1alpha1", "PodGroup")
        assert PodGroupSpec.model_validate(body["spec"]).min_member == 10
    pod = phases.pod_body("p23", "ip-scheduler", extended=False, group="g2")
    assert pod["metadata"]["labels"] == {"scheduling.x-k8s.io/pod-group": "g2"}
    assert "labels" not in phases.pod_body("p23", "ip-scheduler", extended=False)["metadata"]
