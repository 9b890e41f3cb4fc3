"""Turn a job spec's inputs, outputs and command into what a local process needs.

Inputs: literals as Azure renders them, local paths relative to the spec, and `azureml:` assets
or `https://` URLs through the mapping file (assets/local-paths.yml). Overrides use
`az ml job create --set` syntax. `$[[ ... ]]` segments are kept only when every input they name
has a value, as Azure does with optional inputs.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from .specs import REF, ROOT

ASSET_MAP = ROOT / "assets" / "local-paths.yml"
OPTIONAL = re.compile(r"\$\[\[(.*?)\]\]", re.DOTALL)
DATA_TYPES = {"uri_file", "uri_folder", "mltable", "custom_model", "mlflow_model",
              "triton_model"}


class LocalRunError(Exception):
    """A spec cannot run locally; the message names the spec, the key and the fix."""


def apply_overrides(data: dict, sets: list[str], spec: Path) -> dict:
    """`inputs.epochs=1 inputs.data.path=/x` as `az ml job create --set` takes them."""
    for item in sets:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise LocalRunError(f"{spec}: --set {item!r} is not key=value "
                                "(example: --set inputs.epochs=1)")
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {} if node.get(part) is None else {"value": node[part]}
            node = node[part]
        node[parts[-1]] = yaml.safe_load(raw) if raw else ""
    return data


def apply_removals(data: dict, keys: list[str], spec: Path) -> dict:
    """`--remove early_termination`, as az's generic update arguments take it."""
    for key in keys:
        node, parts = data, key.split(".")
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or parts[-1] not in node:
            raise LocalRunError(f"{spec}: --remove {key}: no such key in the spec")
        del node[parts[-1]]
    return data


def load_asset_map(path: Path = ASSET_MAP) -> dict[str, str]:
    if not path.is_file():
        return {}
    return {str(k): str(v) for k, v in (yaml.safe_load(path.read_text()) or {}).items()}


def asset_key(reference: str) -> str:
    """azureml:name@latest, azureml:name:3 and azureml:name@3 all map by name."""
    name = reference.removeprefix("azureml:")
    return "azureml:" + re.split(r"[@:]", name, maxsplit=1)[0]


def resolve_path(reference: str, key: str, spec: Path, asset_map: dict, map_file: Path) -> str:
    if reference.startswith(("azureml:", "http://", "https://")):
        local = asset_map.get(reference) or asset_map.get(asset_key(reference))
        if local is None:
            raise LocalRunError(
                f"{spec}: {key}: {reference} has no local stand-in. Add a line "
                f"'{asset_key(reference) if reference.startswith('azureml:') else reference}: "
                f"<local path>' to {map_file}, or override it: --set {key}.path=<local path>")
        path = (ROOT / local).resolve()
    else:
        path = (spec.parent / reference.removeprefix("file:")).resolve()
    if not path.exists():
        raise LocalRunError(f"{spec}: {key}: local path {path} does not exist. Create it (the "
                            "synthetic default: make data-synthetic) or point the input elsewhere")
    return str(path)


def render_literal(value) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"  # as Azure ML passes booleans
    return str(value)


def resolve_inputs(inputs: dict, spec: Path, asset_map: dict, map_file: Path) -> dict:
    resolved: dict[str, str | None] = {}
    for name, value in (inputs or {}).items():
        key = f"inputs.{name}"
        if isinstance(value, dict) and (value.get("type") in DATA_TYPES or "path" in value):
            path = value.get("path")
            resolved[name] = resolve_path(str(path), key, spec, asset_map, map_file) if path \
                else None
        elif isinstance(value, dict):
            resolved[name] = None if value.get("value") is None else render_literal(value["value"])
        else:
            resolved[name] = None if value is None else render_literal(value)
    return resolved


def render_command(command: str, values: dict[str, dict], spec: Path, key: str) -> str:
    """Substitute ${{scope.name}}; values = {"inputs": {...}, "outputs": {...}, ...}."""

    def lookup(ref: str):
        scope, _, name = ref.partition(".")
        return values.get(scope, {}).get(name)

    def optional(match: re.Match) -> str:
        refs = REF.findall(match.group(1))
        return match.group(1) if all(lookup(r) is not None for r in refs) else ""

    def substitute(match: re.Match) -> str:
        value = lookup(match.group(1))
        if value is None:
            raise LocalRunError(f"{spec}: {key}: ${{{{{match.group(1)}}}}} has no value. Give "
                                "the input a value (or --set it), or wrap the flag in $[[ ]] "
                                "if the input is optional")
        return shlex.quote(str(value))

    return REF.sub(substitute, OPTIONAL.sub(optional, command))
