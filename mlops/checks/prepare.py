"""Resolve a job spec as `az ml job create` would before submitting it: load it, apply --set and
--remove as the CLI does, run Azure's checks, resolve the workspace names it makes as Azure does
at submission (references.py); what Azure would only warn about is printed."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from mlops.checks.overrides import apply_removals, apply_sets, parse_sets
from mlops.checks.references import check_references
from mlops.checks.validation import check
from mlops.errors import LocalRunError
from mlops.runtime import AssetMap, Job, experiment_name, is_remote, job_inputs
from mlops.specs import JOB_TYPES, Spec, an, load_spec

RUNS_HERE = {"commandJob", "sweepJob", "pipelineJob", "sparkJob", "autoMLJob"}
# Why a job azure-ai-ml loads does not run on this machine
NOT_HERE = {
    "importJob": "an import job (type: import) copies from an external database or file "
                 "store through Azure's data import service, which this machine lacks; run it "
                 "on Azure and map its output in assets/local-paths.yml",
    "fineTuningJob": "a fine-tuning job (type: finetuning) trains a model of Azure's model "
                     "catalog on Azure's serverless compute; run it on Azure",
    "distillationJob": "a distillation job (type: distillation) runs a catalog teacher "
                       "model on Azure's serverless endpoints; run it on Azure",
}
# What runs a spec that is not a job, by the kind its $schema names
INSTEAD = {"Component": "a component runs as a node of a pipeline job (make local JOB=<a "
                        "pipeline job that uses it>)",
           "OnlineDeployment": "make serve-local DEPLOYMENT=<this file>",
           "BatchDeployment": "make batch-local BATCH_DEPLOYMENT=<this file> INPUT=<folder>"}


def prepare_job(spec_path: str | Path, sets: list[str], removes: list[str],
                assets: AssetMap, *, env_file: Path | None = None) -> Job:
    """The job, or a LocalRunError naming what Azure would refuse: its spec (Azure's checks),
    then every workspace name it makes that nothing here knows (references.py; `env_file`:
    the environment map the run uses, else the repository's)."""
    spec = load_spec(spec_path, role="job")
    apply_removals(apply_sets(spec.data, parse_sets(sets, spec.path), spec.path), removes,
                   spec.path)
    if reason := not_runnable(spec):
        raise LocalRunError(f"{spec_path}: {reason}")
    findings = check(spec, for_run=True)
    for finding in findings:
        if not finding.is_error:
            print(finding, file=sys.stderr)
    errors = [str(f) for f in findings if f.is_error]
    if errors:
        raise LocalRunError("\n".join(errors) + "\nAzure would refuse this spec: fix it first"
                            + what_it_is(spec))
    check_references(spec, assets, env_file)
    experiment_name(spec.data)  # the service refuses a name it does not take at submission
    local_inputs(spec, assets)
    if spec.kind == "autoMLJob":  # what cannot run here is refused before work
        from mlops.automl.translate import automl_command

        built = automl_command(spec.data, str(spec_path), assets)
        if built.definition.get("type") == "sweep":  # an image task: the sweep is the job
            for note in built.notes:
                print(note, file=sys.stderr)
            spec = dataclasses.replace(spec, data=built.definition)
    return Job(spec, assets)


def local_inputs(spec: Spec, assets: AssetMap) -> None:
    """The job's inputs with a local path, as az ml job create uploads them before the job
    exists (values.uploaded_as_azure_uploads); a reference is resolved by the run, as Azure
    passes it on unresolved (check_references has checked what it must)."""
    inputs = spec.data.get("inputs")
    local = {name: value for name, value in (inputs if isinstance(inputs, dict) else {}).items()
             if isinstance(value, dict) and isinstance(value.get("path"), str)
             and not is_remote(value["path"]) and "${{" not in value["path"]}
    job_inputs(local, spec.path.parent, assets, prefix=f"{spec.path}: inputs")


def not_runnable(spec: Spec) -> str:
    """Why a spec given as a job does not run here ("" when it does), by what azure-ai-ml
    loads it as: its type: (its $schema does not count)."""
    if not spec.kind:
        type_ = spec.data.get("type")
        return (f"type: {type_!r} is not a job type (azure-ai-ml: 'Unsupported job type: "
                f"{type_}.'); a job's type is one of {', '.join(JOB_TYPES)}")
    return NOT_HERE.get(spec.kind, "") if spec.kind not in RUNS_HERE else ""


def what_it_is(spec: Spec) -> str:
    """For a spec az ml job create refuses whose $schema names another kind (a component, a
    deployment): what it is and what runs it ("" otherwise)."""
    declared = spec.declared
    if not declared or declared in JOB_TYPES.values():
        return ""
    instead = next((how for suffix, how in INSTEAD.items() if declared.endswith(suffix)), "")
    return (f"\nits $schema names {an(declared)}, not a job: az ml job create loads a file as "
            f"a job of its type: ({spec.data.get('type', 'command')}) and refuses what "
            f"{an(declared)} declares" + (f"; {instead}" if instead else ""))
