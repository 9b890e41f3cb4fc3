"""What Python packages a spec's `environment:` stands for, read without Docker.

Every form a spec can use resolves to a plan (a pip requirement list and a Python version):
- `azureml:<name>@latest` / `azureml:<name>:<version>`: a workspace environment: the version
  registered in the local workspace (mlops/workspace), else in catalog/local-envs.yml
  (curated ones), else the definition nearest the spec (below);
- `azureml://registries/<registry>/environments/<name>/labels/<l>|versions/<v>`: local-envs.yml;
- inline `image:` + `conda_file:`: the conda file (pip entries; conda packages through their
  PyPI names); `image:` alone: local-envs.yml by image name;
- `build: path:` (a Docker context): the requirements its Dockerfile installs with plain
  `pip install` (packages or `-r file`) or `conda env create -f file`.
A workspace name the local workspace does not hold and the mapping file does not know is the
definition nearest the spec in its own repository that az ml could have registered (the conda
file and build context it names exist), as a name resolves in the workspace it was
registered in (MLOps templates keep the environment spec they register beside their jobs): the
spec's folder, then each folder above it up to the repository root (the enclosing git root, else
the spec's folder), each with its subfolders; the first of those that holds one wins, so a
definition in another project of the same repository never stands in for the spec's own. One
line names the file it came from (and the other definitions of that name passed over). A job's
name none of these knows is refused before the job runs (require_environment, as az ml job create
refuses it: mlops/checks/references.py); what else cannot be read (a deployment's unknown name, a
Dockerfile that installs otherwise) runs in .venv with a one-line notice naming the mapping file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import yaml

from mlops.environments import curated
from mlops.environments.docker_python import image_python
from mlops.environments.envfiles import (
    EnvPlan,
    image_key,
    read_dockerfile,
    read_environment_conda,
    with_conda_base,
)
from mlops.errors import LocalRunError
from mlops.project import CONFIG, project, remember, remembered
from mlops.specs import SpecData, read_yaml

if TYPE_CHECKING:
    from mlops.workspace.references import Submission

CATALOG = Path(__file__).resolve().parent / "catalog"  # ships with the tool (mlops/pyproject)
ENV_MAP = CATALOG / "local-envs.yml"
CURATED = CATALOG / "curated-envs.yml"  # generated: scripts/gen_curated_envs.py
# a curated environment's image is published as mcr.microsoft.com/azureml/curated/<name>:<tag>;
# the prebuilt inference images as mcr.microsoft.com/azureml/<name>:<tag>, the curated
# environment of that name (Azure's "prebuilt Docker images for inference")
CURATED_IMAGES = "image:mcr.microsoft.com/azureml/curated/"
AZUREML_IMAGES = "image:mcr.microsoft.com/azureml/"
REGISTRY_ENVS = "azureml://registries/azureml/environments/"
CURATED_PREFIX = "AzureML-"  # azure-ai-ml sends such a name on unresolved: the service expands it


@dataclass(frozen=True, kw_only=True)
class EnvironmentRef:
    """A spec's `environment:` as written (a reference, an inline mapping, or nothing), the
    folder its relative paths start from, and the packages the image brings when the
    environment lacks them (a serving image's inference server, MLflow for no-code models)."""

    value: str | SpecData | None = None
    base: Path = Path(".")
    adds: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()  # what the image checks the environment installs before it
    # starts the task (an inference container's server: mlops/environments/startup.py)
    image: str = ""  # what brings `adds`, for messages ("Spark 3.4 runtime")
    fixed: tuple[str, ...] = ()  # what the image fixes whatever the environment names (Spark)
    python: str = ""  # the Python the image runs whatever the environment asks (Spark's)


class Found(NamedTuple):
    """An environment spec found by name: its data, its file, and the other definitions of the
    name in the same nearest folder (passed over, named in the log)."""

    data: SpecData
    file: Path
    others: tuple[Path, ...] = ()


class EnvName(NamedTuple):
    """`azureml:train-env:3` read as name, separator and version."""

    name: str
    separator: str  # "@", ":" or ""
    version: str | None  # after ":" only


def _load_map(path: Path) -> dict[str, object]:
    """The mapping a map file holds; parsed once per content (the curated catalogue is 150 kB
    of YAML: a tenth of a second of CPU in every run), then read back from the tool's cache."""
    raw = path.read_bytes() if path.is_file() else b""
    key = ["env-map", hashlib.sha256(raw).hexdigest(), yaml.__version__]
    data = remembered("yaml", key)
    if data is not None:
        return data
    try:
        data = read_yaml(raw.decode()) or {}
    except yaml.YAMLError as err:
        raise LocalRunError(f"{path}: not valid YAML ({err})") from None
    except UnicodeDecodeError as err:
        raise LocalRunError(f"{path}: not UTF-8 ({err})") from None
    if not isinstance(data, dict):
        raise LocalRunError(f"{path}: expected a mapping of environments to packages")
    with contextlib.suppress(TypeError, ValueError):  # kept only where JSON holds it as it is
        if json.loads(json.dumps(data)) == data:
            remember("yaml", key, data)
    return data


class EnvMap(dict):
    """The repository's own environment map (`path`, else its settings' `env_map`:
    mlops/project.py) over the tool's stand-ins (catalog/local-envs.yml) over the generated
    catalogue of every curated environment (catalog/curated-envs.yml); keys match without
    regard to case, as Azure's environment names do."""

    def __init__(self, path: Path | None = None, curated: Path = CURATED):
        settings = project()
        self.file = Path(path) if path is not None else settings.env_map
        self.named = str(self.file) if self.file is not None else \
            f"an environment map (env_map = \"<file>\" in {settings.root / CONFIG})"
        own = {**_load_map(ENV_MAP), **(_load_map(self.file) if self.file else {})}
        self.own = {str(k).lower() for k in own}  # hand-written: no version history applies
        data = {**_load_map(Path(curated)), **own}
        super().__init__({str(k).lower(): v for k, v in data.items()})

    def get(self, key, default=None):
        return super().get(str(key).lower(), default)


def from_map(key: str, label: str, env_map: EnvMap, version: str | None = None) -> EnvPlan:
    """A curated, registry or image-only environment, through catalog/local-envs.yml over the
    curated catalogue (exact keys first, a curated image, or a prebuilt one of Azure ML's whose
    name is a curated environment's, by that environment's name, then the longest key ending in
    `/` that prefixes this one); a curated one at the `version` named."""
    if key.lower().startswith(CURATED_IMAGES) and env_map.get(key) is None:
        key = REGISTRY_ENVS + key[len(CURATED_IMAGES):]  # the image of that curated name
    elif key.lower().startswith(AZUREML_IMAGES) and env_map.get(key) is None and \
            env_map.get(REGISTRY_ENVS + key[len(AZUREML_IMAGES):]) is not None:
        key = REGISTRY_ENVS + key[len(AZUREML_IMAGES):]  # a prebuilt image of a curated name
    entry, notice, as_of = env_map.get(key), None, None
    catalogued = key.lower() not in env_map.own and entry is not None
    if key.lower() not in env_map.own:  # a hand-written entry has no version history
        chosen = curated.choose(key, version, label)
        if chosen is not None:
            entry, notice, as_of = chosen.entry, chosen.notice, chosen.as_of()
            catalogued = True
        elif entry is not None and version:
            entry = curated.at_version(key, version) or entry
        as_of = as_of or curated.retired_as_of(entry)
    if entry is None:
        prefixes = [k for k in env_map if k.endswith("/") and key.lower().startswith(k)]
        entry = env_map[max(prefixes, key=len)] if prefixes else None
    if entry is None:
        return EnvPlan(label=label, notice=f"{label} has no local stand-in (add '{key}:' to "
                                     f"{env_map.named}); running in .venv", undefined=key)
    entry = {"pip": entry} if isinstance(entry, list) else dict(entry)
    plan = EnvPlan(label=label, python=str(entry["python"]) if entry.get("python") else None,
                   complete=catalogued)
    for line in entry.get("pip") or []:
        plan.requirements.append(str(line))
    if key.lower() not in env_map.own:  # Azure built this image: a line PyPI has no project
        plan.conda = list(plan.requirements)  # of (pytorch-cuda, cpuonly) was conda's there
    with_conda_base(plan, image=True)  # curated and mapped images are conda environments
    plan.requirements += [as_of] if as_of else []  # resolved as PyPI was when it was built
    plan.notice = notice
    return plan


def curated_tag(image: str) -> str | None:
    """The version a curated image's tag names (`.../azureml/curated/sklearn-1.0:12`: 12;
    `:latest` and other images: None)."""
    bare = re.sub(r"@sha256:.*$", "", image)
    match = re.search(r":(\d+)$", bare)
    return match.group(1) if match and ("image:" + bare).startswith(CURATED_IMAGES) else None


def from_definition(definition: SpecData, base: Path, label: str, env_map: EnvMap) -> EnvPlan:
    plan = EnvPlan(label=label)
    conda = definition.get("conda_file")
    build = definition.get("build") or {}
    if conda:  # a conda file, or one written inline in the spec
        read_environment_conda(conda, base, plan)
        plan.complete = True
    elif build.get("path"):
        context = (base / str(build["path"])).resolve()
        image = read_dockerfile(context, str(build.get("dockerfile_path") or "Dockerfile"), plan)
        below = from_map(image_key(image), label, env_map, curated_tag(image)) if image \
            else None
        if below is not None and below.notice is None:  # a curated (or mapped) image below
            plan.requirements[:0] = [line for line in below.requirements  # what the build
                                     if not line.startswith(curated.RESOLVED_AS_OF)]  # adds: now
            plan.python, plan.notice = plan.python or below.python, None
        elif below is not None and plan.notice:  # nothing installed, on an image unknown here
            plan.undefined = below.undefined
            plan.notice += f", on {image}, which has no local stand-in: running in .venv"
    elif definition.get("image"):
        image = str(definition["image"])
        plan = from_map(image_key(image), label, env_map, curated_tag(image))
        plan.python = plan.python or image_python(image)
    return plan


SKIPPED_DIRS = {".git", ".venv", "venv", "node_modules", "runs", "mlruns", "__pycache__", ".cache"}
MAX_SCANNED = 5000  # YAML files read when looking for an environment spec in a job's repository


def search_root(base: Path) -> Path:
    """The job's own repository: the enclosing git root, else the spec's folder."""
    for folder in (base, *base.parents):
        if (folder / ".git").exists():
            return folder
    return base


def _yaml_files(root: Path, skip: Path | None = None):
    """The YAML files under `root`, less those under `skip` (a folder already searched)."""
    count = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith(".")
                         and Path(folder) / d != skip)
        for name in sorted(files):
            if name.endswith((".yml", ".yaml")):
                count += 1
                if count > MAX_SCANNED:
                    return
                yield Path(folder) / name


