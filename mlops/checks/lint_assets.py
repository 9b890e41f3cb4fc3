"""Repo lint for pipelines and assets: wiring, files on disk, names Azure would refuse."""

from __future__ import annotations

import re
from typing import NamedTuple

from mlops.checks.lint import ENDPOINT_NAME, check_size
from mlops.environments.envfiles import dockerfile_in
from mlops.errors import LocalRunError
from mlops.runtime import AssetMap, is_remote
from mlops.specs import FLAT_BATCH_KEYS, REF, Finding, Spec, SpecData, SpecError, load_spec

RUNTIME_EXPRESSIONS = {"name", "output_name"}
PARENT_REF = re.compile(r"^parent\.(inputs|outputs)\.(\w+)$|^parent\.jobs\.(\w+)\.outputs\.(\w+)$")


def _is_remote(path) -> bool:
    """Not a local path this machine can check (a reference, a URL, or not a string at all)."""
    return not isinstance(path, str) or is_remote(path)


class Resolved(NamedTuple):
    """A node's component as far as this machine can read it, and what was wrong on the way."""

    spec: Spec | None
    findings: list[Finding]


def component_spec(spec: Spec, key: str, ref) -> Resolved:
    if isinstance(ref, dict):
        return Resolved(Spec(path=spec.path, data=ref, lines=spec.lines, role="component"),
                        [])  # this file's lines
    if isinstance(ref, str) and ref.startswith("azureml://registries/"):
        return _registry_component(spec, key, ref)
    if not isinstance(ref, str) or _is_remote(ref):
        return Resolved(None, [])  # registered components (azureml:name@version): Azure's
    path = spec.beside(ref.removeprefix("file:"))
    if not path.is_file():
        return Resolved(None, [spec.finding(key, f"component file '{ref}' does not exist",
                                            "point component: at a component file, relative "
                                            "to this pipeline")])
    try:
        return Resolved(load_spec(path, role="component"), [])
    except SpecError as err:
        return Resolved(None, [err.finding])


def _registry_component(spec: Spec, key: str, ref: str) -> Resolved:
    """A registry's component, from the folder the asset map names for the registry (the node
    is then checked against its inputs and outputs); unchecked where none is mapped, and a
    warning where the folder lacks that version (Azure's registry may hold it)."""
    try:
        asset = AssetMap().registry_asset(ref)
        return Resolved(load_spec(asset.spec, role="component") if asset else None, [])
    except (LocalRunError, SpecError) as err:
        return Resolved(None, [spec.warning(key, f"{ref} cannot be checked here: {err}",
                                            "map the registry to a folder that holds it")])


def _check_binding(spec: Spec, key: str, *, value, jobs: SpecData,
                   outputs_of: SpecData) -> list[Finding]:
    found = []
    for ref in REF.findall(str(value)):
        match = PARENT_REF.match(ref)
        if ref in RUNTIME_EXPRESSIONS:
            continue  # filled in by Azure when the job runs (output paths: ${{name}})
        if not match:
            found.append(spec.finding(key, f"${{{{{ref}}}}} is not a pipeline reference",
                                      "use ${{parent.inputs.x}}, ${{parent.outputs.x}} or "
                                      "${{parent.jobs.<step>.outputs.<name>}}"))
            continue
        scope, name, step, output = match.groups()
        if scope and name not in (spec.data.get(scope) or {}):
            found.append(spec.finding(key, f"${{{{{ref}}}}}: the pipeline has no {scope[:-1]} "
                                      f"'{name}'", f"declare '{name}' under the pipeline's "
                                      f"{scope}:"))
        elif step and step not in jobs:
            found.append(spec.finding(key, f"${{{{{ref}}}}}: there is no step '{step}'",
                                      f"use one of the steps: {', '.join(jobs)}"))
        elif step and step in outputs_of and output not in outputs_of[step]:
            found.append(spec.finding(key, f"${{{{{ref}}}}}: step '{step}' has no output "
                                      f"'{output}'", f"use one of: {', '.join(outputs_of[step])}"))
    return found


