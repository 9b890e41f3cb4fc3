"""Load Azure ML YAML specs with line numbers, and name problems found in them."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from mlops import yaml_limits
from mlops.errors import LocalRunError
from mlops.project import project

ROOT = Path(__file__).resolve().parents[1]  # the tool's own checkout (its tests, its scripts)
SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"  # ship with the tool
SPEC_FOLDERS = ("jobs", "components", "environments", "assets", "endpoints")
REF = re.compile(r"\$\{\{\s*([^}]*?)\s*\}\}")  # ${{inputs.x}} and friends
# A YAML mapping as a spec holds it (a job, a component, a node, an environment definition):
# keys are the spec's, values whatever YAML gave
SpecData = dict[str, object]
# What azure-ai-ml loads a job or component as: its `type:` (default command), whatever its
# $schema says (Job._resolve_cls_and_type compares the type exactly).
JOB_TYPES = {"command": "commandJob", "sweep": "sweepJob", "pipeline": "pipelineJob",
             "spark": "sparkJob", "automl": "autoMLJob", "import": "importJob",
             "finetuning": "fineTuningJob", "distillation": "distillationJob"}
COMPONENT_TYPES = {"command": "commandComponent", "pipeline": "pipelineComponent",
                   "spark": "sparkComponent", "parallel": "parallelComponent"}
# Every kind a $schema URL may name, by its last segment as azuremlschemas publishes it
# (commandJob.schema.json) or as azure-ai-ml's own pre-GA configs spell it (SparkJob.json)
SCHEMA_KINDS = {kind.lower(): kind for kind in (
    *JOB_TYPES.values(), *COMPONENT_TYPES.values(), "environment", "amlCompute", "data",
    "model", "managedOnlineEndpoint", "kubernetesOnlineEndpoint", "managedOnlineDeployment",
    "kubernetesOnlineDeployment", "batchEndpoint", "batchDeployment", "modelBatchDeployment",
    "pipelineComponentBatchDeployment", "workspace", "registry", "datastore", "schedule",
    "computeInstance", "kubernetesCompute", "vmCompute", "virtualMachineCompute",
    "synapseSparkCompute", "azureBlob", "azureFile", "azureDataLakeGen1", "azureDataLakeGen2",
    "oneLake", "workspaceConnection", "connection", "featureStore", "featureSet",
    "featureStoreEntity", "serverlessEndpoint", "marketplaceSubscription", "capabilityHost",
    "index")}
ASSET_ROLES = ("data", "model", "environment")  # kinds a verb names: their schemas' names
JOB_FIELDS = ("command", "jobs", "trial", "task", "entry")  # a file with one of them is a job
# A batch deployment with no `type:` and its settings at the top level (no `settings:`) is the
# flat layout azure-ai-ml still loads as a BatchDeployment (with a deprecation warning).
FLAT_BATCH_KEYS = {"mini_batch_size", "output_action", "output_file_name", "retry_settings",
                   "max_concurrency_per_instance", "error_threshold", "logging_level"}
# Deployments are typed by `type:` whatever their $schema says, as azure-ai-ml loads them.
DEPLOYMENT_TYPES = {"online-deployment": ({"managed": "managedOnlineDeployment",
                                           "kubernetes": "kubernetesOnlineDeployment"}, "managed"),
                    "batch-deployment": ({"model": "modelBatchDeployment",
                                          "pipeline": "pipelineComponentBatchDeployment"},
                                         "model")}


@dataclass(kw_only=True)
class Finding:
    """A problem in a spec. An error is what Azure would refuse (or what cannot run at all); a
    warning is what Azure accepts but probably not what the author meant."""

    path: Path
    key: str  # dotted key path inside the spec ("" for the whole file)
    problem: str
    fix: str
    line: int = 0
    severity: str = "error"

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def __str__(self) -> str:
        where = f"{_display(self.path)}:{self.line}" if self.line else _display(self.path)
        key = f" {self.key}:" if self.key else ""
        level = " warning:" if not self.is_error else ""
        return f"{where}:{level}{key} {self.problem}. Fix: {self.fix}"


def an(word: str) -> str:
    """"an autoMLJob", "a sparkJob": the article a kind's name takes."""
    return f"an {word}" if word[:1].lower() in "aeiou" else f"a {word}"


