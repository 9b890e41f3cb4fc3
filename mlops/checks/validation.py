"""Validate Azure ML specs offline, in three layers, before anything is uploaded.

1. JSON Schema (mlops/schemas/*.schema.json, generated from the pinned azure-ai-ml);
2. the real azure-ai-ml loaders, plus the deeper checks a plain load skips;
3. the repo lint (mlops.checks.lint, mlops.checks.lint_assets): references, flags, paths, sweep
   sanity.
Each problem prints as `file:line: key: problem. Fix: ...`. Errors are what Azure would refuse
(the exit code is then 1); warnings (`file:line: warning: ...`) are what Azure accepts but is
probably a mistake: they never block a run.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import os
import sys
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, NamedTuple

from mlops.checks import io_names, lint, lint_assets, resource_specs, sdk_findings, verdicts
from mlops.project import project
from mlops.specs import SCHEMA_DIR, SCHEMA_KINDS, Finding, Spec, SpecError, load_spec

if TYPE_CHECKING:  # jsonschema is imported where a schema is checked (a kept verdict checks none)
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError

KINDS = ("commandJob", "sweepJob", "pipelineJob", "sparkJob", "commandComponent",
         "sparkComponent", "environment",
         "amlCompute", "data", "model", "managedOnlineEndpoint", "managedOnlineDeployment",
         "kubernetesOnlineDeployment", "batchEndpoint", "modelBatchDeployment", "batchDeployment")
MAX_MESSAGE = 300  # characters of one schema finding
KNOWN = sorted({*KINDS, *SCHEMA_KINDS.values()}, key=str.lower)  # what a $schema may name



@cache
def _validator(kind: str) -> Draft202012Validator:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(json.loads((SCHEMA_DIR / f"{kind}.schema.json").read_text()))


def _most_specific(error: ValidationError) -> ValidationError:
    """Under anyOf, follow the branch that failed least: it is the one the author meant."""
    while error.context:
        branches: dict[int, list[ValidationError]] = {}
        for sub in error.context:
            branches.setdefault(sub.schema_path[0], []).append(sub)
        best = min(branches.values(), key=lambda errs: (len(errs), -max(len(e.path)
                                                                          for e in errs)))
        error = max(best, key=lambda e: len(e.path))
    return error


# azure-ai-ml loads if_else, do_while and parallel_for nodes from YAML only with this set
# (is_private_preview_enabled, read when its pipeline schema is first imported), as az ml does
PRIVATE_PREVIEW = "AZURE_ML_CLI_PRIVATE_FEATURES_ENABLED"

# kinds azure-ai-ml's loader alone checks: an AutoML job has one schema per task there
# Kinds with no published JSON schema vendored here: azure-ai-ml's loader alone checks them
SDK_ONLY = ("autoMLJob", "pipelineComponent", "parallelComponent", "kubernetesOnlineEndpoint",
            "pipelineComponentBatchDeployment")


def schema_layer(spec: Spec) -> list[Finding]:
    if spec.kind in SDK_ONLY:
        return []
    if spec.kind not in KINDS:
        what = (f"unknown $schema '{spec.data['$schema']}'" if spec.data.get("$schema")
                else "no $schema line")
        return [spec.finding("$schema", what,
                             f"start the file with $schema: https://azuremlschemas.azureedge.net/"
                             f"latest/<kind>.schema.json, kind one of {', '.join(KNOWN)}")]
    found = []
    for error in _validator(spec.kind).iter_errors(spec.data):
        specific = _most_specific(error)
        path = [str(p) for p in specific.absolute_path]
        message = specific.message
        if specific.validator == "additionalProperties":
            message = message.replace("Additional properties are not allowed", "unknown field")
            extra = [k for k in specific.instance if k not in specific.schema.get("properties", {})]
            path += extra[:1]  # point at the offending key's line
        key = ".".join(path)
        if len(message) > MAX_MESSAGE:  # jsonschema quotes the whole value: a list of 100,000
            message = message[:MAX_MESSAGE - 20] + " ... (cut short)"
        found.append(spec.finding(key, f"schema: {message}", "see the field list in https://"
                                  f"azuremlschemas.azureedge.net/latest/{spec.kind}.schema.json"
                                  " (an editor autocompletes it from the $schema line)"))
    return found


ENTITIES = {"commandJob": "Job", "sweepJob": "Job", "pipelineJob": "Job", "sparkJob": "Job",
            "autoMLJob": "Job",
            "commandComponent": "Component", "sparkComponent": "Component",
            "environment": "Environment", "amlCompute": "Compute", "data": "Data", "model": "Model",
            "managedOnlineEndpoint": "OnlineEndpoint",
            "managedOnlineDeployment": "OnlineDeployment",
            "kubernetesOnlineDeployment": "OnlineDeployment", "batchEndpoint": "BatchEndpoint",
            "modelBatchDeployment": "ModelBatchDeployment", "batchDeployment": "BatchDeployment",
            "pipelineComponent": "Component", "parallelComponent": "Component",
            "kubernetesOnlineEndpoint": "OnlineEndpoint",
            "pipelineComponentBatchDeployment": "PipelineComponentBatchDeployment"}


def _entity_class(kind: str):
    from azure.ai.ml import entities
    from azure.ai.ml._utils import _experimental

    logging.getLogger("azure.ai.ml").setLevel(logging.ERROR)  # after import: it sets its own
    _experimental._should_skip_warning = _called_from_rest
    return getattr(entities, ENTITIES[kind])


def _called_from_rest() -> bool:
    """azure-ai-ml's test of whether an experimental class is built from a REST object (then it
    warns of nothing): a frame named _from_rest_object on the stack. Its own walks
    inspect.stack(), which reads the source of every frame (half a second of CPU per class in a
    deep stack) for the names alone; this walks the same frames by name."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_from_rest_object":
            return True
        frame = frame.f_back
    return False


