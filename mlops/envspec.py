"""What Python packages a spec's `environment:` stands for, read without Docker.

Every form a spec can use resolves to a plan (a pip requirement list and a Python version):
- `azureml:<name>@latest` / `azureml:<name>:<version>`: a workspace environment, found by name
  among this repo's environments/*.yml, else in assets/local-envs.yml (curated ones);
- `azureml://registries/<registry>/environments/<name>/labels/<l>|versions/<v>`: local-envs.yml;
- inline `image:` + `conda_file:`: the conda file (pip entries; conda packages through their
  PyPI names); `image:` alone: local-envs.yml by image name;
- `build: path:` (a Docker context): the requirements its Dockerfile installs with plain
  `pip install` (packages or `-r file`) or `conda env create -f file`.
A workspace name neither this repo nor the mapping file knows is looked up in the job's own
repository (the enclosing git root, else the spec's folder): MLOps templates keep the environment
spec they register beside their jobs. What cannot be read (an unknown name, a Dockerfile that
installs otherwise) runs in .venv with a one-line notice naming the mapping file.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .errors import LocalRunError
from .specs import ROOT

ENV_MAP = ROOT / "assets" / "local-envs.yml"
CURATED = ROOT / "assets" / "curated-envs.yml"  # generated: scripts/gen_curated_envs.py
# conda package names whose PyPI name differs; None: no PyPI equivalent (skipped, reported)
CONDA_TO_PYPI = {"pytorch": "torch", "py-xgboost": "xgboost", "matplotlib-base": "matplotlib",
                 "pytorch-lightning": "pytorch-lightning", "tensorflow-gpu": "tensorflow",
                 "py-opencv": "opencv-python", "opencv": "opencv-python", "pyyaml": "pyyaml",
                 "python-dateutil": "python-dateutil", "cudatoolkit": None, "cudnn": None,
                 "nccl": None, "mkl": None, "libgcc-ng": None, "openmpi": None, "mpi4py": "mpi4py",
                 "pip": None, "setuptools": None, "wheel": None, "r-base": None, "git": None}
PIP_INSTALL = re.compile(r"\bpip3?\s+install\b(.*)")


@dataclass
class EnvPlan:
    label: str  # what the spec named, for messages
    requirements: list[str] = field(default_factory=list)  # pip lines ("-r" already expanded)
    python: str | None = None  # "3.10" when the environment names one
    notice: str | None = None  # why this machine runs it in .venv (or only partly)
    skipped: list[str] = field(default_factory=list)  # conda packages with no PyPI equivalent


def _load_map(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text()) or {} if path.is_file() else {}
    except yaml.YAMLError as err:
        raise LocalRunError(f"{path}: not valid YAML ({err})") from None
    if not isinstance(data, dict):
        raise LocalRunError(f"{path}: expected a mapping of environments to packages")
    return data


class EnvMap(dict):
    """assets/local-envs.yml (or the file given) over the generated catalogue of every curated
    environment (assets/curated-envs.yml); keys match without regard to case, as Azure's
    environment names do."""

    def __init__(self, path: Path = ENV_MAP, curated: Path = CURATED):
        self.file = Path(path)
        data = {**_load_map(Path(curated)), **_load_map(self.file)}
        super().__init__({str(k).lower(): v for k, v in data.items()})

    def get(self, key, default=None):
        return super().get(str(key).lower(), default)


def _conda_spec(entry: str) -> str | None:
    """`numpy=1.21.2`, `conda-forge::numpy>=1.2`, `numpy 1.21.*`, `numpy=1.21=py38_0` -> a pip
    requirement (conda's `=1.21` means any 1.21.x); None for packages PyPI does not have."""
    entry = entry.split("::")[-1].strip()
    match = re.match(r"^([A-Za-z0-9_.\-]+)\s*(.*)$", entry)
    if not match:
        return None
    name, rest = match.group(1).lower(), match.group(2).replace(" ", "")
    pypi = CONDA_TO_PYPI.get(name, name)
    if pypi is None:
        return None
    if rest.startswith("=") and not rest.startswith("=="):
        version = rest[1:].split("=")[0]  # a second `=` starts the build string
        rest = f"=={version}" if version.count(".") >= 2 or "*" in version else \
            f"=={version}.*"
    elif rest[:1].isdigit():
        rest = "==" + rest.split("=")[0]
    return pypi + rest


def read_conda(path: Path, plan: EnvPlan) -> None:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise LocalRunError(f"{plan.label}: cannot read conda file {path} ({err})") from None
    read_conda_data(data, path.parent, plan)


def read_conda_data(data: dict, base: Path, plan: EnvPlan) -> None:
    """pip entries as they are; conda packages by their PyPI names; python's version noted."""
    for entry in data.get("dependencies") or []:
        if isinstance(entry, dict):
            for line in entry.get("pip") or []:
                read_requirement_line(str(line), base, plan)
            continue
        text = str(entry)
        if re.match(r"^(conda-forge::)?python([=<>\s]|$)", text):
            plan.python = re.sub(r"^[^0-9]*", "", text).split("=")[0].strip() or None
            continue
        requirement = _conda_spec(text)
        if requirement:
            plan.requirements.append(requirement)
        elif text.split("=")[0].strip() not in ("pip", "setuptools", "wheel"):
            plan.skipped.append(text)


def read_requirement_line(line: str, base: Path, plan: EnvPlan) -> None:
    line = line.split(" #")[0].strip()
    if not line or line.startswith("#"):
        return
    if line.startswith(("-r ", "--requirement ")):
        read_requirements(base / line.split(maxsplit=1)[1], plan)
    else:
        plan.requirements.append(line)


def read_requirements(path: Path, plan: EnvPlan) -> None:
    if not path.is_file():
        raise LocalRunError(f"{plan.label}: requirements file {path} does not exist")
    for line in path.read_text().splitlines():
        read_requirement_line(line, path.parent, plan)


def read_dockerfile(context: Path, dockerfile: str, plan: EnvPlan) -> None:
    path = context / dockerfile
    if not path.is_file():
        raise LocalRunError(f"{plan.label}: no Dockerfile at {path}")
    text = re.sub(r"\\\n", " ", path.read_text())
    understood = False
    for line in text.splitlines():
        if not line.strip().upper().startswith("RUN"):
            continue
        for command in re.split(r"&&|;", line.strip()[3:]):
            understood |= _docker_command(command.strip(), context, plan)
    if not understood:
        plan.notice = f"{path} installs nothing with plain pip or a conda file"


def _docker_command(command: str, context: Path, plan: EnvPlan) -> bool:
    conda = re.search(r"conda\s+env\s+(?:create|update)\b.*?(?:-f|--file)\s+(\S+)", command)
    if conda:
        read_conda(context / Path(conda.group(1)).name, plan)
        return True
    pip = PIP_INSTALL.search(command)
    if not pip:
        return False
    words = shlex.split(pip.group(1))
    for index, word in enumerate(words):
        if word in ("-r", "--requirement") and index + 1 < len(words):
            read_requirements(context / Path(words[index + 1]).name, plan)
        elif not word.startswith("-") and (index == 0 or words[index - 1] not in
                                            ("-r", "--requirement", "-c", "-i",
                                             "--index-url", "--extra-index-url")):
            plan.requirements.append(word)
    return True


def image_key(image: str) -> str:
    """`docker.io/library/python:3.11-slim` -> `image:python`: registry default and tag dropped."""
    name = re.sub(r"@sha256:.*$", "", str(image))
    name = re.sub(r":[^/:]+$", "", name)
    for prefix in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        name = name.removeprefix(prefix)
    return "image:" + name.removeprefix("library/")


def from_map(key: str, label: str, env_map: EnvMap) -> EnvPlan:
    """A curated, registry or image-only environment, through assets/local-envs.yml (exact
    keys first, then the longest key ending in `/` that prefixes this one)."""
    entry = env_map.get(key)
    if entry is None:
        prefixes = [k for k in env_map if k.endswith("/") and key.lower().startswith(k)]
        entry = env_map[max(prefixes, key=len)] if prefixes else None
    if entry is None:
        return EnvPlan(label, notice=f"{label} has no local stand-in (add '{key}:' to "
                                     f"{env_map.file}); running in .venv")
    entry = {"pip": entry} if isinstance(entry, list) else dict(entry)
    plan = EnvPlan(label, python=str(entry["python"]) if entry.get("python") else None)
    for line in entry.get("pip") or []:
        plan.requirements.append(str(line))
    return plan


def from_definition(definition: dict, base: Path, label: str, env_map: EnvMap) -> EnvPlan:
    plan = EnvPlan(label)
    conda = definition.get("conda_file")
    build = definition.get("build") or {}
    if isinstance(conda, dict):  # a conda file written inline in the spec
        read_conda_data(conda, base, plan)
    elif conda:
        read_conda((base / str(conda).removeprefix("file:")).resolve(), plan)
    elif build.get("path"):
        context = (base / str(build["path"])).resolve()
        read_dockerfile(context, str(build.get("dockerfile_path") or "Dockerfile"), plan)
    elif definition.get("image"):
        return from_map(image_key(definition["image"]), label, env_map)
    return plan


def repo_environment(name: str) -> tuple[dict, Path] | None:
    """A workspace environment this repo defines (environments/*.yml), by its name."""
    for path in sorted((ROOT / "environments").glob("*.yml")):
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError:
            continue
        is_spec = isinstance(data, dict) and any(k in data for k in ("image", "build",
                                                                     "conda_file"))
        if is_spec and data.get("name") == name:  # (a conda file has a name: too)
            return data, path.parent
    return None


SKIPPED_DIRS = {".git", ".venv", "venv", "node_modules", "runs", "mlruns", "__pycache__", ".cache"}
MAX_SCANNED = 5000  # YAML files read when looking for an environment spec in a job's repository


def search_root(base: Path) -> Path:
    """The job's own repository: the enclosing git root, else the spec's folder."""
    for folder in (base, *base.parents):
        if (folder / ".git").exists():
            return folder
    return base


def _yaml_files(root: Path):
    count = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith("."))
        for name in sorted(files):
            if name.endswith((".yml", ".yaml")):
                count += 1
                if count > MAX_SCANNED:
                    return
                yield Path(folder) / name


