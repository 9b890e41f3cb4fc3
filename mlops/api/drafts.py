"""An asset spec (the YAML `az ml <kind> create -f` takes) as the version to register.

- model, data: `path:` is the content: a local file or folder (relative to the spec), a local
  job's output (`azureml://jobs/<name>/outputs/<output>/paths/...`), or a reference the mapping
  file maps (datastores, URLs);
- environment: the spec with the files it names (its conda file, its build context), so the
  registered version is built from what was registered, not from files that changed since;
- component: the spec with its `code:` folder (and its `additional_includes`, merged into it as
  Azure merges them when it registers the component), likewise.
The spec is checked as `make validate` checks it before anything is registered.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import yaml

from mlops.environments.envspec import EnvMap, require_environment
from mlops.errors import LocalRunError
from mlops.runtime import AssetMap, is_remote
from mlops.specs import Spec, SpecError, load_spec
from mlops.workspace import names
from mlops.workspace.records import AssetKind
from mlops.workspace.references import submission, submitted_name
from mlops.workspace.store import Draft
from mlops.workspace.uploads import copy_files, upload_files

SPEC_FILE = "spec.yml"
KINDS = {"model": AssetKind.MODEL, "data": AssetKind.DATA,
         "environment": AssetKind.ENVIRONMENT}


def kind_of(spec: Spec, hint: str | None) -> AssetKind:
    if hint:
        try:
            return AssetKind.parse(hint)
        except ValueError as err:
            raise LocalRunError(str(err)) from None
    declared = spec.declared
    if declared in KINDS:
        return KINDS[declared]
    if declared.endswith("Component"):
        return AssetKind.COMPONENT
    raise LocalRunError(f"{spec.path}: its $schema names no asset kind (model, data, "
                        "environment, component): say which with KIND=<kind>")


Overrides = tuple[tuple[str, object], ...]  # az's params_override, in its order
COMMAND_LINE = "(the command line)"  # where a spec made of flags alone says it comes from


def read_asset_spec(path: Path | None, hint: str | None,
                    overrides: Overrides = ()) -> tuple[Spec, AssetKind]:
    """The spec at `path` with az's overrides applied (--set, then --name, --version, ...), as
    azure-ai-ml's load_<kind>(source, params_override) loads it; without `path`, the spec the
    overrides make, its relative paths from the current folder (load_environment(None, ...))."""
    from mlops.checks.overrides import apply_sets
    from mlops.checks.validation import check

    try:
        if path is None:
            spec = Spec(path=Path.cwd() / COMMAND_LINE, data={}, role=str(hint or ""))
        else:
            spec = load_spec(path)
        kind = kind_of(spec, hint)
        if path is not None and kind == AssetKind.COMPONENT:
            spec = load_spec(path, role="component")
        elif path is not None and hint:  # az ml's verb loads it as its kind (load_data)
            spec = load_spec(path, role=kind.value.rstrip("s"))
    except SpecError as err:
        raise LocalRunError(str(err)) from None
    apply_sets(spec.data, [{key: value} for key, value in overrides], spec.path)
    path = spec.path
    errors = [f for f in check(spec) if f.is_error]
    if errors:
        raise LocalRunError("\n".join(str(f) for f in errors))
    if not spec.data.get("name"):
        raise LocalRunError(f"{path}: an asset needs a name (Azure refuses one without)")
    if kind == AssetKind.ENVIRONMENT:
        _image_or_build(spec.data, path)
    try:
        names.asset_name(kind.value, spec.data["name"], kind.noun)
        if spec.data.get("version") is not None:
            names.version(str(spec.data["version"]))
    except names.InvalidName as err:
        raise names.InvalidName(f"{path}: {err}") from None
    return spec, kind


def _image_or_build(data: dict[str, object], path: Path) -> None:
    """azure-ai-ml's Environment.validate, which create_or_update runs before anything is sent:
    an image or a build context, not both."""
    if not data.get("image") and not data.get("build"):
        raise LocalRunError(f"{path}: Docker image or Dockerfile is required for environments "
                            "(azure-ai-ml): give image: (--image) or build: (--build-context)")
    if data.get("image") and data.get("build"):
        raise LocalRunError(f"{path}: Docker image or Dockerfile should be provided not both "
                            "(azure-ai-ml): keep image: or build:")


def resolve_path(path: str, asset_file: Path | None) -> Path:
    """`--path` of `az ml model|data create` without a spec, from the current folder: a local
    path, a local job's output or a mapped reference (AssetMap.local_path answers all three)."""
    assets = AssetMap(asset_file) if asset_file is not None else AssetMap()
    return assets.local_path(path.rstrip("/") or "/", "--path", Path.cwd())