def _check_node(spec, name, *, node, component, jobs, outputs_of) -> list[Finding]:
    found = []
    label = "its inline component" if component.path == spec.path else component.path.name
    if label in ("spec.yaml", "spec.yml") and component.data.get("name"):  # a registry's
        label = f"component {component.data['name']} {component.data.get('version', '')}".strip()
    declared = component.data.get("inputs") or {}
    for io in ("inputs", "outputs"):
        for key, value in (node.get(io) or {}).items():
            where = f"jobs.{name}.{io}.{key}"
            if key not in (component.data.get(io) or {}) and not _swept(node, key):
                found.append(spec.warning(where, f"{label} has no {io[:-1]} '{key}' (Azure "
                                          "ignores the binding)",
                                          f"use one of: "
                                          f"{', '.join(component.data.get(io) or {}) or 'none'}"))
            found += _check_binding(spec, where, value=value, jobs=jobs, outputs_of=outputs_of)
    for key, definition in declared.items():
        definition = definition if isinstance(definition, dict) else {}
        required = not definition.get("optional") and "default" not in definition
        if required and key not in (node.get("inputs") or {}) and not _swept(node, key):
            found.append(spec.finding(f"jobs.{name}.inputs", f"required input '{key}' of "
                                      f"{label} is not bound", f"add {key}: "
                                      "${{parent.inputs.…}} (or a step output)"))
    return found


def _parallel_for_bodies(jobs: SpecData) -> set[str]:
    """The nodes a parallel_for runs once per item (`body: ${{parent.jobs.<node>}}`)."""
    found = set()
    for node in jobs.values():
        if isinstance(node, dict) and str(node.get("type")) == "parallel_for":
            match = re.match(r"^\$\{\{\s*parent\.jobs\.([\w-]+)\s*\}\}$",
                             str(node.get("body") or "").strip())
            found |= {match.group(1)} if match else set()
    return found


def _swept(node: SpecData, key: str) -> bool:
    return str(node.get("type", "")).lower() == "sweep" and key in (node.get("search_space")
                                                                    or {})


def _is_inline(node: SpecData) -> bool:
    """A command node with no component: it declares its own inputs and outputs."""
    return str(node.get("type") or "command").lower() == "command" and "component" not in node


def _node_component(spec: Spec, name: str, node: SpecData) -> Resolved:
    kind = str(node.get("type") or "command").lower()
    if kind == "sweep":
        return component_spec(spec, f"jobs.{name}.trial", node.get("trial"))
    if node.get("component") is not None:
        return component_spec(spec, f"jobs.{name}.component", node.get("component"))
    return Resolved(None, [])  # an inline command node declares its own inputs and outputs


def check_pipeline(spec: Spec) -> list[Finding]:
    jobs = spec.data.get("jobs") or {}
    components, found = {}, []
    for name, node in jobs.items():
        component, problems = _node_component(spec, name, node or {})
        found += problems
        if component:
            components[name] = component
    outputs_of = {name: list(c.data.get("outputs") or {}) for name, c in components.items()}
    outputs_of.update({name: list((node or {}).get("outputs") or {}) for name, node in
                       jobs.items() if _is_inline(node or {})})
    looped = _parallel_for_bodies(jobs)  # their items set their inputs (azure-ai-ml's rule)
    for name, node in jobs.items():
        if name in components:
            found += [f for f in _check_node(spec, name, node=node, component=components[name],
                                             jobs=jobs, outputs_of=outputs_of)
                      if not (name in looped and f.problem.startswith("required input"))]
        elif _is_inline(node or {}):
            for io in ("inputs", "outputs"):
                for key, value in ((node or {}).get(io) or {}).items():
                    found += _check_binding(spec, f"jobs.{name}.{io}.{key}", value=value, jobs=jobs,
                                            outputs_of=outputs_of)
    text = str(jobs)
    # a job of a pipeline component (component:) binds its inputs inside the component
    for name in {} if spec.data.get("component") is not None else spec.data.get("inputs") or {}:
        if f"parent.inputs.{name}" not in text:
            found.append(spec.warning(f"inputs.{name}", f"pipeline input '{name}' is not used "
                                      "by any step", f"bind it with ${{{{parent.inputs.{name}}}}}"
                                      " or remove it"))
    return found