def schema_kind(url) -> str:
    """commandJob for .../latest/commandJob.schema.json and for http://azureml/sdk-2-0/
    CommandJob.json alike: the last segment of the URL, matched without regard to case."""
    if not url:
        return ""
    name = str(url).rstrip("/").rsplit("/", 1)[-1]
    for suffix in (".schema.json", ".json"):
        name = name.removesuffix(suffix)
    return SCHEMA_KINDS.get(name.lower(), "")


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


@dataclass(kw_only=True)
class Spec:
    path: Path
    data: SpecData
    lines: dict[tuple, int] = field(default_factory=dict)
    role: str = ""  # "job", "component", "online-deployment", "batch-deployment", "data",
    # "model", "environment" when the caller knows: it types a spec without $schema (and a
    # deployment by its `type:`)
    duplicates: list[Duplicate] = field(default_factory=list)  # keys given twice

    @property
    def kind(self) -> str:
        """What the spec is loaded as: a job or component by its `type:` (as azure-ai-ml loads
        them, whatever the $schema), a deployment by its `type:` in its role; a file of no known
        role by its $schema (any spelling azure-ai-ml's configs use), else by its `type:` if it
        is a job. "" when nothing names a kind azure-ai-ml knows."""
        if self.role in DEPLOYMENT_TYPES:
            if self.role == "batch-deployment" and not self.data.get("type") and \
                    FLAT_BATCH_KEYS & set(self.data):
                return "batchDeployment"  # the flat layout azure-ai-ml still loads
            table, default = DEPLOYMENT_TYPES[self.role]
            return table.get(str(self.data.get("type") or default).lower(), "")
        if self.role in ASSET_ROLES:  # `az ml <kind> create -f`: the verb's loader, any $schema
            return self.role
        if self.role in ("job", "component"):
            table = JOB_TYPES if self.role == "job" else COMPONENT_TYPES
            return table.get(str(self.data.get("type", "command")), "")
        declared = self.declared
        if declared:
            return declared
        if any(key in self.data for key in JOB_FIELDS):
            return JOB_TYPES.get(str(self.data.get("type", "command")), "")
        return ""

    @property
    def declared(self) -> str:
        """The kind its $schema URL names ("" for none, or one no schema of Azure's names)."""
        return schema_kind(self.data.get("$schema"))

    def line(self, key: str | tuple) -> int:
        parts = tuple(key.split(".")) if isinstance(key, str) else key
        while parts and parts not in self.lines:
            parts = parts[:-1]
        return self.lines.get(parts, 1)

    def finding(self, key: str, problem: str, fix: str, severity: str = "error") -> Finding:
        return Finding(path=self.path, key=key, problem=problem, fix=fix, line=self.line(key),
                       severity=severity)

    def warning(self, key: str, problem: str, fix: str) -> Finding:
        return self.finding(key, problem, fix, "warning")

    def beside(self, relative: str) -> Path:
        """The path a key names, relative to this file, resolved; a link that leads back to
        itself stays as written (it exists as nothing: `exists()` is False)."""
        path = self.path.parent / relative
        try:
            return path.resolve()
        except RuntimeError:  # Python 3.11's "Symlink loop from ..."
            return Path(os.path.abspath(path))


# libyaml's loader where PyYAML was built with it: ten times faster than the pure-Python one on
# the 150 kB curated-environment catalogue every local run reads (same safe YAML 1.1 rules).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(text: str):
    """yaml.safe_load, through libyaml when available, of a text that passes the safe reader's
    limits (yaml_limits.py: YamlTooLarge, a LocalRunError, otherwise)."""
    yaml_limits.check(text)
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader


@dataclass(frozen=True)
class Parsed:
    """A YAML document's node tree (for the lines of its keys) and its data."""

    node: yaml.Node | None
    data: object


def _parse(text: str) -> Parsed:
    """What yaml.compose and yaml.safe_load each do, with the node built once."""
    yaml_limits.check(text)
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        return Parsed(node, loader.construct_document(node) if node is not None else None)
    finally:
        loader.dispose()


@dataclass(frozen=True)
class Duplicate:
    """A key given twice in one mapping: YAML loaders (azure-ai-ml's too) keep the second."""

    key: tuple[str, ...]
    first: int  # line numbers
    second: int


