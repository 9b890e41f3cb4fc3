"""The Python a Docker image's `python` is: what a job's command runs in an environment built from
a Dockerfile (or named by `image:`).

Read from what fixes it, in the order the build runs:
- the base image, where its tag names the version: the Python images (`python:3.9-slim`,
  `mcr.microsoft.com/devcontainers/python:3.12`, any `…/python:<major.minor>…`);
- `conda install python=X` (mamba, micromamba) into the image's base environment (a range,
  `"python<3.11"`, read as a conda file's python line: conda_python);
- `pyenv global X`, `uv python install X --default`;
- a virtual environment the final stage puts first on `PATH` (`ENV PATH=<env>/bin:$PATH`) or
  names in `VIRTUAL_ENV`: its Python is the one the RUN that made it asked for (`uv venv -p X`,
  `UV_PYTHON`, the one `uv python install` fetched; `python3.X -m venv`; `virtualenv -p`;
  `conda create -p|-n … python=X`).
Anything else (a Python compiled from source, deadsnakes' `python3.X` beside the system's)
leaves the image's own, which is not known here: None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mlops.environments.shell_words import shell_commands

VERSION = re.compile(r"^(?:c?python-?)?(\d+\.\d+)(?![\d])")
PYTHON_EXE = re.compile(r"^python(\d+\.\d+)$")
CONDA = ("conda", "mamba", "micromamba")


@dataclass
class _Build:
    """What the RUN lines read so far have made: the `python` on PATH, the environments by
    folder (their bin/ folder's parent), the Pythons uv fetched."""

    python: str | None
    envs: dict[str, str] = field(default_factory=dict)
    fetched: list[str] = field(default_factory=list)


def image_python(image: str | None) -> str | None:
    """`python:3.9-slim` -> 3.9: the version a Python image's tag names (none: None)."""
    if not image:
        return None
    bare = re.sub(r"@sha256:.*$", "", image)
    name, _, tag = bare.rpartition(":") if ":" in bare.rsplit("/", 1)[-1] else (bare, "", "")
    if name.rsplit("/", 1)[-1] != "python":
        return None
    match = re.match(r"^(?:\d+-)?(\d+\.\d+)(?!\d)", tag)  # devcontainers: 1-3.12-bookworm
    return match.group(1) if match else None


def build_python(image: str | None, commands: list[str], envs: dict[str, str]) -> str | None:
    """The major.minor (or exact) Python the final stage's `python` is, or None where the
    image's own is kept and not known here (`envs`: the final stage's ENV values)."""
    build = _Build(image_python(image))
    for command in commands:
        for words in shell_commands(command):
            _read(words, build, envs)
    for folder in _on_path(envs):
        for made, python in build.envs.items():
            if _same(folder, made):
                return python
    return build.python


def _on_path(envs: dict[str, str]) -> list[str]:
    """The folders whose bin/ comes first: VIRTUAL_ENV, then PATH's entries in order."""
    entries = [envs["VIRTUAL_ENV"]] if envs.get("VIRTUAL_ENV") else []
    entries += [entry.removesuffix("/").removesuffix("/bin")
                for entry in envs.get("PATH", "").split(":") if entry.rstrip("/").endswith("bin")]
    return [entry.rstrip("/") for entry in entries if entry]


def _read(words: list[str], build: _Build, envs: dict[str, str]) -> None:
    while words and (words[0] == "sudo" or re.match(r"^[A-Za-z_]\w*=", words[0])):
        if "=" in words[0]:  # NAME=value before a command: its variable for that command
            envs = {**envs, words[0].split("=", 1)[0]: words[0].split("=", 1)[1]}
        words = words[1:]
    if not words:
        return
    names = [word.rsplit("/", 1)[-1] for word in words]
    if names[0] in CONDA:
        _conda(words[1:], build)
    elif names[0] == "uv" and names[1:3] == ["python", "install"]:
        asked = [_minor(w) for w in words[3:] if not w.startswith("-") and _minor(w)]
        build.fetched += asked
        if asked and "--default" in words:
            build.python = asked[0]
    elif names[0] == "uv" and names[1:2] == ["venv"]:
        asked = _option(words[2:], ("-p", "--python")) or envs.get("UV_PYTHON")
        python = _minor(asked or "") or (build.fetched[-1] if build.fetched else build.python)
        build.envs[_folder(_positional(words[2:], ("-p", "--python")) or ".venv")] = python
    elif PYTHON_EXE.match(names[0]) and words[1:3] == ["-m", "venv"] and len(words) > 3:
        build.envs[_folder(words[-1])] = PYTHON_EXE.match(names[0]).group(1)
    elif names[0] == "virtualenv":
        asked = _option(words[1:], ("-p", "--python"))
        build.envs[_folder(_positional(words[1:], ("-p", "--python")) or "venv")] = \
            _minor(asked.rsplit("/", 1)[-1] if asked else "") or build.python
    elif names[0] == "pyenv" and names[1:2] == ["global"] and len(words) > 2:
        build.python = _minor(words[2]) or build.python


def _conda(args: list[str], build: _Build) -> None:
    """`conda create|install … python=X`: a new environment (-p/-n) or the base one's Python."""
    if not args or args[0] not in ("create", "install"):
        return
    asked = [_minor(conda_python(w) or "") for w in args if re.match(r"^python[=<>!]", w)]
    if not asked or not asked[-1]:
        return
    prefix = _option(args, ("-p", "--prefix"))
    name = _option(args, ("-n", "--name"))
    if prefix:
        build.envs[_folder(prefix)] = asked[-1]
    elif name:  # under whichever conda root: a PATH entry ending in envs/<name>
        build.envs[f"envs/{name}"] = asked[-1]
    elif args[0] == "install":
        build.python = asked[-1]


def conda_python(spec: str) -> str | None:
    """The Python a conda file's `python` line gives: its version (`python=3.9`, `python 3.9`,
    `python==3.9.5`, `python=3.10.*`, a build string after it dropped), or under an upper bound
    the newest release line it allows (`python>=3.8,<3.10`: 3.9; `python<3.11`: 3.10), as
    conda's solver prefers the newest; a lower bound alone gives its own version (the newest
    Python the channel holds is not known here)."""
    version = re.sub(r"^(\S+::)?python\s*", "", spec.strip())
    version = re.sub(r"^(=?=?[^=<>!,\s]+)[=\s].*$", r"\1", version)  # a build string
    if not re.search(r"[<>!,]", version):
        return version.lstrip("=").removesuffix(".*").strip() or None
    lower = upper = None
    for part in version.split(","):
        found = re.match(r"^\s*(<=|<|>=|>)\s*(\d+)\.(\d+)(?:\.(\d+))?", part)
        if not found:
            continue
        major, minor, patch = int(found[2]), int(found[3]), int(found[4] or 0)
        if found[1] == "<":
            upper = f"{major}.{minor - 1}" if patch == 0 else f"{major}.{minor}"
        elif found[1] == "<=":
            upper = f"{major}.{minor}"
        else:
            lower = f"{major}.{minor}" + (f".{patch}" if found[4] else "")
    return upper or lower


def _option(words: list[str], names: tuple[str, ...]) -> str | None:
    for index, word in enumerate(words):
        if word in names and index + 1 < len(words):
            return words[index + 1]
        for name in names:
            if name.startswith("--") and word.startswith(name + "="):
                return word.split("=", 1)[1]
    return None


def _positional(words: list[str], valued: tuple[str, ...]) -> str | None:
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in valued:
            skip = True
        elif not word.startswith("-"):
            return word
    return None


def _minor(text: str) -> str | None:
    """`3.12`, `3.12.1`, `python3.12`, `cpython-3.12`, `=3.12` -> 3.12."""
    match = VERSION.match(text.strip().lstrip("="))
    return match.group(1) if match else None


def _folder(path: str) -> str:
    return path.rstrip("/") or "/"


def _same(on_path: str, made: str) -> bool:
    """A PATH entry's folder is the environment a RUN made: the same absolute path, or ending in
    the relative path it was made at (from the WORKDIR, which is not read)."""
    relative = made.removeprefix("./")
    return on_path == made or (not made.startswith("/") and on_path.endswith("/" + relative))