@contextlib.contextmanager
def draft_of(path: Path | None, *, kind: str | None, assets: AssetMap,
             overrides: Overrides = ()) -> Iterator[Draft]:
    """The draft for the spec at `path` with the command line's overrides (read_asset_spec)."""
    spec, asset_kind = read_asset_spec(path, kind, overrides)
    path, data = spec.path, spec.data
    draft = Draft(kind=asset_kind, name=str(data["name"]), source=None,
                  version=str(data.get("version") or "") or None,
                  type=str(data.get("type") or default_type(asset_kind)),
                  description=str(data.get("description") or ""),
                  tags={str(k): str(v) for k, v in (data.get("tags") or {}).items()},
                  properties={str(k): str(v) for k, v in (data.get("properties") or {}).items()},
                  stage=str(data.get("stage") or ""), origin=str(path.resolve()))
    if asset_kind in (AssetKind.MODEL, AssetKind.DATA):
        if not data.get("path"):
            raise LocalRunError(f"{path}: a {asset_kind.noun} needs a path")
        draft.source = assets.local_path(str(data["path"]).rstrip("/") or "/",
                                         f"{spec.path}: path", spec.path.parent)
        path_matches_type(draft, str(data["path"]), f"{spec.path}: path")
        yield draft
        return
    with tempfile.TemporaryDirectory(prefix="mlops-asset-") as staging:
        draft.source = _bundle(spec, asset_kind, Path(staging) / asset_kind.value.rstrip("s"))
        yield draft


def path_matches_type(draft: Draft, given: str, where: str) -> None:
    """azure-ai-ml's checks of a model's or data asset's local path, made before anything is
    uploaded: a folder holds a file to upload; a data asset's path is what its type says
    (_assert_local_path_matches_asset_type; an MLTable's metadata is read from the folder): a
    uri_file a file, a uri_folder a folder, an mltable a folder holding an MLTable file. A URI
    (a job's output, a datastore) is not checked, as there."""
    source, kind = draft.source, draft.type or default_type(draft.kind)
    if source is None or is_remote(given):
        return
    wrong = draft.kind == AssetKind.DATA and {
        "uri_file": not source.is_file(), "uri_folder": not source.is_dir(),
        "mltable": not (source / "MLTable").is_file()}.get(kind, False)
    if wrong:
        shape = {"uri_file": "a file", "uri_folder": "a folder",
                 "mltable": "a folder holding an MLTable file"}[kind]
        raise LocalRunError(f"{where}: File path does not match asset type {kind}: {source} "
                            f"(azure-ai-ml refuses it): a {kind} asset's path is {shape}")
    if source.is_dir():  # then uploaded: a folder with no file is refused (EmptyDirectoryError)
        upload_files(source, where, nonempty=True)


def default_type(kind: AssetKind) -> str:
    """Azure's type for a model or data asset that names none."""
    return {AssetKind.MODEL: "custom_model", AssetKind.DATA: "uri_folder"}.get(kind, "")


def _bundle(spec: Spec, kind: AssetKind, folder: Path) -> Path:
    """The spec and the files it names, in one folder, the spec's paths pointing inside it."""
    folder.mkdir(parents=True)
    data = dict(spec.data)
    base = spec.path.parent
    if kind == AssetKind.ENVIRONMENT:
        data = _environment_files(data, base, folder, "")
    else:
        data = _component_files(data, base, where=str(spec.path), folder=folder, prefix="")
    (folder / SPEC_FILE).write_text(yaml.safe_dump(data, sort_keys=False))
    return folder


def _component_files(data: dict[str, object], base: Path, *, where: str, folder: Path,
                     prefix: str) -> dict[str, object]:
    """A component's inline environment's files (Azure registers their content), its code, and
    a pipeline component's nodes' (each file name in `folder` starting with `prefix`)."""
    if isinstance(data.get("environment"), dict):
        data["environment"] = _environment_files(dict(data["environment"]), base, folder,
                                                 f"{prefix}environment-")
    _component_code(data, base, where=where, folder=folder, name=f"{prefix}code")
    _component_environment(data, base, where)
    _pipeline_nodes(data, base, where=where, folder=folder, prefix=prefix)
    return data


