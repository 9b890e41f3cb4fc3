"""A Dockerfile's package installs, in the order its build runs them.

The instructions come from dockerfile-parse (line continuations, comments inside them, stages,
the ARG and ENV values each line sees); the final stage is followed back through the stages it
is built `FROM`. Each RUN's command (shell form, exec form, or a heredoc script) is split as a
shell splits it (shlex: quotes, `&&`/`||`/`;`/`|` between commands, redirections), and every
`pip install`, `pip3 install`, `python -m pip install`, `uv pip install` in it becomes an
install with its flags, as well as `conda env create|update -f <file>` (and mamba's), the files
they read named by their path in the image (a relative one from the RUN's WORKDIR). The COPY and
ADD lines that take files from the build context are kept, so those paths can be traced back
to the context (build_context.py). What else a RUN does (apt-get, R, curl | sh, a `COPY`'d
wheel built in the image) is not read.
"""

from __future__ import annotations

import dataclasses
import io
import json
import posixpath
import re
import shlex
from dataclasses import dataclass, field

from dockerfile_parse import DockerfileParser

from mlops.environments.build_context import Copy, copied
from mlops.environments.shell_words import shell_commands, substituted

# pip install's options that take a value, and where the value goes
VALUED = {"-r": "requirements", "--requirement": "requirements", "-c": "constraints",
          "--constraint": "constraints", "-i": "indexes", "--index-url": "indexes",
          "--extra-index-url": "indexes", "-f": "indexes", "--find-links": "indexes"}
IGNORED_VALUED = {"-t", "--target", "--prefix", "--root", "--src", "--cache-dir", "--log",
                  "--progress-bar", "--python-version", "--platform", "--implementation",
                  "--abi", "--global-option", "--install-option", "--config-settings", "-C",
                  "--upgrade-strategy", "--trusted-host", "--proxy", "--timeout", "--retries",
                  "--python", "-p", "--exists-action", "--no-binary", "--only-binary",
                  "--report", "--root-user-action", "--index-strategy", "--extra-index",
                  "--resolution", "--prerelease"}
PIP = re.compile(r"^pip(\d+(\.\d+)*)?$")


@dataclass(frozen=True, kw_only=True)
class PipInstall:
    """One `pip install`: its packages and requirement files, in its own words, and its flags."""

    packages: tuple[str, ...] = ()
    requirements: tuple[str, ...] = ()  # -r files
    constraints: tuple[str, ...] = ()  # -c files
    indexes: tuple[str, ...] = ()  # "--index-url URL" and the like, as pip would read them
    no_deps: bool = False
    upgrade: bool = False
    pre: bool = False


@dataclass(frozen=True)
class CondaFile:
    """`conda env create|update -f <path>`."""

    path: str


@dataclass(frozen=True, kw_only=True)
class Installs:
    """What a Dockerfile's final stage is built FROM and installs, in order; its RUN commands
    (those of the stages it is built on first) and the ENV values it ends with."""

    image: str | None  # None: none, or named through a variable not known here
    steps: list[PipInstall | CondaFile] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    envs: dict[str, str] = field(default_factory=dict)
    copies: list[Copy] = field(default_factory=list)  # from the build context, in order


@dataclass(kw_only=True)
class _Stage:
    image: str | None
    name: str | None
    commands: list[str] = field(default_factory=list)
    envs: dict[str, str] = field(default_factory=dict)  # ENV values at its last instruction
    workdir: str = "/"
    workdirs: list[str] = field(default_factory=list)  # each command's WORKDIR
    copies: list[Copy] = field(default_factory=list)
    imports: list[tuple[int, str]] = field(default_factory=list)  # COPY --from=<stage>, where


@dataclass(kw_only=True)
class _Runs:
    """The RUN commands whose installs an image holds, in build order, with their WORKDIRs, and
    the copies from the build context they read."""

    commands: list[str] = field(default_factory=list)
    workdirs: list[str] = field(default_factory=list)
    copies: list[Copy] = field(default_factory=list)


