"""framework/extender: the wire types under the Go field names kube-scheduler uses."""

from __future__ import annotations

import pytest

from ipscheduler.framework.extender import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderPreemptionArgs,
    ExtenderPreemptionResult,
    HostPriority,
    MetaPod,
    MetaVictims,
)


@pytest.mark.parametrize(
    "body",
    [
        {"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["a", "b"]},
        {"pod": {"metadata": {"name": "p"}}, "nodenames": ["a", "b"]},  # Go's decoder ignores case
    ],
    ids=["go-names", "lower-case"],
)
def test_extender_args_by_name(body: dict[str, object]) -> None:
    args = ExtenderArgs.model_validate(body)
    assert args.candidate_names() == ["a", "b"] and args.node_objects() == {}


def test_extender_args_with_full_nodes() -> None:
    args = ExtenderArgs.model_validate(
        {"Pod": {}, "Nodes": {"items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]}}
    )
    assert args.candidate_names() == ["a", "b"] and set(args.node_objects()) == {"a", "b"}


def test_filter_result_wire_form_uses_go_names_and_leaves_out_none() -> None:
    wire = ExtenderFilterResult(
        node_names=["a"], failed_nodes={"b": "why"}, failed_and_unresolvable_nodes={"c": "never"}
    ).to_wire()
    assert wire == {
        "NodeNames": ["a"],
        "FailedNodes": {"b": "why"},
        "FailedAndUnresolvableNodes": {"c": "never"},
        "Error": "",
    }


def test_host_priority_binding_and_preemption_wire_forms() -> None:
    assert HostPriority(host="a", score=7).to_wire() == {"Host": "a", "Score": 7}
    args = ExtenderBindingArgs.model_validate(
        {"PodName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": "n"}
    )
    assert (args.pod_name, args.pod_namespace, args.pod_uid, args.node) == ("p", "ns", "u", "n")
    assert ExtenderBindingResult().to_wire() == {"Error": ""}
    kept = ExtenderPreemptionResult(
        node_name_to_meta_victims={"n": MetaVictims(pods=[MetaPod(uid="u")], num_pdb_violations=2)}
    )
    assert kept.to_wire() == {"NodeNameToMetaVictims": {"n": {"Pods": [{"UID": "u"}], "NumPDBViolations": 2}}}


def test_preemption_args_in_either_form_give_victims_by_uid() -> None:
    meta = ExtenderPreemptionArgs.model_validate(
        {"Pod": {}, "NodeNameToMetaVictims": {"n": {"Pods": [{"UID": "u1"}], "NumPDBViolations": 1}}}
    )
    full = ExtenderPreemptionArgs.model_validate(
        {
            "Pod": {},
            "NodeNameToVictims": {"n": {"Pods": [{"metadata": {"uid": "u1"}}], "NumPDBViolations": 1}},
        }
    )
    assert meta.candidates() == full.candidates()
    assert [p.uid for p in full.candidates()["n"].pods] == ["u1"]
