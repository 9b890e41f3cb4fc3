"""Generate the curated catalogue (mlops/environments/catalog/curated-envs.yml): every curated
environment Azure ML publishes, with its image's pins, from a checkout of the
Azure/azureml-assets repository (the source of those images).

    python scripts/gen_curated_envs.py --repo <azureml-assets git dir> [--out FILE]

Each environment folder that ever held an `asset.yaml` of type environment is read at its last
version (the current one, or the one before it was deleted: older specs still name retired
images such as AzureML-sklearn-0.24-ubuntu20.04-py37-cpu). Its conda file or Dockerfile is read
by the local runtime's own reader (mlops/environments/envfiles.py), so the catalogue holds what a
local build would install: each `pip install` of a Dockerfile's RUN lines an install step of its
own, in order, with its flags (mlops/environments/steps.py). Keys: the registry name
(azureml://registries/azureml/environments/<name>), the workspace alias (azureml:AzureML-<name>)
and, from the spec's tags, the legacy curated name
(azureml:AzureML-<name>-<os>-py<version>-<cpu|gpu>). Pins Azure fills in at build time
(`{{latest-pypi-version}}`) become unpinned; torch, torchvision and torchaudio are left to .venv (a
CUDA image's torch cannot run here without its GPU stack). The catalogue's local-envs.yml overrides
any entry by the same key.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mlops.environments import steps  # noqa: E402
from mlops.environments.envfiles import EnvPlan, read_conda, read_dockerfile  # noqa: E402
from mlops.environments.requirements import LEFT_TO_VENV  # noqa: E402
from mlops.errors import LocalRunError  # noqa: E402

VERSIONS_FILE = "curated-env-versions.json"
TEMPLATED = re.compile(r"\s*(===|==|~=|>=|<=|=|>|<)\s*\{\{[^}]*\}\}")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(repo), *args], capture_output=True,
                          text=True, check=True).stdout


def show(repo: Path, rev: str, path: str) -> str | None:
    try:
        return git(repo, "show", f"{rev}:{path}")
    except subprocess.CalledProcessError:
        return None


def asset_folders(repo: Path) -> dict[str, str]:
    """Every environment folder's path -> the revision holding its last version."""
    current = set(git(repo, "ls-tree", "-r", "--name-only", "HEAD").splitlines())
    ever = set(git(repo, "log", "--format=", "--name-only", "HEAD", "--",
                   "*/asset.yaml").splitlines())
    found = {}
    for path in sorted(p for p in ever if p.endswith("asset.yaml")):
        if path in current:
            found[path.rsplit("/", 1)[0]] = "HEAD"
            continue
        deleted = git(repo, "log", "-1", "--format=%H", "HEAD", "--", path).strip()
        if deleted:
            found[path.rsplit("/", 1)[0]] = f"{deleted}^"
    return found


def _yaml(text: str | None) -> dict:
    try:
        data = yaml.safe_load(TEMPLATED.sub("", text or "").replace("{{", "").replace("}}", ""))
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def read_plan(repo: Path, rev: str, folder: str, name: str) -> EnvPlan | None:
    """The environment's packages, read from its build context as the local runtime reads one."""
    extra = _yaml(show(repo, rev, f"{folder}/environment.yaml"))
    context = ((extra.get("image") or {}).get("context") or {})
    context_dir = f"{folder}/{context.get('dir') or 'context'}"
    files = git(repo, "ls-tree", "--name-only", f"{rev}:{context_dir}").split() \
        if show(repo, rev, context_dir) is not None else []
    plan = EnvPlan(label=name)
    with tempfile.TemporaryDirectory() as tmp:
        for file in files:
            text = show(repo, rev, f"{context_dir}/{file}")
            if text is not None:
                (Path(tmp) / file).write_text(TEMPLATED.sub("", text))
        try:
            dockerfile = context.get("dockerfile") or "Dockerfile"
            if (Path(tmp) / dockerfile).is_file():
                read_dockerfile(Path(tmp), dockerfile, plan)
            elif (Path(tmp) / "conda_dependencies.yaml").is_file():
                read_conda(Path(tmp) / "conda_dependencies.yaml", plan)
            else:
                return None
        except (LocalRunError, OSError, ValueError):
            return None
    return plan


def entry(plan: EnvPlan) -> dict:
    """The catalogue's entry: the plan's requirement lines, each install step of its Dockerfile
    kept in order with its flags and constraints (steps.py; one that installs nothing left
    out), options and templated lines left out."""
    pip: list[str] = []
    step: list[str] = []
    for line in [*plan.requirements, steps.STEP]:
        if line.startswith(steps.STEP):
            pip += step if len(step) != 1 or not step[0].startswith(steps.STEP) else []
            step = [line]
            continue
        if "{" in line or line.startswith("-") and not steps.is_step_option(line):
            continue
        base = re.split(r"[\s=<>~!\[;@]", line, maxsplit=1)[0].lower()
        if base in LEFT_TO_VENV:
            line = base if base != "pytorch" else "torch"
        if line not in step:
            step.append(line)
    out = {"pip": pip}
    if plan.python:
        out["python"] = plan.python
    return out


def keys(name: str, tags: dict) -> list[str]:
    found = [f"azureml://registries/azureml/environments/{name}"]
    if name.lower().startswith("azureml-"):
        found.append(f"azureml:{name}")
        return found
    found.append(f"azureml:AzureML-{name}")
    os_tag, python = str(tags.get("OS") or "").lower(), str(tags.get("Python") or "")
    if os_tag and re.match(r"^\d\.\d+$", python):
        kind = "gpu" if re.search(r"cuda|gpu", name, re.I) else "cpu"
        found.append(f"azureml:AzureML-{name}-{os_tag}-py{python.replace('.', '')}-{kind}")
    return found