def _diagnostics(result) -> list:
    """The validation result's diagnostics (yaml_path, local_path, message); its public
    error_messages ({yaml_path: message}) where a release lacks them."""
    found = getattr(result, "_errors", None)
    if found is not None:
        return list(found)
    return [SimpleNamespace(yaml_path=k, local_path=None, message=v)
            for k, v in result.error_messages.items()]


def sdk_layer(spec: Spec) -> list[Finding]:
    """azure-ai-ml's loader on the spec as it stands (after --set), then the validation
    `az ml job create` runs before submitting (what needs the workspace is skipped); each
    finding at the line of the key the SDK names."""
    from azure.ai.ml.entities._validation import PathAwareSchemaValidatableMixin
    from marshmallow import ValidationError as LoaderError

    try:
        entity = _entity_class(spec.kind)._load(data=copy.deepcopy(spec.data),
                                                yaml_path=spec.path)
        job = entity._to_job() if hasattr(entity, "_to_job") else None  # a job loads as a node
        if isinstance(job, PathAwareSchemaValidatableMixin):
            entity = job  # validate it as a job
        if isinstance(entity, PathAwareSchemaValidatableMixin):
            result = entity._validate()
            found = [d for d in _diagnostics(result)
                     if not sdk_findings.needs_workspace(spec, str(d.message))]
            if found:
                return sdk_findings.from_diagnostics(spec, found)
        if job is not None and job is not entity:
            job._validate()  # a Spark job's own rules (input and output modes): they raise
        return io_names.refused(spec)  # what its REST body refuses, after _validate
    except LoaderError as err:
        return [_control_flow_hint(f) for f in sdk_findings.from_loader(spec, err.messages)]
    except Exception as err:  # noqa: BLE001 - the SDK raises many types; all mean "invalid"
        if sdk_findings.needs_workspace(spec, str(err)):
            return []  # the rest of its checks need the registered component too
        return sdk_findings.from_other(spec, err)
    return []


@cache
def _parsed(path: Path, stamp: tuple[int, int]) -> Spec | None:
    """One version (mtime, size) of a spec file, parsed once; None if it is broken."""
    try:
        return load_spec(path)
    except SpecError:
        return None


def _loadable(folder: str) -> list[Spec]:
    """Specs other specs refer to; a broken one is reported when it is validated itself. Each
    file is parsed again only when it changes: every command of a pipeline or sweep asks, and
    assets/ holds the 150 kB curated-environment catalogue (half a second of CPU a parse)."""
    stamped = [(path, path.stat()) for path in sorted((project().root / folder).glob("*.yml"))]
    specs = [_parsed(path, (stat.st_mtime_ns, stat.st_size)) for path, stat in stamped]
    return [spec for spec in specs if spec is not None]


def _compute_sizes() -> dict[str, str]:
    return {s.data["name"]: s.data.get("size", "") for s in _loadable("assets")
            if s.data.get("type") == "amlcompute" and s.data.get("name")}


def _endpoint_names(kind: str = "managedOnlineEndpoint") -> set[str]:
    return {s.data.get("name") for folder in ("endpoints", "endpoints/batch")
            for s in _loadable(folder) if s.kind == kind}


def lint_layer(spec: Spec, flags: bool = True) -> list[Finding]:
    """flags=False skips importing entry points to check their flags (a local run shows a wrong
    flag itself, at once, as Azure would)."""
    data, kind = spec.data, spec.kind
    if kind in ("commandJob", "commandComponent"):
        return (lint.check_code(spec, "code", data.get("code"))
                + lint.check_command(spec, "command", command=str(data.get("command", "")),
                                     declared=lint.Declared(data.get("inputs") or {},
                                                            data.get("outputs") or {}),
                                     flags=flags)
                + lint.check_resources(spec, data, _compute_sizes()))
    if kind == "sweepJob":
        trial = data.get("trial") or {}
        return (lint.check_code(spec, "trial.code", trial.get("code"))
                + lint.check_command(spec, "trial.command", command=str(trial.get("command", "")),
                                     declared=lint.Declared(data.get("inputs") or {},
                                                            data.get("outputs") or {},
                                                            data.get("search_space") or {}),
                                     flags=flags)
                + lint.check_search_space(spec) + lint.check_sweep_policy(spec)
                + lint.check_resources(spec, {**trial, "compute": data.get("compute")},
                                       _compute_sizes()))
    checks = {"pipelineJob": lint_assets.check_pipeline,
              "environment": lint_assets.check_environment, "data": lint_assets.check_data,
              "amlCompute": lint_assets.check_compute,
              "managedOnlineEndpoint": lint_assets.check_endpoint,
              "managedOnlineDeployment": lambda s: lint_assets.check_deployment(
                  s, _endpoint_names()),
              "kubernetesOnlineDeployment": lambda s: lint_assets.check_deployment(s, set()),
              "batchEndpoint": lint_assets.check_endpoint,
              "modelBatchDeployment": lambda s: lint_assets.check_batch_deployment(
                  s, _endpoint_names("batchEndpoint")),
              "batchDeployment": lambda s: lint_assets.check_batch_deployment(
                  s, _endpoint_names("batchEndpoint"))}
    return checks[kind](spec) if kind in checks else []


