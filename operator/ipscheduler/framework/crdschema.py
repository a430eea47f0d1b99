"""CRD schemas from pydantic models: a model's JSON schema as a Kubernetes structural
schema (``apiextensions.k8s.io/v1``), so each CRD in ``crds/`` is generated from the
models that parse its objects (NodeIPPool, PodGroup): :class:`CrdModel` is the base of those
models, :func:`object_schema` the envelope (``apiVersion``, ``kind``, ``metadata``, ``spec``,
``status``) every kind's ``openAPIV3Schema`` shares."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict


class CrdModel(BaseModel):
    """Base of the pydantic models a custom resource is parsed with and its CRD generated
    from: wire names are the fields' aliases (camelCase), Python names are accepted too, and
    fields the model does not know are ignored (as the API server prunes them). A subclass
    adds to the config (``frozen=True``, ``json_schema_extra``) without repeating it."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")


def spec_and_status(spec: type[BaseModel], status: type[BaseModel]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The structural schemas (:func:`structural_schema`) of a kind's ``spec`` and ``status``
    models, by alias, their ``$defs`` shared."""
    spec_json = spec.model_json_schema(by_alias=True)
    status_json = status.model_json_schema(by_alias=True)
    defs = {**spec_json.pop("$defs", {}), **status_json.pop("$defs", {})}
    return structural_schema(spec_json, defs), structural_schema(status_json, defs)


def object_schema(
    api_version: str,
    kind: str,
    description: str,
    spec: dict[str, Any],
    status: dict[str, Any],
    required: Sequence[str] = (),
) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of a kind (``api_version`` ``<group>/<version>``): an object
    described by ``description``, its ``apiVersion`` and ``kind`` strings, ``metadata`` a
    bare object (the API server forbids anything more there), and the ``spec`` and
    ``status`` schemas given; ``required`` the top-level fields that must be set."""
    out: dict[str, Any] = {"type": "object", "description": description}
    if required:
        out["required"] = list(required)
    out["properties"] = {
        "apiVersion": {
            "type": "string",
            "description": f"The versioned schema of this object: {api_version}.",
        },
        "kind": {"type": "string", "description": f"The object's type: {kind}."},
        "metadata": {"type": "object"},
        "spec": spec,
        "status": status,
    }
    return out


def structural_schema(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Turn a pydantic JSON schema node into a Kubernetes structural schema node (the
    ``openAPIV3Schema`` of a CustomResourceDefinition version; ``defs``: the schema's ``$defs``).

    Inlines ``$ref``, maps ``X | None`` to ``nullable: true``, drops titles
    and defaults, and ``const``/``enum`` stay enums.
    """
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        merged = {**defs[name], **{k: v for k, v in schema.items() if k != "$ref"}}
        return structural_schema(merged, defs)
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express anyOf {schema['anyOf']!r} structurally")
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        node = structural_schema({**options[0], **rest}, defs)
        if len(options) != len(schema["anyOf"]):
            node["nullable"] = True
        return node
    out: dict[str, Any] = {}
    for key in (
        "description",
        "type",
        "format",
        "pattern",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "maxItems",
        "enum",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-validations",
    ):
        if key in schema:
            out[key] = schema[key]
    if "const" in schema:
        out["enum"] = [schema["const"]]
    if schema.get("type") == "object":
        if "properties" in schema:
            out["properties"] = {k: structural_schema(v, defs) for k, v in schema["properties"].items()}
            if schema.get("required"):
                out["required"] = sorted(schema["required"])
        if isinstance(schema.get("additionalProperties"), dict):
            out["additionalProperties"] = structural_schema(schema["additionalProperties"], defs)
    if schema.get("type") == "array" and "items" in schema:
        out["items"] = structural_schema(schema["items"], defs)
    return out


AGE_COLUMN: dict[str, Any] = {
    "name": "Age",
    "type": "date",
    "jsonPath": ".metadata.creationTimestamp",
    "description": "Time since the object was created (metadata.creationTimestamp).",
}
"""The Age column kubectl shows for every kind, with its description."""


def printer_columns(columns: list[dict[str, Any]], schema: dict[str, Any]) -> list[dict[str, Any]]:
    """``columns`` (``additionalPrinterColumns`` entries) each with a ``description``: its own,
    else the ``description`` of the field its ``jsonPath`` names in ``schema`` (the
    ``openAPIV3Schema``, so the models' field descriptions), for a plain path such as
    ``.status.free``. Raises ValueError naming a column that has neither (a filter such as
    ``.status.conditions[?(@.type=="Ready")]`` needs its own)."""
    out = []
    for column in columns:
        description = column.get("description")
        path = column["jsonPath"]
        if not description and "[" not in path:
            node: dict[str, Any] | None = schema
            for part in path.strip(".").split("."):
                node = (node or {}).get("properties", {}).get(part)
            description = (node or {}).get("description")
        if not description:
            raise ValueError(
                f"printer column {column['name']} ({path}): no description, and none in the schema"
            )
        out.append({**column, "description": description})
    return out


def crd_manifest(
    *,
    group: str,
    version: str,
    kind: str,
    plural: str,
    singular: str,
    short_names: list[str],
    scope: str,
    columns: list[dict[str, Any]],
    schema: dict[str, Any],
    categories: list[str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A CustomResourceDefinition (``apiextensions.k8s.io/v1``) of one served and stored
    version with a status subresource: ``scope`` is ``Cluster`` or ``Namespaced``,
    ``columns`` its ``additionalPrinterColumns`` (each given a description by
    :func:`printer_columns`: ValueError if one has none), ``schema`` its ``openAPIV3Schema``."""
    metadata: dict[str, Any] = {"name": f"{plural}.{group}"}
    if annotations:
        metadata["annotations"] = annotations
    names: dict[str, Any] = {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": singular,
        "shortNames": short_names,
    }
    if categories:
        names["categories"] = categories
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": group,
            "scope": scope,
            "names": names,
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": printer_columns(columns, schema),
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def crd_yaml(manifest: dict[str, Any], module: str, command: str) -> str:
    """``manifest`` as the YAML committed under ``crds/``, headed by a line naming the
    source file of ``module`` (a dotted name under ``operator/``, e.g. ``__name__``) and
    the ``command`` that generates it."""
    import yaml

    source = f"operator/{module.replace('.', '/')}.py"
    header = f"# Generated from {source} by `{command}`. Do not edit.\n"
    return header + yaml.safe_dump(manifest, sort_keys=False, width=100)