def retired(repo: Path, rev: str) -> dict:
    """A deleted folder's `retired`: when the commit that removed its definition was made (unix
    seconds). Every image of it was built by then, from PyPI as it was then."""
    if not rev.endswith("^"):
        return {}
    return {"retired": int(git(repo, "log", "-1", "--format=%ct", rev[:-1]).strip())}


class Catalogue(NamedTuple):
    entries: dict[str, dict]  # key -> the last version's entry
    names: dict[str, str]  # key -> the environment's asset name
    folders: dict[str, str]  # asset name -> its folder in the repository


def catalogue(repo: Path) -> Catalogue:
    out = Catalogue({}, {}, {})
    for folder, rev in asset_folders(repo).items():
        asset = _yaml(show(repo, rev, f"{folder}/asset.yaml"))
        if str(asset.get("type", "")).lower() != "environment" or not asset.get("name"):
            continue
        name = str(asset["name"]).strip()
        spec = _yaml(show(repo, rev, f"{folder}/{asset.get('spec') or 'spec.yaml'}"))
        plan = read_plan(repo, rev, folder, name)
        if plan is None:
            continue
        out.folders.setdefault(name, folder)
        for key in keys(name, spec.get("tags") or {}):
            out.entries.setdefault(key, {**entry(plan), **retired(repo, rev)})
            out.names.setdefault(key.lower(), name)
    return Catalogue(dict(sorted(out.entries.items(), key=lambda kv: kv[0].lower())),
                     out.names, out.folders)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)) or (0,)


def ranges(numbers: list[int]) -> str:
    """[1, 2, 3, 5, 7, 8] -> "1-3,5,7-8": the versions published, compactly."""
    parts, start = [], None
    for index, number in enumerate(numbers):
        if start is None:
            start = number
        if index + 1 == len(numbers) or numbers[index + 1] != number + 1:
            parts.append(str(start) if start == number else f"{start}-{number}")
            start = None
    return ",".join(parts)


class History(NamedTuple):
    """What the release records say: each environment's entry where it changes, the versions
    published, and for each legacy name (AzureML-<name>-<os>-py<ver>-<cpu|gpu>) the last
    version whose tags gave that name."""

    versions: dict[str, list]
    published: dict[str, str]
    legacy: dict[str, list]  # legacy key (lower case) -> [asset name, last version]
    dates: dict[str, dict[str, int]]  # asset name -> version -> its release (unix seconds)


def versions(repo: Path, folders: dict[str, str]) -> History:
    """Each environment at every published version: the release tags
    `environment/<name>/<version>`, each a commit of the release branch whose
    `latest/environment/<name>/` holds that version's asset.yaml, spec.yaml and build context
    (its Dockerfile and conda file with every pin resolved, where the source has
    `{{latest-pypi-version}}`)."""
    history = History({}, {}, {}, {})
    released = dict(line.split() for line in git(
        repo, "for-each-ref", "--format=%(refname:short) %(creatordate:unix)",
        "refs/tags/environment/").splitlines())
    tags = list(released)
    numbers: dict[str, list[int]] = {}
    for tag in sorted(tags, key=lambda t: (t.split("/")[1], _version(t.split("/")[-1]))):
        _, name, version = tag.split("/", 2)
        if name not in folders:
            continue
        folder = f"latest/environment/{name}"  # the release layout
        plan = read_plan(repo, tag, folder, name)
        if plan is None:
            continue
        numbers.setdefault(name, []).append(_version(version)[0])
        history.dates.setdefault(name, {})[version] = int(released[tag])
        spec = _yaml(show(repo, tag, f"{folder}/spec.yaml"))
        for key in keys(name, spec.get("tags") or {})[2:]:  # the legacy name of this version
            history.legacy[key.lower()] = [name, version]
        pairs = history.versions.setdefault(name, [])
        if not pairs or pairs[-1][1] != entry(plan):
            pairs.append([version, entry(plan)])
    history.published.update({name: ranges(sorted(set(found)))
                              for name, found in numbers.items()})
    return history


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True, help="azureml-assets git directory")
    parser.add_argument("--out", type=Path,
                        default=Path("mlops/environments/catalog/curated-envs.yml"))
    args = parser.parse_args(argv)
    head = git(args.repo, "rev-parse", "HEAD").strip()
    found = catalogue(args.repo)
    header = (f"# Generated by scripts/gen_curated_envs.py from Azure/azureml-assets at {head}:\n"
              "# every curated environment Azure ML publishes (current and retired), with its\n"
              "# image's pins. Do not edit: local-envs.yml beside it overrides an entry by key.\n")
    args.out.write_text(header + yaml.safe_dump(found.entries, sort_keys=False, width=100))
    history = versions(args.repo, found.folders)
    names = {**found.names, **{key: name for key, (name, _) in history.legacy.items()}}
    versions_out = args.out.with_name(VERSIONS_FILE)
    versions_out.write_text(json.dumps(
        {"source": head, "names": names, "versions": history.versions,
         "published": history.published, "legacy": history.legacy, "dates": history.dates},
        separators=(",", ":")) + "\n")
    print(f"{args.out}: {len(found.entries)} keys from {head[:10]}; {versions_out}: "
          f"{sum(len(v) for v in history.versions.values())} distinct versions of "
          f"{len(history.versions)}, {versions_out.stat().st_size // 1024} kB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
