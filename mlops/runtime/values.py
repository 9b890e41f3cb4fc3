"""What a spec's inputs, outputs and command mean, in Azure's terms.

Inputs: a scalar is a literal (a string that looks like a path or URL stays a string, as Azure
keeps it); a mapping with a data `type` or a `path` is data, resolved to a local path (relative to
the spec, or through assets/local-paths.yml for references). Outputs: a name with no body is a
uri_folder. The command is rendered by plain textual substitution of `${{scope.name}}`, as Azure
does: values are inserted raw, never quoted, so a command that quotes its own references gets the
same argv here and on Azure. `$[[ ... ]]` segments are kept only when every input they name has
a value.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from mlops.errors import LocalRunError
from mlops.runtime.uris import AssetMap, is_remote
from mlops.specs import REF, SpecData
from mlops.workspace.records import asset_kind

OPTIONAL = re.compile(r"\$\[\[(.*?)\]\]", re.DOTALL)
DATA_TYPES = {"uri_file", "uri_folder", "mltable", "custom_model", "mlflow_model",
              "triton_model"}
FILE_TYPES = {"uri_file"}


@dataclass(kw_only=True)
class Value:
    """A resolved input: a literal's text, or the local source of a data input."""

    text: str | None = None
    path: Path | None = None
    type: str = "string"
    mode: str | None = None

    @property
    def is_data(self) -> bool:
        return self.path is not None


@dataclass(kw_only=True)
class OutputSpec:
    """A declared output; `target` is set when a pipeline binds it to another folder."""

    type: str = "uri_folder"
    filename: str | None = None
    target: Path | None = None
    mode: str | None = None  # direct: Azure hands over the URI and creates nothing there


def render_literal(value) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"  # as Azure ML passes booleans
    if isinstance(value, dict):  # a nested choice's pick: JSON, as Azure passes it
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def data_value(definition: SpecData, key: str, base: Path, assets: AssetMap) -> Value:
    kind = str(definition.get("type") or "uri_folder")
    path = definition.get("path")
    if path is None:
        return Value(type=kind, mode=definition.get("mode"))
    local = assets.local_path(path, key, base, kind=asset_kind(kind))
    uploaded_as_azure_uploads(str(path), local, kind, key)
    return Value(path=local, type=kind, mode=definition.get("mode"))


def uploaded_as_azure_uploads(declared: str, local: Path, kind: str, key: str) -> None:
    """What az ml job create checks of an input's local path as it uploads it
    (JobOperations._resolve_job_input): an absolute uri_folder path is a folder and an absolute
    uri_file path a file; a folder holds a file (upload_directory's EmptyDirectoryError). A
    reference (a URI, azureml:, a binding) is not uploaded, so not checked."""
    if is_remote(declared) or "${{" in declared or not local.exists():
        return
    if Path(declared.removeprefix("file:")).is_absolute():
        wrong = {"uri_folder": ("dir", not local.is_dir()),
                 "uri_file": ("file", not local.is_file())}.get(kind)
        if wrong and wrong[1]:
            raise LocalRunError(f"{key}: There is no {wrong[0]} on target path: {declared} (az ml "
                                f"job create refuses a {kind} input so): point it at a "
                                f"{'folder' if wrong[0] == 'dir' else 'file'}, or change its type")
    # (a walk that stops at the first file, not uploads.upload_files' listing: this runs at
    # every run's start, on data folders of any size)
    if local.is_dir() and not any(files for _, _, files in os.walk(local)):
        raise LocalRunError(f"{key}: Directory {local} is empty. path or local_path must be a "
                            "non-empty directory (az ml job create's upload refuses it): put the "
                            "input's files in it, or point it at the right folder")


def input_value(value, key: str, base: Path, assets: AssetMap) -> Value:
    """One job (or pipeline) input as written in the spec."""
    if isinstance(value, dict):
        kind = str(value.get("type") or "")
        if kind in DATA_TYPES or (not kind and "path" in value):
            return data_value(value, key, base, assets)
        literal = value.get("value", value.get("default"))
        return Value(text=None if literal is None else render_literal(literal),
                     type=kind or "string")
    return Value(text=None if value is None else render_literal(value))


def job_inputs(inputs: SpecData | None, base: Path, assets: AssetMap,
               prefix: str = "inputs") -> dict[str, Value]:
    return {name: input_value(value, f"{prefix}.{name}", base, assets)
            for name, value in (inputs or {}).items()}


def output_spec(value, assets: AssetMap | None = None) -> OutputSpec:
    """A declared output; one whose `path:` is a datastore URI (or any remote one) that the
    mapping file maps is written where it maps it, as Azure writes it to the datastore, so the
    next job reading that URI finds it."""
    if not isinstance(value, dict):
        return OutputSpec()
    kind = str(value.get("type") or "uri_folder")
    declared = str(value.get("path") or "")
    filename = None
    if kind in FILE_TYPES:
        filename = declared.rstrip("/").rsplit("/", 1)[-1] if declared else None
        filename = filename if filename and "${{" not in filename else None
    mode = str(value["mode"]).lower() if value.get("mode") else None
    target = assets.mapped_output(declared) if assets is not None and declared else None
    return OutputSpec(type=kind, filename=filename, target=target, mode=mode)


def job_outputs(outputs: SpecData | None,
                assets: AssetMap | None = None) -> dict[str, OutputSpec]:
    return {name: output_spec(value, assets) for name, value in (outputs or {}).items()}


def render_command(command: str, values: dict[str, dict[str, str | None]], where: str) -> str:
    """Substitute ${{scope.name}} raw; values = {"inputs": {...}, "outputs": {...}, ...}."""

    def lookup(ref: str):
        scope, _, name = ref.partition(".")
        return values.get(scope, {}).get(name)

    def optional(match: re.Match) -> str:
        refs = REF.findall(match.group(1))
        return match.group(1) if all(lookup(r) is not None for r in refs) else ""

    def substitute(match: re.Match) -> str:
        value = lookup(match.group(1))
        if value is None:
            raise LocalRunError(f"{where}: ${{{{{match.group(1)}}}}} has no value. Give the "
                                "input a value (or --set it), or wrap the flag in $[[ ]] if the "
                                "input is optional")
        return str(value)

    return REF.sub(substitute, OPTIONAL.sub(optional, command))


def fill_scope(command: str, scope: str, values: dict[str, str]) -> str:
    """Substitute the references of one scope (a trial's `${{search_space.x}}`), raw, leaving
    every other reference for render_command."""

    def substitute(match: re.Match) -> str:
        name = match.group(1)
        if name.startswith(f"{scope}.") and name[len(scope) + 1:] in values:
            return values[name[len(scope) + 1:]]
        return match.group(0)

    return REF.sub(substitute, command)
