"""Azure's rules for the names of assets and jobs, checked before anything touches the disk.

Where each rule comes from:
- model: the pinned azure-ai-ml's model registry client (`_restclient/model_dataplane`,
  `^(?![\\-_.])[a-zA-Z0-9\\-_.]{1,255}(?<!\\.)$`): ASCII letters, digits, '-', '_' and '.',
  starting with a letter or digit, not ending with '.', at most 255 characters;
- data, environment: Azure's resource rule for workspace and registry assets (its ARM pattern
  `^[a-zA-Z0-9][a-zA-Z0-9\\-_]{0,254}$`; the service's own refusal reads "Resource name can only
  contain alphanumeric characters, dashes, and underscores, with a limit of 255 characters");
- component: azure-ai-ml's ComponentNameStr (`^[a-z][a-z\\d_]*$`: lowercase letters, digits and
  '_', starting with a letter), within the same 255 characters;
- job: the run-history client's run id (`^[a-zA-Z0-9][\\w-]{0,255}$`): a letter or digit, then
  letters, digits, '_' and '-', at most 256 characters.
- experiment: the service's refusal at submission ("Experiment name must be 1-256 characters,
  start with a letter or a number, and can only contain letters, numbers, underscores, and
  dashes", quoted in microsoft/dstoolkit-mlops-v2#180 for a branch name with a '/').
Every rule is ASCII: a Unicode hyphen, a Cyrillic letter that looks Latin or a no-break space is
named in the message by its code point, since it cannot be told apart on screen.
A version is this workspace's folder name: at most 255 of letters, digits, '.', '-' and '_',
not starting with '.' (Azure's versions are short strings; none holds a path separator).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from mlops.errors import LocalRunError


@dataclass(frozen=True, kw_only=True)
class NameRule:
    pattern: str
    text: str  # the rule, as the message says it
    limit: int
    whose: str = "Azure"  # who sets the rule


MODEL = NameRule(pattern=r"(?![-_.])[A-Za-z0-9._-]+(?<!\.)",
                 text="ASCII letters, digits, '-', '_' and '.', starting with a letter or "
                      "digit and not ending with '.'", limit=255)
RESOURCE = NameRule(pattern=r"[A-Za-z0-9][A-Za-z0-9_-]*",
                    text="ASCII letters, digits, '-' and '_', starting with a letter or digit",
                    limit=255)
COMPONENT = NameRule(pattern=r"[a-z][a-z0-9_]*",
                     text="lowercase ASCII letters, digits and '_', starting with a letter",
                     limit=255)
JOB = NameRule(pattern=r"[A-Za-z0-9][A-Za-z0-9_-]*",
               text="ASCII letters, digits, '_' and '-', starting with a letter or digit",
               limit=256)
EXPERIMENT = NameRule(pattern=JOB.pattern, text=JOB.text, limit=256)
VERSION = NameRule(pattern=r"[A-Za-z0-9_-][A-Za-z0-9._-]*",
                   text="ASCII letters, digits, '.', '-' and '_', not starting with '.'", limit=255,
                   whose="the local workspace")
RULES = {"models": MODEL, "data": RESOURCE, "environments": RESOURCE, "components": COMPONENT}


class InvalidName(LocalRunError):
    """A name (or version) Azure would refuse; the message gives the rule."""


def _first_bad(name: str, rule: NameRule) -> str:
    """What in `name` breaks `rule`: its length, or the first character that does, by code
    point and Unicode name (a no-break space and a space look alike)."""
    if not name:
        return "it is empty"
    if len(name) > rule.limit:
        return f"it is {len(name)} characters long"
    for index in range(len(name)):
        if not re.fullmatch(rule.pattern, name[:index + 1] + ("a" if index + 1 < len(name)
                                                             else "")):
            char = name[index]
            label = unicodedata.name(char, "a control character")
            return f"character {index + 1} is {char!r} (U+{ord(char):04X} {label})"
    return "it breaks the rule"


def check(name: object, rule: NameRule, what: str) -> str:
    """`name` when it follows `rule`; InvalidName saying the rule and what breaks it."""
    text = name if isinstance(name, str) else ""
    if isinstance(name, str) and len(name) <= rule.limit and re.fullmatch(rule.pattern, name):
        return name
    shown = repr(name) if len(repr(name)) <= 80 else repr(name)[:60] + "..."
    raise InvalidName(f"{what} {shown} is not one {rule.whose} takes: {what}s are 1 to "
                      f"{rule.limit} {rule.text} ({_first_bad(text, rule)}). Fix: rename it")


def asset_name(kind: str, name: object, noun: str) -> str:
    """An asset's name by its kind (the AssetKind value: models, data, ...)."""
    return check(name, RULES[kind], f"{noun} name")


def job_name(name: object) -> str:
    return check(name, JOB, "job name")


def experiment_name(name: object) -> str:
    return check(name, EXPERIMENT, "experiment name")


def version(value: object) -> str:
    return check(value, VERSION, "version")



def generated_job_name() -> str | None:
    """A name for a job whose spec gives none, made as Azure's is: azure-ai-ml names it before
    submitting (entities/_job/to_rest_functions.py: generate_defaults; job_name_generator.py:
    an adjective, a noun and 10 random characters, `sincere_rose_3k1lcw5bmz`). That module is
    run from the installed azure-ai-ml by its path (importing the package costs a second);
    None where it is not found."""
    import importlib.util

    try:
        found = importlib.util.find_spec("azure.ai.ml")
    except (ImportError, ValueError):
        found = None
    for folder in (found.submodule_search_locations or ()) if found is not None else ():
        spec = importlib.util.spec_from_file_location(
            "_azure_job_names", f"{folder}/entities/_job/job_name_generator.py")
        try:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return job_name(module.generate_job_name())
        except (OSError, SyntaxError, AttributeError, InvalidName):
            continue
    return None