def read_installs(text: str) -> Installs:
    """The final stage's base image and installs (its own, after those of the stages below it
    when it is built FROM one of them)."""
    stages = _stages(text)
    if not stages:
        return Installs(image=None)
    named = {stage.name: stage for stage in stages if stage.name}
    chain = _chain(stages[-1], named)
    image = chain[0].image
    runs = _Runs()
    for stage in chain:
        _add_runs(stage, named, runs, {id(s) for s in chain})
    envs = {name: value for stage in chain for name, value in stage.envs.items()}
    steps = [_from_workdir(step, workdir)
             for command, workdir in zip(runs.commands, runs.workdirs, strict=True)
             for step in command_installs(command)]
    return Installs(image=image if image and "$" not in image else None,
                    commands=runs.commands, steps=steps, envs=envs, copies=runs.copies)


def _chain(stage: _Stage, named: dict[str, _Stage]) -> list[_Stage]:
    """The stage and the stages it is built FROM, the first one first."""
    chain = [stage]
    while chain[0].image in named and named[chain[0].image] not in chain:
        chain.insert(0, named[chain[0].image])
    return chain


def _add_runs(stage: _Stage, named: dict[str, _Stage], runs: _Runs, seen: set[int]) -> None:
    """The stage's RUN commands into `runs`, and where it copies files from another stage
    (`COPY --from=<stage> /opt/conda /opt/conda`), that stage's (and those it is built FROM)
    first: what they installed comes with the files."""
    imports = dict(stage.imports)
    for index in range(len(stage.commands) + 1):
        below = named.get(imports.get(index, ""))
        if below is not None and id(below) not in seen:
            for earlier in _chain(below, named):
                seen.add(id(earlier))
                _add_runs(earlier, named, runs, seen)
        if index < len(stage.commands):
            runs.commands.append(stage.commands[index])
            runs.workdirs.append(stage.workdirs[index])
    runs.copies += stage.copies


def _from_workdir(step: PipInstall | CondaFile, workdir: str) -> PipInstall | CondaFile:
    """The files an install reads, by their path in the image (a relative one is the RUN's
    WORKDIR's)."""
    if isinstance(step, CondaFile):
        return CondaFile(posixpath.join(workdir, step.path))
    return dataclasses.replace(
        step, requirements=tuple(posixpath.join(workdir, f) for f in step.requirements),
        constraints=tuple(posixpath.join(workdir, f) for f in step.constraints))


def _stages(text: str) -> list[_Stage]:
    # one more line: an instruction continued past the file's last line still ends there
    parser = DockerfileParser(fileobj=io.BytesIO(text.encode() + b"\n"))
    structure, contexts = parser.structure, parser.context_structure
    stages: list[_Stage] = []
    before_from: dict[str, str] = {}  # ARGs above the first FROM: what FROM lines can name
    index = 0
    while index < len(structure):
        instruction, value = structure[index]["instruction"], structure[index]["value"]
        variables = {**contexts[index].args, **contexts[index].envs}
        if instruction == "ARG" and not stages:
            before_from.update(contexts[index].args)
        elif instruction == "FROM":
            words = [w for w in value.split() if not w.startswith("--")]
            alias = words[2] if len(words) > 2 and words[1].lower() == "as" else None
            image = substituted(words[0], {**before_from, **variables}) if words else None
            below = [stage.workdir for stage in stages if stage.name and stage.name == image]
            stages.append(_Stage(image=image, name=alias, workdir=(below or ["/"])[-1]))
        elif instruction == "ENV" and stages:
            stages[-1].envs = dict(contexts[index].envs)
        elif instruction == "WORKDIR" and stages:
            stages[-1].workdir = posixpath.join(stages[-1].workdir,
                                                substituted(value.strip(), variables))
        elif instruction in ("COPY", "ADD") and stages:
            stages[-1].copies += copied(substituted(value, variables), stages[-1].workdir)
            source = re.search(r"--from=(\S+)", value)
            if source:
                stages[-1].imports.append((len(stages[-1].commands), source.group(1)))
        elif instruction == "RUN" and stages:
            command, index = _run_command(structure, index)
            stages[-1].commands.append(substituted(command, variables))
            stages[-1].workdirs.append(stages[-1].workdir)
        index += 1
    return stages