def check_environment(spec: Spec) -> list[Finding]:
    found = []
    conda = spec.data.get("conda_file")
    if isinstance(conda, str) and not spec.beside(conda).is_file():
        found.append(spec.finding("conda_file", f"conda file '{conda}' does not exist",
                                  "point conda_file: at a file relative to this spec"))
    build = spec.data.get("build") or {}
    if build.get("path") and not _is_remote(build["path"]):
        dockerfile = dockerfile_in(spec.beside(build["path"]),
                                   str(build.get("dockerfile_path") or "Dockerfile"))
        if not dockerfile.is_file():
            found.append(spec.finding("build", f"no Dockerfile at {dockerfile}",
                                      "fix build.path / build.dockerfile_path"))
    return found


def check_data(spec: Spec) -> list[Finding]:
    path = spec.data.get("path")
    if path and not _is_remote(path) and not spec.beside(path).exists():
        return [spec.finding("path", f"local path '{path}' does not exist",
                             "fix the path (relative to this spec) or use a URL")]
    return []


def check_compute(spec: Spec) -> list[Finding]:
    return check_size(spec, "size", spec.data["size"]) if spec.data.get("size") else []


def check_endpoint(spec: Spec) -> list[Finding]:
    name = str(spec.data.get("name", ""))
    if ENDPOINT_NAME.match(name) and "--" not in name:
        return []
    return [spec.finding("name", f"endpoint name '{name}' is not allowed by Azure",
                         "use 3-32 characters: a letter first, then letters, digits and single "
                         "hyphens, not ending in a hyphen")]


def check_deployment(spec: Spec, endpoint_names: set[str]) -> list[Finding]:
    found = []
    if spec.data.get("instance_type") and spec.kind != "kubernetesOnlineDeployment":
        found += check_size(spec, "instance_type", spec.data["instance_type"])  # a VM size
    config = spec.data.get("code_configuration") or {}
    code = config.get("code")
    if code and not _is_remote(code):
        folder = spec.beside(code)
        script = config.get("scoring_script")
        if not folder.is_dir():
            found.append(spec.finding("code_configuration.code", f"code folder '{code}' does "
                                      "not exist", "point it at the folder that holds the scoring "
                                      "script, relative to this spec"))
        elif script and not (folder / script).is_file():
            found.append(spec.finding("code_configuration.scoring_script", f"scoring script "
                                      f"'{script}' is not in {code}", "give the path of the "
                                      "script relative to code_configuration.code"))
    endpoint = spec.data.get("endpoint_name")
    if endpoint_names and endpoint and endpoint not in endpoint_names:
        found.append(spec.warning("endpoint_name", f"no endpoint spec named '{endpoint}'",
                                  f"use one of: {', '.join(sorted(endpoint_names))}"))
    model = spec.data.get("model")
    local_model = isinstance(model, dict) and model.get("path") and not _is_remote(model["path"])
    if local_model and not spec.beside(model["path"]).exists():
        found.append(spec.finding("model.path", f"model path '{model['path']}' does not "
                                  "exist", "point it at the model's file or folder, relative to "
                                  "this spec, or reference a registered model "
                                  "(azureml:name@version)"))
    return found


def batch_settings(data: SpecData) -> SpecData:
    """A batch deployment's settings: `settings:`, or the top-level keys of the flat layout."""
    if isinstance(data.get("settings"), dict):
        return data["settings"]
    flat = {k: v for k, v in data.items() if k in FLAT_BATCH_KEYS}
    return {**flat, **({"environment_variables": data["environment_variables"]}
                       if flat and "environment_variables" in data else {})}


def check_batch_deployment(spec: Spec, endpoint_names: set[str]) -> list[Finding]:
    """The online checks that apply (code, scoring script, endpoint, model path), and the
    batch settings Azure would refuse."""
    found = [f for f in check_deployment(spec, endpoint_names) if "instance_type" not in f.key]
    settings = batch_settings(spec.data)
    size, threshold = settings.get("mini_batch_size"), settings.get("error_threshold")
    if size is not None and int(size) < 1:
        found.append(spec.finding("settings.mini_batch_size", "mini_batch_size must be at "
                                  "least 1", "give the number of files per run() call"))
    if threshold is not None and int(threshold) < -1:
        found.append(spec.finding("settings.error_threshold", "error_threshold below -1",
                                  "use -1 (no limit) or the number of failed files tolerated"))
    action = str(settings.get("output_action", "append_row")).lower()
    if action == "append_row" and not settings.get("output_file_name"):
        found.append(spec.warning("settings.output_file_name", "append_row without an output "
                                  "file name: Azure writes predictions.csv",
                                  "name the file: output_file_name: predictions.csv"))
    return found