def _definitions(name: str, folder: Path, skip: Path | None) -> list[tuple[Path, SpecData]]:
    found = []
    for path in _yaml_files(folder, skip):
        try:
            text = path.read_text(errors="replace")
            if name not in text:
                continue
            data = read_yaml(text)
        except (OSError, yaml.YAMLError):
            continue
        if _is_environment(data) and str(data.get("name")) == name and \
                _registrable(data, path.parent):
            found.append((path, data))
    return found


def _registrable(data: SpecData, folder: Path) -> bool:
    """Whether `az ml environment create` could have registered this definition: the conda
    file and build context it names exist (a spec kept to show a refusal never was)."""
    build = data.get("build")
    named = [data.get("conda_file"), build.get("path") if isinstance(build, dict) else None]
    return all((folder / str(p)).exists() for p in named if isinstance(p, str) and
               "://" not in p and p)


def job_repo_environment(name: str, version: str | None, base: Path) -> Found | None:
    """The definition of `name` nearest the spec in its own repository (see the module's
    docstring); in the nearest folder that holds any, a spec whose `version:` matches first,
    then the fewest folders below that folder, then by path."""
    base = base.resolve()
    root, skip = search_root(base), None
    for folder in (base, *base.parents):
        found = _definitions(name, folder, skip)
        if found:
            found.sort(key=lambda item: (str(item[1].get("version", "")) != (version or "-"),
                                         len(item[0].relative_to(folder).parts), str(item[0])))
            return Found(found[0][1], found[0][0], tuple(path for path, _ in found[1:]))
        if folder == root:
            break
        skip = folder
    return None


