"""Reading the files an environment is built from, as Azure's image build reads them: conda
files (pip entries as they are, conda packages by their PyPI names, the Python version),
requirements files (`-r` followed) and Dockerfiles (each `pip install` and `conda env create` of
their RUN lines an install step of its own, and the image they start `FROM`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from mlops.environments import steps
from mlops.environments.build_context import in_context
from mlops.environments.docker_python import build_python, conda_python
from mlops.environments.dockerfiles import CondaFile, PipInstall, read_installs
from mlops.errors import LocalRunError
from mlops.specs import SpecData, read_yaml

# conda package names whose PyPI name differs; None: no PyPI equivalent (skipped, reported)
CONDA_TO_PYPI = {"pytorch": "torch", "py-xgboost": "xgboost", "matplotlib-base": "matplotlib",
                 "pytorch-lightning": "pytorch-lightning", "tensorflow-gpu": "tensorflow",
                 "py-opencv": "opencv-python", "opencv": "opencv-python", "pyyaml": "pyyaml",
                 "python-dateutil": "python-dateutil", "cudatoolkit": None, "cudnn": None,
                 "nccl": None, "mkl": None, "libgcc-ng": None, "openmpi": None, "mpi4py": "mpi4py",
                 "r-base": None, "git": None}
# conda packages PyPI has no project of, and what conda installs for them on Azure's image: left
# out as read, with a note (the rule is general: any other conda package the resolver finds no
# project of is left out too, activation.py). .venv's torch build stands in for PyTorch's CUDA or
# CPU-only build whichever the selector asks (resolve.GPU_STACK).
CONDA_ONLY = {
    "pytorch-cuda": "the CUDA runtime libraries of PyTorch's CUDA build, which it selects",
    "pytorch-mutex": "the selector of PyTorch's CUDA or CPU-only build",
    "cpuonly": "the selector of PyTorch's CPU-only build",
    "cudatoolkit": "the CUDA toolkit's runtime libraries",
    "cuda-runtime": "the CUDA runtime libraries",
    "cudnn": "NVIDIA's cuDNN libraries",
    "nccl": "NVIDIA's NCCL libraries",
    "magma-cuda": "MAGMA's CUDA libraries",
    "openssl": "the OpenSSL libraries",
}
# what every conda environment has beside its Python: conda's pip, which brings setuptools and
# wheel (for an old Python, their releases for it: setuptools then still ships pkg_resources)
CONDA_BASE = ("pip", "setuptools", "wheel")
# a pip entry naming a requirements or constraints file: -r f, -rf, --requirement f|=f, -c, ...
FILE_OPTION = re.compile(r"^(-r|-c|--requirement|--constraint)(?:\s+|=|(?<=-[rc]))(\S+)")


@dataclass(kw_only=True)
class EnvPlan:
    label: str  # what the spec named, for messages
    requirements: list[str] = field(default_factory=list)  # pip lines ("-r" already expanded)
    python: str | None = None  # "3.10" when the environment names one
    notice: str | None = None  # why this machine runs it in .venv (or only partly)
    undefined: str = ""  # the mapping-file key that would define it, when nothing does
    skipped: list[str] = field(default_factory=list)  # conda packages with no PyPI equivalent
    conda: list[str] = field(default_factory=list)  # requirement lines read from conda entries
    variables: dict[str, str] = field(default_factory=dict)  # a conda file's `variables:`
    complete: bool = False  # `requirements` are the whole package set Azure builds (a conda
    # file's, a curated environment's from the catalogue), not a stand-in known in part


def conda_only_note(line: str) -> str:
    """What conda installs on Azure's image for a conda package PyPI has no project of."""
    name = re.split(r"[\s=<>!~\[;]", line.split("::")[-1].strip(), maxsplit=1)[0].lower()
    what = CONDA_ONLY.get(name)
    return f"conda installs it on Azure's image{f' ({what})' if what else ''}"


