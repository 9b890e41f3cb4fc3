"""The model a deployment serves: where it comes from, and how Azure lays it out for the scorer.

Where from (online and batch deployments alike), first match wins:
1. MODEL_DIR (--model): a local file or folder.
2. the spec's `model:` - a local path (file or folder, relative to the spec), or a reference
   (`azureml:<name>:<version>`, `azureml:<name>@latest`, `azureml://registries/<r>/models/<name>/
   ...`, `azureml://subscriptions/.../models/<name>/...`): the version the local workspace holds
   (mlops/workspace: registered by the pipeline's register step, MLflow or `make
   model-create-local`), else a local path assets/local-paths.yml maps it to, by the whole
   reference or by `azureml:<name>`. A name neither knows is an error that says how to register
   it; this project's own models ([tool.azml] own_models) are never taken from an unregistered
   training run, so a model the pipeline's quality gate refused is never served.
3. a spec with no model at all: the newest model trained under runs/, named in the log.

Layout, as Azure mounts a registered model (learn.microsoft.com/azure/machine-learning/
concept-online-deployment-model-specification; the inference images set AZUREML_MODEL_DIR to
/var/azureml-app/azureml-models/<name>/<version>): AZUREML_MODEL_DIR is the folder the model is
mounted under, not the model. A single-file model sits directly in it (`<dir>/model.pkl`); a
folder model keeps its folder's own name inside it (`<dir>/model/...`), so scoring scripts join
AZUREML_MODEL_DIR with `model/...`; Azure's MLflow scorer finds an MLflow model at
AZUREML_MODEL_DIR/$MLFLOW_MODEL_FOLDER. Locally the folders are real and each file a hard link
to the user's file (a copy across file systems): loaders that refuse symbolic links pointing
outside their folder (MLflow's) read them as Azure's mount. The mount is read-only on Azure, and
writes under it fail here too (mlops/runtime/readonly_inputs.py).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from mlops.errors import LocalRunError
from mlops.project import project
from mlops.runtime import REGISTER, AssetMap, candidates, is_remote, lookup

NAMED = re.compile(r"^azureml:(?!//)([^@:/]+)(?:[:@](.+))?$")
LONG = re.compile(r"^azureml://.*?/models/([^/]+)(?:/(?:versions|labels)/([^/]+))?/?$")
# The folder a local deployment lays its model out in, as Azure mounts it (lay_out): a copy,
# never taken for a trained model.
LAYOUT = "azureml-models"


@dataclass(kw_only=True)
class ModelSource:
    path: Path  # the local file or folder
    name: str
    version: str
    origin: str  # where it came from, for the log
    mlflow: bool = False  # an MLflow model: MLmodel at the root of its folder

    def describe(self) -> str:
        kind = "MLflow model" if self.mlflow else "model"
        return f"{kind} {self.name}:{self.version} from {self.path} ({self.origin})"


@dataclass
class ModelLayout:
    root: Path  # AZUREML_MODEL_DIR
    folder: str  # the model's own name inside it (MLFLOW_MODEL_FOLDER)
    source: ModelSource

    def env(self) -> dict[str, str]:
        """AZUREML_MODEL_DIR, and MLFLOW_MODEL_FOLDER for an MLflow model (Azure's MLflow
        scorer reads it)."""
        env = {"AZUREML_MODEL_DIR": str(self.root)}
        if self.source.mlflow:
            env["MLFLOW_MODEL_FOLDER"] = self.folder
        return env

    def read_only(self) -> list[str]:
        return [str(self.root), str(self.source.path)]


class NameVersion(NamedTuple):
    name: str
    version: str


def name_version(reference: str) -> NameVersion:
    """`azureml:clf:3` -> (clf, 3); `azureml:clf@latest` -> (clf, latest); registry and
    workspace URIs likewise; anything else is named after its last path part."""
    for pattern in (NAMED, LONG):
        match = pattern.match(reference)
        if match:
            return NameVersion(match.group(1), match.group(2) or "latest")
    return NameVersion(Path(reference.rstrip("/")).name or "model", "1")


def newest_trained(why: str, runs: Path | None = None) -> ModelSource:
    """The newest folder under runs/ that holds a trained model (a failed run leaves none)."""
    config = project()
    runs = runs or config.runs_dir
    found = sorted((path for path in runs.glob(f"**/{config.model_file}")
                    if not {LAYOUT, "inputs"} & set(path.relative_to(runs).parts)),
                   key=lambda p: p.stat().st_mtime)  # not a deployment's copy, nor an input
    if not found:
        raise LocalRunError(f"{why}, and there is no trained model under {runs}: "
                            "run `make train-local` first, or pass MODEL_DIR=<model folder>")
    name = config.own_models[0] if config.own_models else "model"
    return ModelSource(path=found[-1].parent, name=name, version="local",
                       origin=f"{why}: the newest trained model")


def _is_mlflow(path: Path, declared: str | None) -> bool:
    return declared == "mlflow_model" or (path.is_dir() and (path / "MLmodel").is_file())


def _registered(reference: str) -> ModelSource | None:
    """The version the local workspace holds under `reference`, its files checked."""
    from mlops.workspace.records import AssetKind
    from mlops.workspace.references import registered
    from mlops.workspace.store import Workspace, workspace_root

    workspace = Workspace(workspace_root())
    record = registered(reference, AssetKind.MODEL, workspace)
    if record is None:
        return None
    return ModelSource(path=workspace.checked(record), name=record.name, version=record.version,
                       origin=f"local workspace: {record.reference}",
                       mlflow=record.type == "mlflow_model")


def _mapped(reference: str, where: str, asset_file: Path | None) -> ModelSource:
    held = _registered(reference)
    if held is not None:
        return held
    name, version = name_version(reference)
    assets = AssetMap(asset_file)
    mapping, named = assets.mapping, assets.named
    model_key = re.sub(r"/(versions|labels)/[^/]+/?$", "", reference)  # every version of it
    local = lookup(reference, mapping) or mapping.get(model_key) or mapping.get(f"azureml:{name}")
    if local is None:
        if name in project().own_models:
            hint = project().hints.get("register_model", "register one")
            raise LocalRunError(f"{where}: model {reference}: the local workspace holds no "
                                f"version of {name} ({hint}), and {named} maps none;"
                                " or serve a folder instead: --model <model folder>")
        keys = " or ".join(dict.fromkeys([model_key if model_key != reference else
                                          candidates(reference)[-1], f"azureml:{name}"]))
        raise LocalRunError(f"{where}: model {reference} has no local stand-in: neither the "
                            f"local workspace nor {named} knows it. "
                            f"{REGISTER.format(noun='model')}add a line "
                            f"'{keys}: <local file or folder>' to {named}, or serve a folder "
                            "instead: --model <local file or folder>")
    path = (assets.base / local).resolve()
    if not path.exists():
        raise LocalRunError(f"{where}: {reference} maps to {path} ({named}), which does "
                            "not exist")
    return ModelSource(path=path, name=name, version=stand_in_version(reference, version),
                       origin=f"{Path(named).name}: {reference}")


FIRST_VERSION = "1"  # the version an asset's first registration gets


def stand_in_version(reference: str, version: str) -> str:
    """The version a mapped model is laid out under (AZUREML_MODEL_DIR's last part). Azure
    never deploys a label: az ml resolves `name@label` and `.../labels/<label>` to the version
    it points at before the deployment is created (azure-ai-ml's OperationOrchestrator.
    _resolve_name_version_from_name_label), so the folder is a version, never `latest`. A
    stand-in has one version: the one an asset's first registration gets."""
    labelled = (bool(NAMED.match(reference)) and "@" in reference) or "/labels/" in reference
    return FIRST_VERSION if labelled else version


def model_source(model, base: Path, where: str, *, override: str | None = None,
                 asset_file: Path | None = None) -> ModelSource:
    """The model to serve for a deployment whose spec says `model` (see the module docstring)."""
    declared = model.get("type") if isinstance(model, dict) else None
    reference = model.get("path") if isinstance(model, dict) else model
    if override:
        path = Path(override).resolve()
        if not path.exists():
            raise LocalRunError(f"--model {override}: no such file or folder")
        name = name_version(str(reference))[0] if reference else path.name
        source = ModelSource(path=path, name=name, version="local", origin="MODEL_DIR")
    elif not reference:
        source = newest_trained(f"{where}: the spec names no model")
    elif is_remote(str(reference)):
        source = _mapped(str(reference), f"{where}: model", asset_file)
    else:
        path = (base / str(reference).removeprefix("file:")).resolve()
        if not path.exists():
            raise LocalRunError(f"{where}: model.path {reference} does not exist ({path})")
        inline = model if isinstance(model, dict) else {}
        name, version = inline.get("name"), inline.get("version")
        if not name and version is None:
            name, version = anonymous_name(path), FIRST_VERSION
        source = ModelSource(path=path, name=str(name), version=str(version or 1),
                             origin=f"{where}: model.path")
    source.mlflow = source.mlflow or _is_mlflow(source.path, declared)
    return source


def anonymous_name(path: Path) -> str:
    """The name az ml gives a model a deployment spec holds inline without a name or version:
    version 1 of an anonymous asset named the sha256 of its upload's hash (azure-ai-ml's
    Asset and Model constructors: get_object_hash over the files the ignore file keeps), so
    AZUREML_MODEL_DIR is azureml-models/<that hash>/1 on Azure."""
    from azure.ai.ml._utils._asset_utils import get_ignore_file, get_object_hash
    from azure.ai.ml.entities._util import get_sha256_string

    return get_sha256_string(get_object_hash(path, get_ignore_file(path)))


def lay_out(source: ModelSource, app: Path) -> ModelLayout:
    """`app`/azureml-models/<name>/<version>/ holding the model as Azure mounts it."""
    root = app / LAYOUT / source.name / source.version
    if root.exists():
        shutil.rmtree(root)  # links and copies: the user's files stay
    root.mkdir(parents=True)
    if source.path.is_file():
        _link(source.path, root / source.path.name)
        return ModelLayout(root, source.path.name, source)
    for folder, _dirs, files in os.walk(source.path, followlinks=True):
        relative = Path(folder).relative_to(source.path)
        target = root / source.path.name / relative
        target.mkdir(parents=True, exist_ok=True)
        for name in files:
            _link(Path(folder, name).resolve(), target / name)
    return ModelLayout(root, source.path.name, source)


def _link(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or one without hard links
        shutil.copyfile(source, target)