def job_repo_environment(name: str, version: str | None, base: Path) -> tuple[dict, Path] | None:
    """An environment spec with `name:` in the job's own repository, as MLOps templates keep it
    beside the jobs and register it once (`az ml environment create --file`); a spec whose
    `version:` matches wins over one without."""
    found = []
    for path in _yaml_files(search_root(base.resolve())):
        try:
            text = path.read_text(errors="replace")
            if name not in text:
                continue
            data = yaml.safe_load(text)
        except (OSError, yaml.YAMLError):
            continue
        if _is_environment(data) and str(data.get("name")) == name:
            found.append((str(data.get("version", "")) == (version or "-"), path, data))
    if not found:
        return None
    _, path, data = max(found, key=lambda f: f[0])
    return data, path


def _is_environment(data) -> bool:
    return isinstance(data, dict) and any(k in data for k in ("image", "build", "conda_file")) \
        and not any(k in data for k in ("command", "jobs", "trial", "type"))


def plan_for(environment, base: Path, env_map: EnvMap, where: str = "") -> EnvPlan:
    """The plan for any form of `environment:` (see the module docstring)."""
    if environment is None or environment == "":
        return EnvPlan("no environment")
    if isinstance(environment, dict):
        return from_definition(environment, base, f"the environment of {where or 'the job'}",
                               env_map)
    reference = str(environment)
    registry = re.match(r"^azureml://registries/([^/]+)/environments/([^/]+)", reference)
    if registry:
        key = f"azureml://registries/{registry.group(1)}/environments/{registry.group(2)}"
        return from_map(key, reference, env_map)
    name, _, version = _name_version(reference)
    local = repo_environment(name)
    if local is not None:
        return from_definition(local[0], local[1], reference, env_map)
    plan = from_map(f"azureml:{name}", reference, env_map)
    if plan.notice is None:
        return plan
    own = job_repo_environment(name, version, base)
    if own is None:
        return plan
    data, path = own
    plan = from_definition(data, path.parent, reference, env_map)
    plan.notice = plan.notice or f"{reference}: built from its spec {path}"
    return plan


def _name_version(reference: str) -> tuple[str, str, str | None]:
    """`azureml:train-env@latest` -> (train-env, @, None); `azureml:train-env:3` -> (.., :, 3)."""
    text = reference.removeprefix("azureml:")
    match = re.match(r"^([^@:]+)(?:([@:])(.*))?$", text)
    if not match:
        return text, "", None
    name, sep, rest = match.groups()
    return name, sep or "", rest if sep == ":" else None
