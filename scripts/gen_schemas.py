"""Generate JSON Schemas for the Azure ML YAML specs from azure-ai-ml's own marshmallow schemas.

The official azuremlschemas files cannot be fetched offline and no public copy is current, so the
repo owns its schemas: generated here from the SDK version pinned in pyproject.toml (the same
code `az ml` 2.x uses to load YAML), committed under mlops/schemas/ (they ship with the azml
tool), and mapped for editors in .vscode/settings.json. Re-run with `make schemas` after
bumping azure-ai-ml.

Fields the SDK accepts become properties (with its descriptions); unknown keys are rejected where
the SDK rejects them (and allowed where its schema includes or drops them); `null` is allowed
where the SDK allows it (an output declared by name only); marshmallow's lenient scalars
(``"2"`` for 2, ``"True"`` for true) are allowed. Fields whose type cannot be expressed become
``{}`` (anything), never a false rejection.
"""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path

from marshmallow import RAISE, Schema, fields

KINDS = {
    "commandJob": ("_schema.job.command_job", "CommandJobSchema"),
    "sweepJob": ("_schema._sweep.sweep_job", "SweepJobSchema"),
    "pipelineJob": ("_schema.pipeline.pipeline_job", "PipelineJobSchema"),
    "sparkJob": ("_schema.job.spark_job", "SparkJobSchema"),
    "commandComponent": ("_schema.component.command_component", "CommandComponentSchema"),
    "sparkComponent": ("_schema.component.spark_component", "SparkComponentSchema"),
    "environment": ("_schema.assets.environment", "EnvironmentSchema"),
    "amlCompute": ("_schema.compute.aml_compute", "AmlComputeSchema"),
    "data": ("_schema.assets.data", "DataSchema"),
    "model": ("_schema.assets.model", "ModelSchema"),
    "managedOnlineEndpoint": ("_schema._endpoint.online.online_endpoint",
                              "ManagedOnlineEndpointSchema"),
    "managedOnlineDeployment": ("_schema._deployment.online.online_deployment",
                                "ManagedOnlineDeploymentSchema"),
    "kubernetesOnlineDeployment": ("_schema._deployment.online.online_deployment",
                                   "KubernetesOnlineDeploymentSchema"),
    "batchEndpoint": ("_schema._endpoint.batch.batch_endpoint", "BatchEndpointSchema"),
    "modelBatchDeployment": ("_schema._deployment.batch.model_batch_deployment",
                             "ModelBatchDeploymentSchema"),
    # the flat layout (no type:, settings at the top), which azure-ai-ml still loads
    "batchDeployment": ("_schema._deployment.batch.batch_deployment", "BatchDeploymentSchema"),
}
CONTEXT = {"base_path": "."}
INT_STRING = {"type": "string", "pattern": r"^\s*-?[0-9]+\s*$"}
NUMBER_STRING = {"type": "string", "pattern": r"^\s*-?[0-9.]+([eE][-+]?[0-9]+)?\s*$"}
BOOL_STRING = {"type": "string", "enum": ["true", "True", "TRUE", "false", "False", "FALSE"]}


class Converter:
    def __init__(self) -> None:
        self.defs: dict[str, dict] = {}

    def schema_ref(self, schema: Schema) -> dict:
        cls = type(schema)
        name = f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}"
        if name not in self.defs:
            self.defs[name] = {}  # placeholder first: schemas nest recursively
            self.defs[name] = self.object_schema(schema)
        return {"$ref": f"#/$defs/{name}"}

    def object_schema(self, schema: Schema) -> dict:
        properties, required = {}, []
        for name, field in schema.fields.items():
            if field.dump_only:
                continue
            key = field.data_key or name
            properties[key] = self.field(field)
            if field.required:
                required.append(key)
        # unknown=INCLUDE/EXCLUDE (e.g. pipeline settings) means the SDK keeps or drops extra keys
        strict = getattr(schema, "unknown", RAISE) == RAISE
        result = {"type": "object", "properties": properties, "additionalProperties": not strict}
        if "$schema" not in properties:
            properties["$schema"] = {"type": "string"}
        if required:
            result["required"] = sorted(required)
        return result

    def field(self, field) -> dict:
        out = self._field(field)
        description = field.metadata.get("description") if field.metadata else None
        if description and "$ref" not in out:
            out = {**out, "description": description}
        if getattr(field, "allow_none", False) and out:  # `name:` with no body is allowed
            out = {"anyOf": [out, {"type": "null"}]}
        return out

    def _field(self, field) -> dict:  # noqa: C901 - one branch per marshmallow field kind
        from azure.ai.ml._schema.core import fields as aml

        if isinstance(field, aml.ExperimentalField):
            return self.field(field.experimental_field)
        if isinstance(field, aml.UnionField):
            options = [self.field(f) for f in field.union_fields]
            unique = [json.loads(s) for s in dict.fromkeys(json.dumps(o, sort_keys=True)
                                                            for o in options)]
            if any(option == {} for option in unique):
                return {}
            return unique[0] if len(unique) == 1 else {"anyOf": unique}
        if isinstance(field, aml.StringTransformedEnum):
            values = [str(v) for v in field.allowed_values]
            variants = dict.fromkeys(v for value in values
                                     for v in (value, value.lower(), value.upper()))
            return {"type": "string", "enum": list(variants)}
        if isinstance(field, fields.Nested):
            ref = self.schema_ref(field.schema)  # resolves "self", names and callables
            return {"type": "array", "items": ref} if field.many else ref
        if isinstance(field, fields.Boolean):
            return {"anyOf": [{"type": "boolean"}, BOOL_STRING]}
        if isinstance(field, fields.Integer):
            return {"anyOf": [{"type": "integer"}, INT_STRING]}
        if isinstance(field, fields.Number):
            return {"anyOf": [{"type": "number"}, NUMBER_STRING]}
        if isinstance(field, fields.List):
            return {"type": "array", "items": self.field(field.inner)}
        if isinstance(field, fields.Dict | fields.Mapping):
            values = self.field(field.value_field) if field.value_field else {}
            return {"type": "object", "additionalProperties": values}
        if isinstance(field, fields.Constant):
            return {"const": field.constant}
        if isinstance(field, aml.VersionField):
            return {"type": ["string", "number"]}
        if isinstance(field, fields.String | fields.Url | aml.ArmStr | aml.RegistryStr):
            return {"type": "string"}
        return {}


def generate(kind: str) -> dict:
    import azure.ai.ml

    module_name, class_name = KINDS[kind]
    module = importlib.import_module(f"azure.ai.ml.{module_name}")
    converter = Converter()
    root = converter.schema_ref(getattr(module, class_name)(context=CONTEXT))
    name = root["$ref"].rsplit("/", 1)[-1]
    body = converter.defs.pop(name)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://image-classifier.local/schemas/{kind}.schema.json",
        "title": f"Azure ML {kind} YAML (generated from azure-ai-ml {azure.ai.ml.__version__})",
        **body,
        "$defs": dict(sorted(converter.defs.items())),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="mlops/schemas",
                        help="folder for <kind>.schema.json files")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for kind in KINDS:
        path = out / f"{kind}.schema.json"
        path.write_text(json.dumps(generate(kind), indent=1, sort_keys=False) + "\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
