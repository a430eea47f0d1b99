"""framework/resources.qos_class: the QoS class of a pod spec (no server)."""

from __future__ import annotations

from typing import Any

import pytest

from ipscheduler.framework.resources import qos_class

# --------------------------------------------------------------------------- qos_class


def ctr(requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None) -> dict[str, Any]:
    """A container with the given resources."""
    res: dict[str, Any] = {}
    if requests is not None:
        res["requests"] = requests
    if limits is not None:
        res["limits"] = limits
    return {"name": "c", "resources": res}


CM = {"cpu": "1", "memory": "1Gi"}

QOS_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("no-containers", {}, "BestEffort"),
    ("no-resources", {"containers": [{"name": "c"}]}, "BestEffort"),
    ("empty-resources", {"containers": [ctr({}, {})]}, "BestEffort"),
    (
        "only-extended-resources",
        {"containers": [ctr({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "1"})]},
        "BestEffort",
    ),
    ("only-ephemeral-storage", {"containers": [ctr({"ephemeral-storage": "1Gi"})]}, "BestEffort"),
    ("zero-requests-ignored", {"containers": [ctr({"cpu": "0", "memory": "0"})]}, "BestEffort"),
    ("cpu-request-only", {"containers": [ctr({"cpu": "100m"})]}, "Burstable"),
    ("memory-limit-only", {"containers": [ctr(limits={"memory": "1Gi"})]}, "Burstable"),
    ("requests-equal-limits", {"containers": [ctr(CM, CM)]}, "Guaranteed"),
    (
        "requests-defaulted-from-limits",
        {"containers": [ctr({"cpu": "500m", "memory": "256Mi"}, {"cpu": "500m", "memory": "256Mi"})]},
        "Guaranteed",
    ),
    ("mixed-units-equal", {"containers": [ctr({"cpu": "1000m", "memory": "1024Mi"}, CM)]}, "Guaranteed"),
    (
        "exponent-units-equal",
        {"containers": [ctr({"cpu": "1", "memory": "1e9"}, {"cpu": "1", "memory": "1G"})]},
        "Guaranteed",
    ),
    ("requests-below-limits", {"containers": [ctr({"cpu": "500m", "memory": "1Gi"}, CM)]}, "Burstable"),
    ("cpu-limit-only-no-memory", {"containers": [ctr({"cpu": "1"}, {"cpu": "1"})]}, "Burstable"),
    (
        "extended-resource-ignored-for-guaranteed",
        {"containers": [ctr({**CM, "nvidia.com/gpu": "1"}, {**CM, "nvidia.com/gpu": "2"})]},
        "Guaranteed",
    ),
    ("two-guaranteed-containers", {"containers": [ctr(CM, CM), ctr(CM, CM)]}, "Guaranteed"),
    ("one-container-without-limits", {"containers": [ctr(CM, CM), ctr()]}, "Burstable"),
    (
        "init-and-app-guaranteed",
        {
            "containers": [ctr(CM, CM)],
            "initContainers": [ctr({"cpu": "2", "memory": "2Gi"}, {"cpu": "2", "memory": "2Gi"})],
        },
        "Guaranteed",
    ),
    ("init-container-without-limits", {"containers": [ctr(CM, CM)], "initContainers": [ctr()]}, "Burstable"),
    (
        "init-container-requests-counted",
        {"containers": [ctr()], "initContainers": [ctr({"cpu": "1"})]},
        "Burstable",
    ),
    ("malformed-quantity-ignored", {"containers": [ctr({"cpu": "lots"}, {"cpu": "lots"})]}, "BestEffort"),
    ("malformed-containers-type", {"containers": "nope"}, "BestEffort"),
    ("malformed-resources-type", {"containers": [{"resources": ["cpu"]}, "x"]}, "BestEffort"),
]


@pytest.mark.parametrize(("spec", "expected"), [c[1:] for c in QOS_CASES], ids=[c[0] for c in QOS_CASES])
def test_qos_class(spec: dict[str, Any], expected: str) -> None:
    assert qos_class(spec) == expected


def test_qos_class_limits_only_is_guaranteed() -> None:
    assert qos_class({"containers": [ctr(limits=CM)]}) == "Guaranteed"
