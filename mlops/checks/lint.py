"""Repo lint: what azure-ai-ml only notices at upload (or never) — references, flags, paths, sweeps.

Each rule returns Findings with the file, key, problem and fix.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
from dataclasses import dataclass, field

from mlops.checks import skus
from mlops.project import project
from mlops.specs import REF, Finding, Spec, SpecData

FLAG = re.compile(r"(?<![\w-])--([A-Za-z][\w-]*)")
MODULE = re.compile(r"python\s+-m\s+([\w.]+)")
UNIFORM_LIKE = {"uniform", "quniform", "loguniform", "qloguniform"}
BAYESIAN_TYPES = {"choice", "uniform", "quniform"}
SEARCH_TYPES = UNIFORM_LIKE | {"choice", "randint", "normal", "qnormal", "lognormal",
                               "qlognormal"}
ENDPOINT_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9-]{1,30}[a-zA-Z0-9]$")


def entry_point_parser(command: str) -> argparse.ArgumentParser | None:
    """The argparse parser of `python -m <package>.<x>` for this project's entry packages
    ([tool.azml] entry_packages), if the command runs one."""
    match = MODULE.search(command)
    package = match.group(1).split(".")[0] if match else ""
    if not match or "." not in match.group(1) or package not in project().entry_packages:
        return None
    light = _config_module(package)  # the package's parsers without importing its entry points
    configs = getattr(light, "ENTRY_CONFIGS", {})
    entry = match.group(1).split(".", 1)[1]
    if entry in configs:
        return light.build_parser(configs[entry])
    module = importlib.import_module(match.group(1))
    if hasattr(module, "build_parser"):
        return module.build_parser()
    return light.build_parser() if light else None


def _config_module(package: str):
    """`<package>.config` where the package has one: ENTRY_CONFIGS (entry module -> its config
    dataclass) and build_parser(config) read a command line without importing the entry module
    and what it imports (torch: seconds)."""
    if importlib.util.find_spec(f"{package}.config") is None:
        return None
    return importlib.import_module(f"{package}.config")


def check_flags(spec: Spec, key: str, command: str) -> list[Finding]:
    parser = entry_point_parser(command)
    if parser is None:
        return []
    known = {opt for action in parser._actions for opt in action.option_strings}
    module = MODULE.search(command).group(1)
    found = [spec.warning(key, f"--{flag} is not a flag of {module}: the job would fail at start",
                          f"use one of {', '.join(sorted(known - {'-h', '--help'}))}")
             for flag in FLAG.findall(command) if f"--{flag}" not in known]
    used = {f"--{flag}" for flag in FLAG.findall(command)}
    for action in parser._actions:
        if action.required and not used & set(action.option_strings):
            found.append(spec.warning(key, f"{module} requires {action.option_strings[0]}: the "
                                      "job would fail at start",
                                      f"add {action.option_strings[0]} ${{{{inputs.…}}}}"))
    return found


@dataclass(frozen=True)
class Declared:
    """What a command may refer to: the job's inputs and outputs, and a sweep's search space."""

    inputs: SpecData
    outputs: SpecData
    search_space: SpecData = field(default_factory=dict)

    def scope(self, name: str) -> SpecData | None:
        return {"inputs": self.inputs, "outputs": self.outputs,
                "search_space": self.search_space}.get(name)


def check_command(spec: Spec, key: str, *, command: str, declared: Declared,
                  flags: bool = True) -> list[Finding]:
    """References resolve, every input (and swept parameter) is used, flags exist."""
    inputs, search_space = declared.inputs, declared.search_space
    found = []
    used: dict[str, set[str]] = {"inputs": set(), "outputs": set(), "search_space": set()}
    for ref in REF.findall(command):
        scope, _, name = ref.partition(".")
        names = declared.scope(scope)
        if names is None:
            found.append(spec.warning(key, f"${{{{{ref}}}}} is not a reference a command can use "
                                      "(Azure would pass it through as text)",
                                      "use ${{inputs.x}}, ${{outputs.x}} or ${{search_space.x}}"))
        elif name not in names:
            section = "search_space" if scope == "search_space" else scope
            found.append(spec.finding(key, f"${{{{{ref}}}}} refers to an undefined {scope[:-1]}"
                                      f" '{name}'", f"declare '{name}' under {section}: or fix "
                                      f"the name (declared: {', '.join(names) or 'none'})"))
        else:
            used[scope].add(name)
    for name in inputs:
        if name not in used["inputs"]:
            fix = f"add --{name} ${{{{inputs.{name}}}}} to the command, or remove the input"
            found.append(spec.warning(f"inputs.{name}", f"input '{name}' is declared but never "
                                      "passed to the command", fix))
    for name in search_space or {}:
        if name not in used["search_space"]:
            found.append(spec.warning(f"search_space.{name}", f"swept parameter '{name}' is not "
                                      "in the trial command, so every trial would be the same",
                                      f"add --{name} ${{{{search_space.{name}}}}} to the command"))
    return found + (check_flags(spec, key, command) if flags else [])


def check_code(spec: Spec, key: str, code) -> list[Finding]:
    if not isinstance(code, str) or ":" in code.split("/")[0]:
        return []  # azureml:, https: and git+ code is checked by Azure
    where = spec.beside(code)
    if where.is_symlink() and not where.exists():
        return [spec.finding(key, f"code '{code}' is a symbolic link that leads back to itself "
                             "(a loop of links; azure-ai-ml's loader stops at it)",
                             "point code: at a real folder, or remove the loop")]
    if not where.exists():  # a folder, or one file: Azure uploads that file alone
        return [spec.finding(key, f"code '{code}' does not exist",
                             "point code: at the folder holding the entry point (or the one "
                             "file to upload), relative to this file (../src)")]
    if where.is_dir() and not any(where.iterdir()):  # (one ignoring all: at its snapshot)
        return [spec.finding(key, f"code '{code}' is an empty folder: az ml's upload refuses it "
                             "(azure-ai-ml: \"Directory ... is empty. path or local_path must be "
                             "a non-empty directory\")", "put the job's files in it, or point "
                             "code: at the folder that holds them")]
    return []


def check_resources(spec: Spec, data: SpecData, computes: dict[str, str]) -> list[Finding]:
    found = []
    resources = data.get("resources") or {}
    size = resources.get("instance_type")
    if size:
        found += check_size(spec, "resources.instance_type", size)
    else:
        compute = str(data.get("compute", "")).removeprefix("azureml:")
        size = computes.get(compute)
    per_instance = (data.get("distribution") or {}).get("process_count_per_instance")
    gpus = skus.GPUS.get(skus.canonical(size) or "", 0) if size else 0
    if per_instance and gpus and int(per_instance) > gpus:
        found.append(spec.warning("distribution.process_count_per_instance",
                                  f"{per_instance} processes per node but {size} has {gpus} GPU"
                                  f"{'s' if gpus > 1 else ''}", f"set it to {gpus} (one process"
                                  " per GPU), or choose a larger size"))
    return found


def check_size(spec: Spec, key: str, size) -> list[Finding]:
    if skus.canonical(size):
        return []
    return [spec.warning(key, f"unknown VM size '{size}'", f"{skus.suggestion(size)}Use a size "
                         "from mlops/checks/skus.py (add it there, with its GPU count, if it "
                         "is real)")]


def check_search_space(spec: Spec) -> list[Finding]:
    found = []
    space = spec.data.get("search_space") or {}
    for name, param in space.items():
        key, kind = f"search_space.{name}", str((param or {}).get("type", ""))
        if kind not in SEARCH_TYPES:
            found.append(spec.finding(key, f"unknown search space type '{kind}'",
                                      f"use one of {', '.join(sorted(SEARCH_TYPES))}"))
        elif kind in UNIFORM_LIKE and not float(param["min_value"]) < float(param["max_value"]):
            found.append(spec.finding(key, f"min_value {param['min_value']} is not below "
                                      f"max_value {param['max_value']}", "swap or fix the bounds"))
        elif kind == "choice" and not param.get("values"):
            found.append(spec.finding(key, "choice has no values", "list at least one value"))
        elif kind == "randint" and int(param.get("upper", 0)) < 1:
            found.append(spec.finding(key, "randint upper must be at least 1",
                                      "set upper: to the exclusive upper bound"))
    algorithm = spec.data.get("sampling_algorithm")
    algorithm = algorithm.get("type") if isinstance(algorithm, dict) else algorithm
    if str(algorithm).lower() == "bayesian":
        found += check_bayesian(spec, space)
    if str(algorithm).lower() == "grid":
        for name, param in space.items():
            if (param or {}).get("type") != "choice":
                found.append(spec.finding(f"search_space.{name}", "grid sampling needs choice "
                                          "parameters only", "use type: choice with values:, or "
                                          "sampling_algorithm: random"))
    return found


def _int(value) -> int | None:
    """A YAML number or a --set string ("3"), else None."""
    try:
        return int(str(value))
    except ValueError:
        return None


def check_bayesian(spec: Spec, space: SpecData) -> list[Finding]:
    """What Azure refuses for Bayesian sampling: other types than choice/uniform/quniform, and
    any early termination policy."""
    found = [spec.finding(f"search_space.{name}", f"Bayesian sampling supports only choice, "
                          f"uniform and quniform, not {param.get('type')}", "use one of those "
                          "types, or sampling_algorithm: random")
             for name, param in space.items()
             if (param or {}).get("type") not in BAYESIAN_TYPES]
    policy = spec.data.get("early_termination")
    if policy and str((policy or {}).get("type", "")).lower() not in ("", "none"):
        found.append(spec.finding("early_termination", "Bayesian sampling does not support "
                                  "early termination policies", "remove early_termination, or "
                                  "use sampling_algorithm: random"))
    return found


def check_sweep_policy(spec: Spec) -> list[Finding]:
    found = []
    policy = spec.data.get("early_termination") or {}
    if str(policy.get("type", "")).lower() == "bandit":
        given = [k for k in ("slack_factor", "slack_amount") if policy.get(k) is not None]
        if len(given) != 1:
            found.append(spec.finding("early_termination", f"bandit needs exactly one of "
                                      f"slack_factor and slack_amount (got {given or 'neither'})",
                                      "keep slack_factor (a ratio) or slack_amount (absolute)"))
    epochs = (spec.data.get("inputs") or {}).get("epochs")
    delay = policy.get("delay_evaluation")
    if _int(epochs) is not None and _int(delay) is not None and _int(delay) >= _int(epochs):
        found.append(spec.warning("early_termination.delay_evaluation", f"delay_evaluation "
                                  f"{delay} is not below epochs {epochs}: the policy never "
                                  "stops a trial", "use a delay of a few epochs"))
    objective = spec.data.get("objective") or {}
    command = str((spec.data.get("trial") or {}).get("command", ""))
    metric = objective.get("primary_metric")
    module = MODULE.search(command)
    logged = project().metrics.get(module.group(1)) if module else None
    if logged and metric not in logged:
        found.append(spec.warning("objective.primary_metric", f"{module.group(1)} never logs "
                                  f"'{metric}'", f"use one of {', '.join(sorted(logged))}"))
    return found