def _pipeline_nodes(data: dict[str, object], base: Path, *, where: str, folder: Path,
                    prefix: str) -> None:
    """A pipeline component's nodes: a component file a node names, its inline component, an
    inline command's code, registered with it (Azure registers each node's component, its code
    uploaded, with the pipeline component), so the registered copy runs from any folder. A
    component file becomes `<node>-spec.yml` beside it, its files named after the node."""
    jobs = data.get("jobs")
    if data.get("type") != "pipeline" or not isinstance(jobs, dict):
        return
    nodes = data["jobs"] = dict(jobs)
    for name, node in jobs.items():
        if not isinstance(node, dict):
            continue
        node = nodes[name] = dict(node)
        key = "trial" if node.get("type") == "sweep" else "component"
        ref, mine, at = node.get(key), f"{prefix}{name}-", f"{where}: jobs.{name}"
        if isinstance(ref, dict):
            node[key] = _component_files(dict(ref), base, where=at, folder=folder, prefix=mine)
        elif isinstance(ref, str) and not is_remote(ref):
            sub = load_spec((base / ref.removeprefix("file:")).resolve(), role="component")
            made = _component_files(dict(sub.data), sub.path.parent, where=str(sub.path),
                                    folder=folder, prefix=mine)
            (folder / f"{mine}{SPEC_FILE}").write_text(yaml.safe_dump(made, sort_keys=False))
            node[key] = f"{mine}{SPEC_FILE}"
        elif ref is None:  # an inline command: its own code
            _component_code(node, base, where=at, folder=folder, name=f"{mine}code")


def _component_environment(data: dict[str, object], base: Path, where: str) -> None:
    """The component's workspace environment name (its own, a parallel task's), resolved after
    its code as az ml component create resolves them (azure-ai-ml's
    _resolve_dependencies_for_component, through get_asset_arm_id): a label (`@latest`) is
    looked up there and then, so one nothing here knows is refused, as azure-ai-ml refuses the
    component; a version is passed on as an asset id (what the service makes of it is not
    azure-ai-ml's to say)."""
    task = data.get("task")
    for key, value in (("environment", data.get("environment")),
                       ("task.environment", task.get("environment") if isinstance(task, dict)
                        else None)):
        ref = submitted_name(value)
        if ref is not None and ref.label is not None:
            require_environment(str(value), base, EnvMap(), f"{where}: {key}",
                                by=submission("component"))


def _component_code(data: dict[str, object], base: Path, *, where: str, folder: Path,
                    name: str) -> None:
    """The component's `code:` copied into `folder` as `name` (its `additional_includes`
    merged in, as Azure merges them when it registers the component)."""
    if data.get("additional_includes"):
        from mlops.runtime import include_paths, merged

        code = (base / str(data["code"]).removeprefix("file:")).resolve() \
            if data.get("code") else None
        includes = include_paths(data.pop("additional_includes"), base, where)
        with merged(code, includes) as code_folder:
            data["code"] = _take(code_folder, ".", folder, name)
    elif data.get("code") and not is_remote(str(data["code"])):
        data["code"] = _take(base, str(data["code"]), folder, name)


def _environment_files(env: dict[str, object], base: Path, folder: Path,
                       prefix: str) -> dict[str, object]:
    """An environment definition with the files it names (its conda file, its build context)
    copied into `folder` and named from there."""
    if env.get("conda_file") and isinstance(env["conda_file"], str):
        env["conda_file"] = _take(base, env["conda_file"], folder, f"{prefix}conda")
    build = env.get("build")
    if isinstance(build, dict) and build.get("path") and not is_remote(str(build["path"])):
        env["build"] = {**build, "path": _take(base, str(build["path"]), folder,
                                               f"{prefix}context")}
    return env


def _take(base: Path, relative: str, folder: Path, name: str) -> str:
    source = (base / relative.removeprefix("file:")).resolve()
    if not source.exists():
        raise LocalRunError(f"{base}: {relative} does not exist ({source})")
    target = folder / (name if source.is_dir() else f"{name}{source.suffix}")
    files = upload_files(source, f"{base}: {relative}", nonempty=True)
    if source.is_dir():  # bytecode is no part of what was registered (it changes by itself)
        copy_files([(file, path) for file, path in files
                    if "__pycache__" not in Path(path).parts and not path.endswith(".pyc")],
                   target)
    else:
        shutil.copyfile(source, target)
    return target.name
