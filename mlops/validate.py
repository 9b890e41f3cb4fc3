"""Validate Azure ML specs offline, in three layers, before anything is uploaded.

    python -m mlops.validate [spec.yml ...]     (no arguments: every spec of the repo)

1. JSON Schema (schemas/*.schema.json, generated from the pinned azure-ai-ml);
2. the real azure-ai-ml loaders, plus the deeper checks a plain load skips;
3. the repo lint (mlops.lint, mlops.lint_assets): references, flags, paths, sweep sanity.
Each problem prints as `file:line: key: problem. Fix: ...`; the exit code is 1 if any.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from functools import cache
from pathlib import Path

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from . import lint, lint_assets
from .specs import ROOT, SCHEMA_DIR, Finding, Spec, SpecError, discover, load_spec

KINDS = ("commandJob", "sweepJob", "pipelineJob", "commandComponent", "environment",
         "amlCompute", "data", "model", "managedOnlineEndpoint", "managedOnlineDeployment")


@cache
def _validator(kind: str) -> Draft202012Validator:
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


def schema_layer(spec: Spec) -> list[Finding]:
    if spec.kind not in KINDS:
        what = (f"unknown $schema '{spec.data['$schema']}'" if spec.data.get("$schema")
                else "no $schema line")
        return [spec.finding("$schema", what,
                             f"start the file with $schema: https://azuremlschemas.azureedge.net/"
                             f"latest/<kind>.schema.json, kind one of {', '.join(KINDS)}")]
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
        found.append(spec.finding(key, f"schema: {message}", "see the field list in "
                                  f"schemas/{spec.kind}.schema.json (editors autocomplete it)"))
    return found


def _loader(kind: str):
    from azure.ai import ml

    logging.getLogger("azure.ai.ml").setLevel(logging.ERROR)  # after import: it sets its own

    return {"commandJob": ml.load_job, "sweepJob": ml.load_job, "pipelineJob": ml.load_job,
            "commandComponent": ml.load_component, "environment": ml.load_environment,
            "amlCompute": ml.load_compute, "data": ml.load_data, "model": ml.load_model,
            "managedOnlineEndpoint": ml.load_online_endpoint,
            "managedOnlineDeployment": ml.load_online_deployment}[kind]


def _sdk_message(err: Exception) -> str:
    text = str(err)
    for _ in range(3):  # the SDK nests JSON-escaped JSON inside its messages
        text = text.replace('\\"', '"').replace("\\n", " ")
    inner = re.findall(r'"([^"]+)":\s*\[\s*"([^"]+)"', text)  # marshmallow's {field: [msg]}
    if inner:
        return "; ".join(f"{field}: {msg}" for field, msg in inner[:3])
    return " ".join(text.split())[:300]


def sdk_layer(spec: Spec) -> list[Finding]:
    """azure-ai-ml's loader, then the validation Azure runs at submission."""
    try:
        entity = _loader(spec.kind)(spec.path)
        if hasattr(entity, "_to_job"):  # a command job loads as a node; validate it as a job
            entity = entity._to_job()
        if hasattr(entity, "_validate"):
            result = entity._validate()
            if result is not None and hasattr(result, "passed") and not result.passed:
                raise ValueError(result.error_messages)
    except Exception as err:  # noqa: BLE001 - the SDK raises many types; all mean "invalid"
        return [Finding(spec.path, "", f"azure-ai-ml: {_sdk_message(err)}",
                        "fix the field the message names", 1)]
    return []


def _loadable(folder: str) -> list[Spec]:
    """Specs other specs refer to; a broken one is reported when it is validated itself."""
    specs = []
    for path in sorted((ROOT / folder).glob("*.yml")):
        try:
            specs.append(load_spec(path))
        except SpecError:
            continue
    return specs


def _compute_sizes() -> dict[str, str]:
    return {s.data["name"]: s.data.get("size", "") for s in _loadable("assets")
            if s.data.get("type") == "amlcompute" and s.data.get("name")}


def _endpoint_names() -> set[str]:
    return {s.data.get("name") for s in _loadable("endpoints")
            if s.kind == "managedOnlineEndpoint"}


def lint_layer(spec: Spec) -> list[Finding]:
    data, kind = spec.data, spec.kind
    if kind in ("commandJob", "commandComponent"):
        return (lint.check_code(spec, "code", data.get("code"))
                + lint.check_command(spec, "command", str(data.get("command", "")),
                                     data.get("inputs") or {}, data.get("outputs") or {})
                + lint.check_resources(spec, data, _compute_sizes()))
    if kind == "sweepJob":
        trial = data.get("trial") or {}
        return (lint.check_code(spec, "trial.code", trial.get("code"))
                + lint.check_command(spec, "trial.command", str(trial.get("command", "")),
                                     data.get("inputs") or {}, data.get("outputs") or {},
                                     data.get("search_space") or {})
                + lint.check_search_space(spec) + lint.check_sweep_policy(spec)
                + lint.check_resources(spec, {**trial, "compute": data.get("compute")},
                                       _compute_sizes()))
    checks = {"pipelineJob": lint_assets.check_pipeline,
              "environment": lint_assets.check_environment, "data": lint_assets.check_data,
              "amlCompute": lint_assets.check_compute,
              "managedOnlineEndpoint": lint_assets.check_endpoint,
              "managedOnlineDeployment": lambda s: lint_assets.check_deployment(
                  s, _endpoint_names())}
    return checks[kind](spec) if kind in checks else []


def validate(paths: list[Path]) -> list[Finding]:
    found: list[Finding] = []
    for path in paths:
        try:
            spec = load_spec(path)
        except SpecError as err:
            found.append(err.finding)
            continue
        schema = schema_layer(spec)
        found += schema
        if spec.kind in KINDS:
            found += sdk_layer(spec)
            if not schema:  # the lint assumes the structure the schema guarantees
                found += lint_layer(spec)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Validate Azure ML YAML specs offline.")
    parser.add_argument("specs", nargs="*", help="spec files (default: every spec of the repo)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    paths = [Path(p) for p in args.specs] or discover()
    findings = validate(paths)
    for finding in findings:
        print(finding)
    seconds = time.perf_counter() - started
    status = f"{len(findings)} problem(s)" if findings else "all valid"
    print(f"validated {len(paths)} spec(s) in {seconds:.1f}s: {status}", file=sys.stderr)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