def _conda_spec(entry: str) -> str | None:
    """`numpy=1.21.2`, `conda-forge::numpy>=1.2`, `numpy 1.21.*`, `numpy=1.21=py38_0`,
    `numpy 1.21.2 py38h_0` -> a pip requirement (conda's `=1.21` means any 1.21.x; a build
    string dropped); None for packages PyPI does not have."""
    entry = entry.split("::")[-1].strip()
    match = re.match(r"^([A-Za-z0-9_.\-]+)\s*(.*)$", entry)
    if not match:
        return None
    words = match.group(2).split()
    if len(words) == 2 and re.match(r"^[\d*]", words[0]) and re.match(r"^\w", words[1]):
        words = words[:1]  # `name version build`: the build string is conda's alone
    name, rest = match.group(1).lower(), "".join(words)
    pypi = CONDA_TO_PYPI.get(name, name)
    if pypi is None or name in CONDA_ONLY:
        return None
    if rest.startswith("=") and not rest.startswith("=="):
        version = rest[1:].split("=")[0]  # a second `=` starts the build string
        rest = f"=={version}" if version.count(".") >= 2 or "*" in version else \
            f"=={version}.*"
    elif rest[:1].isdigit():
        rest = "==" + rest.split("=")[0]
    if re.search(r"\d\*$", rest):  # conda's `1.2*`: any 1.2.x
        rest = rest[:-1] + ".*"
    return pypi + rest