def _line_map(root, out: dict[tuple[str, ...], int]) -> list[Duplicate]:
    """The line of every key path, walking the node tree once, never into an alias again (an
    alias is the node it names: its lines are that node's); the keys given twice."""
    duplicates, seen, todo = [], set(), [(root, ())]
    while todo:
        node, prefix = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        children = []
        if isinstance(node, yaml.MappingNode):
            lines: dict[str, int] = {}
            for key_node, value_node in node.value:
                key, line = str(key_node.value), key_node.start_mark.line + 1
                if key in lines and key != "<<":
                    duplicates.append(Duplicate((*prefix, key), lines[key], line))
                lines[key] = line
                out.setdefault((*prefix, key), line)
                children.append((value_node, (*prefix, key)))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                out.setdefault((*prefix, str(index)), item.start_mark.line + 1)
                children.append((item, (*prefix, str(index))))
        todo += reversed(children)  # in document order: an anchor before its aliases
    return duplicates


def flag(value, default: bool = False) -> bool:
    """A boolean as specs and shells spell it: true/false in any case (azure-ai-ml takes both the
    YAML boolean and the string), 1/0, yes/no; None or "" is `default`."""
    if value is None or str(value).strip() == "":
        return default
    return str(value).strip().lower() in ("true", "1", "yes", "y", "on")


class SpecError(LocalRunError, ValueError):
    """A spec file that cannot be read or parsed, at its file and line."""

    def __init__(self, finding: Finding):
        super().__init__(str(finding))
        self.finding = finding


def spec_text(path: Path) -> str:
    """A spec file's text: a regular file (a pipe would wait forever, a device never end), no
    larger than the reader takes, decoded as UTF-8 as azure-ai-ml decodes it."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a pipe, a socket or " \
            "a device)"
        raise SpecError(Finding(path=path, key="", problem=f"{kind}: az ml reads a spec from a "
                                "YAML file", fix="point at the YAML file"))
    if os.stat(path).st_size > yaml_limits.MAX_CHARS:
        raise yaml_limits.YamlTooLarge(f"it is {os.stat(path).st_size / 2**20:.0f} MiB, more "
                                       f"than the {yaml_limits.MAX_CHARS // 2**20} MiB this "
                                       "reader takes for one spec", 0)
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[:err.start].count(b"\n") + 1
        column = err.start - (raw.rfind(b"\n", 0, err.start) + 1) + 1
        raise SpecError(Finding(path=path, key="",
                                problem=f"not UTF-8 text (byte 0x{raw[err.start]:02x} at "
                                f"column {column}); az ml reads specs as UTF-8",
                                fix="save the file as UTF-8", line=line)) from None


def load_spec(path: str | Path, role: str = "") -> Spec:
    path = Path(path)
    try:
        parsed = _parse(spec_text(path))
        node, data = parsed.node, parsed.data
    except OSError as err:
        raise SpecError(Finding(path=path, key="", problem=f"cannot read the file ({err.strerror})",
                                fix="check the path")) from err
    except yaml_limits.YamlTooLarge as err:
        raise SpecError(Finding(path=path, key="", problem=f"refused: {err}", fix="shrink the file",
                                line=err.line)) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise SpecError(Finding(path=path, key="",
                                problem=f"not valid YAML ({getattr(err, 'problem', err)})",
                                fix="fix the YAML syntax",
                                line=mark.line + 1 if mark else 0)) from err
    if not isinstance(data, dict):
        raise SpecError(Finding(path=path, key="", problem="not a YAML mapping",
                                fix="a spec is a mapping of keys"))
    lines: dict[tuple[str, ...], int] = {}
    duplicates = _line_map(node, lines)
    return Spec(path=path, data=data, lines=lines, role=role, duplicates=duplicates)


def discover(root: Path | None = None) -> list[Path]:
    """Every YAML spec of the repository (`root`, else the current one: mlops/project.py):
    files with a `$schema` line in the spec folders."""
    root = root if root is not None else project().root
    found = []
    for folder in SPEC_FOLDERS:
        for path in sorted((root / folder).glob("**/*.yml")):
            if "$schema:" in path.read_text():
                found.append(path)
    return found