def _is_environment(data) -> bool:
    return isinstance(data, dict) and any(k in data for k in ("image", "build", "conda_file")) \
        and not any(k in data for k in ("command", "jobs", "trial", "type"))


def plan_for(environment, base: Path, env_map: EnvMap, where: str = "") -> EnvPlan:
    """The plan for any form of `environment:` (see the module docstring)."""
    if environment is None or environment == "":
        return EnvPlan(label="no environment")
    if isinstance(environment, dict):
        return from_definition(environment, base, f"the environment of {where or 'the job'}",
                               env_map)
    reference = str(environment)
    if reference.startswith("file:"):  # an environment spec file, as azure-ai-ml loads it
        return from_file(reference, base, env_map, where)
    registry = re.match(r"^azureml://registries/([^/]+)/environments/([^/]+)"
                        r"(?:/versions/([^/]+))?", reference)
    if registry:
        key = f"azureml://registries/{registry.group(1)}/environments/{registry.group(2)}"
        return from_map(key, reference, env_map, registry.group(3))
    held = registered_environment(reference)
    if held is not None:
        plan = from_definition(read_yaml((held / "spec.yml").read_text()), held, reference,
                               env_map)
        plan.notice = plan.notice or f"{reference}: the version registered in the local " \
            f"workspace ({held / 'spec.yml'})"
        return plan
    return named_plan(reference, base, env_map).plan


