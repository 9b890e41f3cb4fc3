"""What a pipeline job runs: its own `jobs:`, or the pipeline component its `component:` names.

azure-ai-ml's PipelineJob takes `component:` (a pipeline component file, or an `azureml:`
name) as the alternative to `jobs:` (the two are mutually exclusive): the job's jobs are then
the component's, its inputs are the component's with the job's values over their defaults, and
its outputs are the component's with the job's over them (PipelineJob.__init__:
`_build_inputs_dict(inputs, input_definition_dict=component.inputs)` and
`{**component.outputs, **pipeline_outputs}`). A pipeline component deployment's job is such a
job (mlops/endpoints/pipeline_deployment.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlops.errors import LocalRunError
from mlops.runtime import AssetMap, load_component
from mlops.specs import SpecData

LITERALS = ("string", "integer", "number", "boolean")


@dataclass(frozen=True, kw_only=True)
class PipelineBody:
    """The nodes a pipeline job runs, where their relative paths start, and its ports."""

    jobs: SpecData
    base: Path  # the job spec's folder, or the component file's
    registry: str | None  # the registry the component came from (its names resolve there)
    inputs: SpecData
    outputs: SpecData


def pipeline_body(data: SpecData, path: Path, assets: AssetMap) -> PipelineBody:
    """The job's own jobs, or its component's with the job's inputs and outputs over them."""
    ref = data.get("component")
    if ref is None:
        return PipelineBody(jobs=data.get("jobs") or {}, base=path.parent, registry=None,
                            inputs=dict(data.get("inputs") or {}),
                            outputs=dict(data.get("outputs") or {}))
    where = f"{path}: component"
    definition, base, registry = load_component(ref, path.parent, assets, where)
    if str(definition.get("type") or "command") != "pipeline" or \
            not isinstance(definition.get("jobs"), dict):
        raise LocalRunError(f"{where}: {ref} is not a pipeline component (type: pipeline, with "
                            "jobs:): a pipeline job's component: names one")
    return PipelineBody(jobs=definition["jobs"], base=base, registry=registry,
                        inputs=merged_inputs(definition.get("inputs"), data.get("inputs")),
                        outputs=merged_outputs(definition.get("outputs"), data.get("outputs")))


def merged_inputs(declared, given) -> SpecData:
    """Each input the component declares: the job's value (typed as declared where the job
    gives a bare path or a mapping without a type), else the declared default; an optional
    input with neither is left out, as azure-ai-ml leaves out an input of no value."""
    declared, given = dict(declared or {}), dict(given or {})
    inputs: SpecData = {}
    for name in [*declared, *[g for g in given if g not in declared]]:
        decl = declared.get(name) if isinstance(declared.get(name), dict) else {}
        kind = decl.get("type")
        if name in given:
            value = given[name]
            if isinstance(value, dict) and kind and not value.get("type"):
                value = {**value, "type": kind}
            elif isinstance(value, str) and kind and kind not in LITERALS:
                value = {"type": kind, "path": value}
            inputs[name] = value
        elif decl.get("default") is not None:
            inputs[name] = decl["default"]
    return inputs


def merged_outputs(declared, given) -> SpecData:
    """The component's outputs with the job's over them (a job output that names no type keeps
    the one the component declares); an empty job output keeps the component's."""
    outputs = {name: dict(spec) if isinstance(spec, dict) else spec
               for name, spec in dict(declared or {}).items()}
    for name, spec in dict(given or {}).items():
        if not spec:
            continue
        decl = outputs.get(name) if isinstance(outputs.get(name), dict) else {}
        outputs[name] = {**({"type": decl["type"]} if decl.get("type") else {}), **spec} \
            if isinstance(spec, dict) else spec
    return outputs