DEPLOYMENTS = {"managedOnlineDeployment", "kubernetesOnlineDeployment", "modelBatchDeployment",
               "batchDeployment"}
PLACEHOLDER_ENDPOINT = "local-endpoint"


class Probe(NamedTuple):
    spec: Spec  # what the layers check
    notes: list[Finding]  # what was stood in for it, as warnings


def with_endpoint(spec: Spec) -> Probe:
    """A deployment without `endpoint_name` is valid as a file: `az ml ... create
    --endpoint-name` supplies it. It is checked with a stand-in name, and a warning says so."""
    if spec.kind not in DEPLOYMENTS or spec.data.get("endpoint_name"):
        return Probe(spec, [])
    probe = Spec(path=spec.path, data={**spec.data, "endpoint_name": PLACEHOLDER_ENDPOINT},
                 lines=spec.lines, role=spec.role)
    return Probe(probe, [spec.warning("endpoint_name", "no endpoint_name: az ml takes it from "
                                "--endpoint-name (checked here as a stand-in)",
                                "pass --endpoint-name to az ml, or name the endpoint here")])


def check(spec: Spec, for_run: bool = False) -> list[Finding]:
    """All three layers on one loaded spec (the lint assumes the structure the schema checks).
    for_run: what a local run needs before it starts; the verdict of a spec that passed is
    kept until something it was checked against changes (verdicts.py)."""
    if for_run:
        return verdicts.checked(spec, _check_for_run)
    return _check(spec, for_run)


def _check_for_run(spec: Spec) -> list[Finding]:
    return _check(spec, True)


def _check(spec: Spec, for_run: bool) -> list[Finding]:
    spec, notes = with_endpoint(spec)
    found = duplicate_keys(spec) + _layers(spec, for_run)
    if notes:  # the stand-in name is not the author's: no finding about it
        found = [f for f in found if f.key != "endpoint_name"]
    return notes + found


def duplicate_keys(spec: Spec) -> list[Finding]:
    """A key given twice: YAML loaders, azure-ai-ml's included, keep the second silently."""
    return [Finding(path=spec.path, key=".".join(d.key),
                    problem=f"given twice (lines {d.first} and {d.second}); "
                    "azure-ai-ml reads the second and drops the first", fix="keep one of them",
                    line=d.second, severity="warning") for d in spec.duplicates]


def _layers(spec: Spec, for_run: bool) -> list[Finding]:
    if spec.kind in resource_specs.LOADERS:
        return resource_specs.loader_layer(spec)
    schema = schema_layer(spec)
    if spec.kind not in KINDS + SDK_ONLY:
        return schema
    sdk = sdk_layer(spec)
    # The generated schemas can be stricter than azure-ai-ml itself (a pipeline sweep node with
    # name: and display_name:, a Spark node's `Standard_E8S_V3` in other casing): what the
    # loader and its validation accept, Azure accepts, so the loader decides, about each key
    schema = [f for f in schema if any(_related(f.key, s.key) for s in sdk)]
    found = schema + sdk
    return found if schema else found + lint_layer(spec, flags=not for_run)


def _related(key: str, other: str) -> bool:
    """One key is the other or holds it (`jobs.s` and `jobs.s.resources`)."""
    return key == other or key.startswith(other + ".") or other.startswith(key + ".")


def _control_flow_hint(finding: Finding) -> Finding:
    """azure-ai-ml's refusal of a control-flow node type, with the setting that loads it."""
    named = [k for k in ("if_else", "do_while", "parallel_for") if f"'{k}' passed" in
             finding.problem]
    if not named or os.environ.get(PRIVATE_PREVIEW, "").lower() == "true":
        return finding
    return dataclasses.replace(
        finding, fix=f"az ml (azure-ai-ml) loads {named[0]} nodes from YAML only with "
                     f"{PRIVATE_PREVIEW}=true in the environment: set it for az ml and here alike")


def validate(paths: list[Path]) -> list[Finding]:
    found: list[Finding] = []
    for path in paths:
        try:
            found += check(load_spec(path))
        except SpecError as err:
            found.append(err.finding)
    return found