def _load_conda(path: Path, plan: EnvPlan) -> SpecData:
    try:
        return read_yaml(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise LocalRunError(f"{plan.label}: cannot read conda file {path} ({err})") from None


def read_conda(path: Path, plan: EnvPlan) -> None:
    """A conda file of a Docker build context, read beside the files its build copied."""
    read_conda_data(_load_conda(path, plan), path.parent, plan)


def read_environment_conda(conda: str | SpecData, base: Path, plan: EnvPlan) -> None:
    """An environment definition's `conda_file` (a path from `base`, or written inline) as
    Azure's image build has it: its contents alone (azure-ai-ml sends them as a string), written
    into the build's own folder, where conda runs pip; a file its pip entries name is not there."""
    if isinstance(conda, dict):
        data, folder = conda, base
    else:
        path = (base / str(conda).removeprefix("file:")).resolve()
        data, folder = _load_conda(path, plan), path.parent
    for entry in dependencies(data, plan.label):
        for line in entry.get("pip") or [] if isinstance(entry, dict) else []:
            refuse_file_option(str(line), plan.label)
    read_conda_data(data, folder, plan, phases=True)


def dependencies(data: SpecData, label: str) -> list:
    """A conda file's `dependencies:`, a list, and each `pip:` in it a list. conda reads a
    string in their place one character at a time, each a package (`python=3.11`: 'p', 'y',
    ..., '.'), so Azure's image build fails on it; here '.' would install the folder."""
    found = data.get("dependencies") or []
    pips = [entry.get("pip") for entry in found if isinstance(entry, dict)] \
        if isinstance(found, list) else []
    if isinstance(found, list) and all(p is None or isinstance(p, list) for p in pips):
        return found
    where = "dependencies:" if not isinstance(found, list) else "pip: under dependencies:"
    raise LocalRunError(f"{label}: the conda file's {where} is not a list: conda reads a string "
                        "there one character at a time, each as a package, and Azure's image "
                        "build fails. Fix: write it as a YAML list, one package an item "
                        "(- python=3.11)")


def refuse_file_option(line: str, label: str) -> None:
    """A pip entry `-r file` or `-c file` (a local path, not a URL) of an environment's conda
    file: Azure's image build fails on it, as pip cannot open the file there."""
    match = FILE_OPTION.match(line.split(" #")[0].strip())
    if match is None or re.match(r"^https?://", match.group(2), re.IGNORECASE):
        return
    raise LocalRunError(
        f"{label}: its conda file's pip entry '{line.strip()}' names a file Azure's image build "
        f"does not have: the environment carries the conda file's contents alone, and conda "
        f"runs pip beside that copy, where {match.group(2)} is not, so the build fails (pip: "
        f"Could not open requirements file). Fix: list those packages in the conda file's pip "
        f"section, or build the environment from a Docker context (build: path:) that holds "
        f"the file")


def read_conda_data(data: SpecData, base: Path, plan: EnvPlan, *, phases: bool = False) -> None:
    """pip entries as they are; conda packages by their PyPI names; python's version noted;
    `variables:`, which conda sets when it activates the environment (as Azure's image runs
    the job: activated). `phases`: as Azure's image build creates an environment's conda file
    (conda env create): conda installs the conda packages (and pip, setuptools, wheel), then
    pip installs the pip section into that (`pip install -U -r`), keeping what conda installed
    where it satisfies and replacing what conflicts: two installs (steps.py), so the pip
    section's packages come at their newest and an unpinned conda package yields to them."""
    variables = data.get("variables") or {}
    if isinstance(variables, dict):
        plan.variables.update({str(k): "" if v is None else str(v) for k, v in variables.items()})
    pip = EnvPlan(label=plan.label) if phases else plan  # the pip section's lines
    for entry in dependencies(data, plan.label):
        if isinstance(entry, dict):
            for line in entry.get("pip") or []:
                read_requirement_line(str(line), base, pip)
            continue
        text = str(entry)
        if re.match(r"^(conda-forge::)?python([=<>!\s]|$)", text):
            plan.python = conda_python(text)
            continue
        requirement = _conda_spec(text)
        if requirement:
            plan.requirements.append(requirement)
            plan.conda.append(requirement)
        elif re.split(r"[\s=<>!~]", text.split("::")[-1], maxsplit=1)[0] != "pip":
            plan.skipped.append(text)
    own = [line for line in plan.conda if _named(line) not in CONDA_BASE]
    if pip is not plan and own and pip.requirements:  # conda's install, then pip's
        with_conda_base(plan)
        plan.requirements += [steps.step_line(upgrade=True), *pip.requirements]
        return
    plan.requirements += pip.requirements if pip is not plan else []  # one install
    with_conda_base(plan)


def _named(line: str) -> str:
    return re.split(r"[\s=<>~!\[;]", line, maxsplit=1)[0].lower()


def with_conda_base(plan: EnvPlan, *, image: bool = False) -> None:
    """pip, setuptools and wheel, as every conda environment with pip has them, unless named:
    with the conda file's own packages (its install), or, for an `image` (a curated or mapped
    one), with what it holds before any install of its Dockerfile (steps.py)."""
    named = {_named(line) for line in plan.requirements}
    base = [name for name in CONDA_BASE if name not in named]
    plan.requirements = steps.into_first(plan.requirements, base) if image else \
        plan.requirements + base


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


def dockerfile_in(context: Path, dockerfile: str) -> Path:
    """build.dockerfile_path within its build context: relative to the context's root, a
    leading '/' included (az ml environment create's --dockerfile-path defaults to
    `/Dockerfile`, the context's own Dockerfile)."""
    return context / (dockerfile.lstrip("/") or "Dockerfile")


def read_dockerfile(context: Path, dockerfile: str, plan: EnvPlan) -> str | None:
    """The Dockerfile's installs into `plan`, each an install step of its own, in the order its
    build runs them (steps.py; dockerfiles.py reads them); returns the image its final stage
    starts FROM."""
    path = dockerfile_in(context, dockerfile)
    if not path.is_file():
        raise LocalRunError(f"{plan.label}: no Dockerfile at {path}")
    try:
        found = read_installs(path.read_text(errors="replace"))
    except (OSError, ValueError) as err:
        raise LocalRunError(f"{plan.label}: cannot read {path} ({err})") from None
    for install in found.steps:
        if isinstance(install, CondaFile):
            plan.requirements.append(steps.step_line())
            read_conda(in_context(install.path, found.copies, context), plan)
        else:
            _pip_step(install, lambda name: in_context(name, found.copies, context), plan)
    if not found.steps:
        plan.notice = f"{path} installs nothing with plain pip or a conda file"
    plan.python = plan.python or build_python(found.image, found.commands, found.envs)
    return found.image


def _pip_step(install: PipInstall, context: Callable[[str], Path], plan: EnvPlan) -> None:
    """One `pip install` as an install step: its flags, its packages and requirement files (the
    build context's files the COPY lines put at their paths), its constraints."""
    plan.requirements.append(steps.step_line(no_deps=install.no_deps, upgrade=install.upgrade,
                                             pre=install.pre))
    plan.requirements += list(install.indexes)
    for name in install.requirements:
        read_requirements(context(name), plan)
    for name in install.constraints:
        held = EnvPlan(label=plan.label)
        read_requirements(context(name), held)
        plan.requirements += [f"{steps.CONSTRAINT} {line}" for line in held.requirements
                              if not line.startswith("-")]
    plan.requirements += list(install.packages)


def image_key(image: str) -> str:
    """`docker.io/library/python:3.11-slim` -> `image:python`: registry default and tag dropped."""
    name = re.sub(r"@sha256:.*$", "", str(image))
    name = re.sub(r":[^/:]+$", "", name)
    for prefix in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        name = name.removeprefix(prefix)
    return "image:" + name.removeprefix("library/")
