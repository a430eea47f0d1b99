"""coscheduling/informers: the PodGroups by ``<namespace>/<name>`` (an invalid one left out,
its reason kept for its pods to say) and the pods carrying the group label by UID."""

from __future__ import annotations

from typing import Any

import pytest

from ipscheduler.coscheduling.groups import GroupIndex
from ipscheduler.coscheduling.informers import member_informer, podgroup_informer
from ipscheduler.coscheduling.models import POD_GROUP_LABEL

VALID = {"minMember": 2}
INVALID = {"minMember": 0}
WHY = "spec.minMember: Input should be greater than or equal to 1"


def podgroup(spec: dict[str, Any], namespace: str | None = "ns", name: str = "g") -> dict[str, Any]:
    meta = {"name": name, "uid": f"uid-{name}", **({"namespace": namespace} if namespace else {})}
    return {"metadata": meta, "spec": spec}


@pytest.mark.parametrize(
    ("specs", "indexed", "invalid"),
    [
        ([VALID], {"ns/g": 2}, {}),
        ([INVALID], {}, {"ns/g": WHY}),
        ([INVALID, VALID], {"ns/g": 2}, {}),
        ([VALID, INVALID], {}, {"ns/g": WHY}),
        ([VALID, {"minMember": 3}], {"ns/g": 3}, {}),
    ],
    ids=["valid", "invalid-left-out-with-its-reason", "mended", "broken-after-a-valid-one", "changed"],
)
def test_a_podgroup_is_indexed_by_namespace_and_name_or_its_reason_kept(
    specs: list[dict[str, Any]], indexed: dict[str, int], invalid: dict[str, str]
) -> None:
    index = GroupIndex()
    store = podgroup_informer(index)
    for i, spec in enumerate(specs):
        store.apply("ADDED" if i == 0 else "MODIFIED", podgroup(spec))
    assert {key: view.min_member for key, (view,) in store.index.items()} == indexed
    assert index.invalid == invalid


def test_podgroups_of_one_name_in_two_namespaces_are_two() -> None:
    store = podgroup_informer(GroupIndex())
    store.apply("ADDED", podgroup(VALID, "a"))
    store.apply("ADDED", podgroup({"minMember": 3}, "b"))
    assert sorted(store.index) == ["a/g", "b/g"]


def test_a_podgroup_without_a_namespace_is_ignored_and_nothing_kept_of_it() -> None:
    index = GroupIndex()
    store = podgroup_informer(index)
    store.apply("ADDED", podgroup(INVALID, namespace=None))
    assert (store.index, index.invalid) == ({}, {})


def member(uid: str, group: str | None) -> dict[str, Any]:
    labels = {POD_GROUP_LABEL: group} if group is not None else {}
    return {"metadata": {"uid": uid, "namespace": "ns", "name": f"pod-{uid}", "labels": labels}, "spec": {}}


def test_members_are_the_labelled_pods_by_uid() -> None:
    store = member_informer()
    for body in (member("u1", "g"), member("u2", "g"), member("u3", None), member("u4", "")):
        store.apply("ADDED", body)
    assert sorted(store.index) == ["u1", "u2"]


def test_the_members_are_narrowed_server_side_to_the_group_label() -> None:
    method, args, kwargs = member_informer().endpoint(object())  # type: ignore[arg-type]
    assert (getattr(method, "__name__", ""), args, kwargs) == (
        "list_pod_for_all_namespaces",
        (),
        {"label_selector": POD_GROUP_LABEL},
    )
