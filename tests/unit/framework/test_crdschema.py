"""framework/crdschema: the base of the CRD models and the envelope every kind's
``openAPIV3Schema`` shares (both wings' CRDs are generated through them)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import Field, ValidationError

from ipscheduler.framework.crdschema import CrdModel, object_schema, spec_and_status


class Spec(CrdModel, frozen=True):
    """A spec."""

    min_size: int = Field(1, alias="minSize", description="The least.")


class Status(CrdModel):
    """A status."""

    seen: int | None = Field(None, description="How many were seen.")


@pytest.mark.parametrize(
    ("body", "min_size"),
    [({"minSize": 3}, 3), ({"min_size": 4}, 4), ({"minSize": 2, "unknown": True}, 2)],
    ids=["wire-name", "python-name", "unknown-field-ignored"],
)
def test_crd_models_parse_wire_and_python_names_and_ignore_the_rest(
    body: dict[str, Any], min_size: int
) -> None:
    assert Spec.model_validate(body).min_size == min_size


def test_a_subclass_adds_to_the_config() -> None:
    spec = Spec(minSize=2)
    with pytest.raises(ValidationError):
        spec.min_size = 3  # type: ignore[misc]
    assert Spec.model_config["extra"] == "ignore" and Status.model_config.get("frozen") is None


@pytest.mark.parametrize(
    ("required", "expected"),
    [((), None), (["spec"], ["spec"])],
    ids=["nothing-required", "spec-required"],
)
def test_object_schema_is_the_envelope_of_spec_and_status(
    required: list[str], expected: list[str] | None
) -> None:
    spec, status = spec_and_status(Spec, Status)
    schema = object_schema(
        api_version="example.io/v1",
        kind="Thing",
        description="A thing.",
        spec=spec,
        status=status,
        required=required,
    )
    assert schema.get("required") == expected
    assert list(schema["properties"]) == ["apiVersion", "kind", "metadata", "spec", "status"]
    assert schema["properties"]["metadata"] == {"type": "object"}
    assert (
        schema["properties"]["apiVersion"]["description"]
        == "The versioned schema of this object: example.io/v1."
    )
    assert schema["properties"]["spec"]["properties"]["minSize"] == {
        "description": "The least.",
        "type": "integer",
    }
    assert schema["properties"]["status"]["properties"]["seen"]["nullable"] is True
