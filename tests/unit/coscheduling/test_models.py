"""coscheduling/models: the committed PodGroup CRD is generated from the models, keeps
scheduler-plugins' group, names and fields, and PodGroups parse with clear errors."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from ipscheduler.coscheduling.models import PodGroupView, crd_yaml

CRD_PATH = Path(__file__).resolve().parents[3] / "crds" / "podgroups.scheduling.x-k8s.io.yaml"


def test_committed_crd_is_up_to_date() -> None:
    assert CRD_PATH.read_text() == crd_yaml(), "run `make crds`"


def test_upstream_names_and_fields() -> None:
    crd = yaml.safe_load(CRD_PATH.read_text())
    spec = crd["spec"]
    assert (spec["group"], spec["scope"], spec["names"]["kind"]) == (
        "scheduling.x-k8s.io",
        "Namespaced",
        "PodGroup",
    )
    assert spec["names"]["shortNames"] == ["pg", "pgs"]
    version = spec["versions"][0]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    schema = version["schema"]["openAPIV3Schema"]["properties"]
    assert set(schema["spec"]["properties"]) == {"minMember", "minResources", "scheduleTimeoutSeconds"}
    assert {"phase", "occupiedBy", "running", "succeeded", "failed", "scheduleStartTime"} <= set(
        schema["status"]["properties"]
    )
    quantity = schema["spec"]["properties"]["minResources"]["additionalProperties"]
    assert quantity["x-kubernetes-int-or-string"] is True
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == ["Phase", "MinMember", "Scheduled", "Running", "Succeeded", "Failed", "Age"]


def body(**spec: Any) -> dict[str, Any]:
    meta = {"namespace": "ns", "name": "g", "uid": "u", "creationTimestamp": "2026-01-01T00:00:00Z"}
    return {"metadata": meta, "spec": spec}


@pytest.mark.parametrize(
    ("spec", "min_member", "timeout", "error"),
    [
        ({"minMember": 4, "scheduleTimeoutSeconds": 10}, 4, 10.0, ""),
        ({}, 1, None, ""),
        ({"minMember": 0}, 0, None, "spec.minMember: Input should be greater than or equal to 1"),
        ({"minMember": "four"}, 0, None, "spec.minMember: Input should be a valid integer"),
        (
            {"scheduleTimeoutSeconds": -1},
            0,
            None,
            "spec.scheduleTimeoutSeconds: Input should be greater than or",
        ),
    ],
    ids=["full", "defaults", "zero-members", "not-a-number", "negative-timeout"],
)
def test_podgroup_view(spec: dict[str, Any], min_member: int, timeout: float | None, error: str) -> None:
    if error:
        with pytest.raises(ValueError, match=error):
            PodGroupView.from_obj(body(**spec))
        return
    view = PodGroupView.from_obj(body(**spec))
    assert (view.key, view.min_member, view.timeout) == ("ns/g", min_member, timeout)
    assert view.creation is not None and view.creation.year == 2026


@pytest.mark.parametrize(
    ("min_resources", "parsed", "error"),
    [
        (
            {"cpu": "1500m", "memory": "2Gi", "pods": 4},
            {"cpu": Decimal("1.5"), "memory": Decimal(2 * 2**30), "pods": Decimal(4)},
            "",
        ),
        (None, {}, ""),
        ({"cpu": "lots"}, {}, "spec.minResources.cpu: invalid quantity 'lots'"),
    ],
    ids=["quantities", "absent", "invalid"],
)
def test_min_resources_are_parsed_as_quantities(
    min_resources: dict[str, Any] | None, parsed: dict[str, Decimal], error: str
) -> None:
    spec = {"minMember": 2} | ({"minResources": min_resources} if min_resources is not None else {})
    if error:
        with pytest.raises(ValueError, match=error):
            PodGroupView.from_obj(body(**spec))
        return
    view = PodGroupView.from_obj(body(**spec))
    assert dict(view.min_resources) == parsed