class Named(NamedTuple):
    """A workspace name's plan, and whether anything here knows the name."""

    plan: EnvPlan
    known: bool


def named_plan(reference: str, base: Path, env_map: EnvMap) -> Named:
    """A workspace name the local workspace does not hold: curated or mapped, else its
    definition in the job's own repository; unknown (the map's notice) when neither has it."""
    name, _, version = _name_version(reference)
    plan = from_map(f"azureml:{name}", reference, env_map, version)
    if plan.notice is None:
        return Named(plan, known=True)
    own = job_repo_environment(name, version, base)
    if own is None:
        return Named(plan, known=not plan.undefined)
    plan = from_definition(own.data, own.file.parent, reference, env_map)
    passed = f" (nearest of {len(own.others) + 1} definitions of {name}; not " \
        f"{', '.join(map(str, own.others))})" if own.others else ""
    plan.notice = plan.notice or f"{reference}: built from its spec {own.file}{passed}"
    return Named(plan, known=True)


def require_environment(reference: str, base: Path, env_map: EnvMap, key: str,
                        by: Submission | None = None) -> None:
    """A short workspace name (`azureml:<name>:<version>`, `@latest`) found as plan_for finds
    it, without building anything; a LocalRunError naming it, what `by` (az ml job create, or a
    deployment's create) says of it, and the fixes when nothing here knows it (a curated
    `AzureML-` name is the service's to expand, as azure-ai-ml leaves it: its plan says what
    stands in)."""
    name = _name_version(reference).name
    if name.startswith(CURATED_PREFIX) or registered_environment(reference) is not None or \
            named_plan(reference, base, env_map).known:
        return
    from mlops.workspace.records import AssetKind
    from mlops.workspace.references import JOB, azure_refusal

    by = by or JOB
    refusal = azure_refusal(reference, AssetKind.ENVIRONMENT, by)
    raise LocalRunError(
        f"{key}: environment {reference} has no local stand-in: neither the local workspace, "
        f"the curated environments nor {env_map.named} knows it, and no environment spec of "
        f"that name is in the {by.subject.removeprefix('the ')}'s repository"
        f"{f' ({refusal})' if refusal else ''}. Register "
        f"it as az ml would (azml environment create -f <its YAML>), or add a line "
        f"'azureml:{name}: [<pip requirement>, ...]' to {env_map.named}")


def registered_environment(reference: str) -> Path | None:
    """The folder of the version the local workspace holds under `reference` (its spec and the
    files it names, as registered), None when it holds no environment of that name."""
    from mlops.workspace.records import AssetKind
    from mlops.workspace.references import local_path

    return local_path(reference, AssetKind.ENVIRONMENT)


def from_file(reference: str, base: Path, env_map: EnvMap, where: str) -> EnvPlan:
    """`environment: file:<spec>.yml`: the job's own environment, defined in that file."""
    path = (base / reference.removeprefix("file:")).resolve()
    try:
        data = read_yaml(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise LocalRunError(f"{where}: environment {reference}: cannot read {path} ({err})"
                            ) from None
    if not _is_environment(data):
        raise LocalRunError(f"{where}: environment {reference}: {path} is not an environment "
                            "spec (image:, build: or conda_file:)")
    return from_definition(data, path.parent, reference, env_map)


def _name_version(reference: str) -> EnvName:
    """`azureml:train-env@latest` -> (train-env, @, None); `azureml:train-env:3` -> (.., :, 3)."""
    text = reference.removeprefix("azureml:")
    match = re.match(r"^([^@:]+)(?:([@:])(.*))?$", text)
    if not match:
        return EnvName(text, "", None)
    name, sep, rest = match.groups()
    return EnvName(name, sep or "", rest if sep == ":" else None)