def _run_command(structure: list, index: int) -> tuple[str, int]:
    """A RUN's shell command, and the index of its last entry (a heredoc's body follows it)."""
    value = re.sub(r"^(\s*--[\w-]+(=\S*)?\s+)*", "", structure[index]["value"])
    heredoc = re.match(r"^<<-?\s*['\"]?(\w+)['\"]?\s*(.*)$", value)
    if heredoc:
        body = []
        while index + 1 < len(structure) and \
                structure[index + 1]["content"].strip() != heredoc.group(1):
            index += 1
            body.append(structure[index]["content"].rstrip("\n"))
        return heredoc.group(2) + "\n" + "\n".join(body), index + 1
    if value.startswith("["):
        try:
            words = json.loads(value)
        except ValueError:
            return value, index
        if isinstance(words, list) and all(isinstance(w, str) for w in words):
            shell = len(words) > 2 and words[1] == "-c" and words[0].endswith("sh")
            return words[2] if shell else shlex.join(words), index
    return value, index


def command_installs(command: str) -> list[PipInstall | CondaFile]:
    found: list[PipInstall | CondaFile] = []
    for words in shell_commands(command):
        args = _pip_arguments(words)
        if args is not None:
            found.append(pip_install(args))
            continue
        conda = _conda_file(words)
        if conda:
            found.append(CondaFile(conda))
    return found


def _pip_arguments(words: list[str]) -> list[str] | None:
    """The arguments after `install` when the words run pip's (or uv's pip) install."""
    names = [word.rsplit("/", 1)[-1] for word in words]
    for index, name in enumerate(names):
        if PIP.match(name):  # pip, pip3, /opt/conda/bin/pip, python -m pip
            after = index + 1
        elif name == "uv" and names[index + 1:index + 2] == ["pip"]:
            after = index + 2
        else:
            continue
        while after < len(words) and words[after].startswith("-"):
            after += 1  # pip's own options before the command (--no-cache-dir, -q)
        if after < len(words) and words[after] == "install":
            return words[after + 1:]
    return None


def pip_install(args: list[str]) -> PipInstall:
    """`pip install`'s arguments read as pip reads them."""
    values: dict[str, list[str]] = {"packages": [], "requirements": [], "constraints": [],
                                    "indexes": []}
    flags: set[str] = set()
    index = 0
    while index < len(args):
        word = args[index]
        option, _, attached = word.partition("=") if word.startswith("--") else (word, "", "")
        if option in VALUED or option in IGNORED_VALUED:
            value = attached or (args[index + 1] if index + 1 < len(args) else "")
            index += 1 if attached else 2
            if option in VALUED and value:  # none: pip refuses the command
                kind = VALUED[option]
                values[kind].append(f"{option} {value}" if kind == "indexes" else value)
            continue
        if word in ("-U", "--upgrade") or re.match(r"^-[qvU]+$", word) and "U" in word:
            flags.add("upgrade")
        elif word in ("--no-deps", "--pre"):
            flags.add(word[2:].replace("-", "_"))
        elif word in ("-e", "--editable"):
            pass  # its value is the package: read as one
        elif not word.startswith("-"):
            values["packages"].append(word)
        index += 1
    return PipInstall(**{k: tuple(v) for k, v in values.items()}, no_deps="no_deps" in flags,
                      upgrade="upgrade" in flags, pre="pre" in flags)


def _conda_file(words: list[str]) -> str | None:
    """The file of `conda env create|update -f <file>` (mamba, micromamba likewise)."""
    names = [word.rsplit("/", 1)[-1] for word in words]
    for index, name in enumerate(names):
        if name in ("conda", "mamba", "micromamba") and \
                names[index + 1:index + 2] == ["env"] and \
                names[index + 2:index + 3] in (["create"], ["update"]):
            rest = words[index + 3:]
            for at, word in enumerate(rest):
                if word in ("-f", "--file") and at + 1 < len(rest):
                    return rest[at + 1]
                if word.startswith("--file="):
                    return word.split("=", 1)[1]
    return None
