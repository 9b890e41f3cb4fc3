"""One group of cases (joined by `after`) run in one checkout and one local workspace.

Layout of a group's folder (emptied when the group runs again): `checkout/<name>/` the
repository at its commit (alone in its folder and named as a clone is, so a spec's
`../<folder>` resolves as on the user's machine; `git init` makes it a git root, as a clone
is), `state/` the local runtime's state
(AZML_STATE_DIR: its runs, MLflow store and local workspace, so one case's registered model is
the next one's `azureml:<model>@latest`),
`standins/` and `maps/` the stand-in data and the mapping files that name it, `logs/` one log
per case. The environment caches are shared by every group (MLOPS_CACHE_DIR).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from corpus import runner, standins
from corpus.manifest import Case
from corpus.sources import Sources
from corpus.verdict import Outcome, Verdict, classify, python_seen
from mlops.errors import LocalError

# A user's shell has none of these: the Makefile's MLflow store, a run's Azure variables.
DROPPED_PREFIXES = ("MLFLOW_", "AZUREML_", "AZURE_ML_", "MLOPS_", "AZML_", "KEEP_ENV", "DEBUG")
STOP_S = 120  # stopping a local endpoint, whatever the case's deadline


@dataclass(frozen=True, kw_only=True)
class Group:
    cases: tuple[Case, ...]
    folder: Path
    sources: Sources
    cache: Path  # the environment caches (MLOPS_CACHE_DIR) every group shares


@dataclass(frozen=True, kw_only=True)
class Ran:
    case: Case
    outcome: Outcome
    python: str  # as the log says, else the manifest's
    log: Path


def slug(case_id: str) -> str:
    return case_id.replace("/", "__")


def run_group(group: Group) -> list[Ran]:
    """Every case of the group, in order; a case whose `after` did not complete is blocked."""
    if group.folder.exists():
        shutil.rmtree(group.folder)
    group.folder.mkdir(parents=True)
    first = group.cases[0]
    root = group.folder / "checkout" / first.repo.split("/")[1]  # named as a clone is
    try:
        lacking = group.sources.checkout(first.repo, first.commit, root)
        subprocess.run(["git", "init", "-q", str(root)], check=True)  # a clone's git root
        problem = ""
    except LocalError as err:
        lacking, problem = [], f"repository not available: {err}"
    done: dict[str, Outcome] = {}
    as_azure: dict[str, bool] = {}
    ran = []
    for case in group.cases:
        log = group.folder / "logs" / f"{slug(case.id)}.log"
        outcome = (Outcome(not_run=problem) if problem else
                   Outcome(not_run=case.expect.reason) if not case.runnable else
                   blocked(case, done, as_azure) or run_case(case, group, root, log))
        outcome = lacked(outcome, lacking)
        done[case.id] = outcome
        as_azure[case.id] = classify(case, outcome)[0] in (Verdict.AZURE, Verdict.REFUSED)
        head = runner.head(log)
        ran.append(Ran(case=case, outcome=outcome, python=python_seen(head) or case.python,
                       log=log))
    return ran


def blocked(case: Case, done: dict[str, Outcome], as_azure: dict[str, bool]) -> Outcome | None:
    """A case whose `after` did not complete does not run: not run either when those did not
    run here; else blocked, and whether they failed as on Azure."""
    failed = [needed for needed in case.after if not done[needed].completed]
    if not failed:
        return None
    if all(done[needed].not_run for needed in failed):
        return Outcome(not_run=f"{', '.join(failed)} did not run here: "
                               f"{done[failed[0]].not_run}")
    return Outcome(blocked_by=", ".join(failed),
                   blocked_as_azure=all(as_azure.get(needed) for needed in failed))


def lacked(outcome: Outcome, lacking: list[str]) -> Outcome:
    """A failure that names a file the mirror lacks did not run as the user's would."""
    if outcome.completed or outcome.not_run:
        return outcome
    named = [path for path in lacking if PurePosixPath(path).name in outcome.output]
    if not named:
        return outcome
    return replace(outcome, not_run=f"the mirror lacks {named[0]} (a file of 4 MiB or more, "
                                    "left out of its snapshot): it runs where GitHub is reachable")


def place_for(case: Case, group: Group, root: Path, log: Path) -> runner.Place:
    env = {k: v for k, v in os.environ.items() if not k.startswith(DROPPED_PREFIXES)}
    env |= {"AZML_STATE_DIR": str(group.folder / "state"), "MLOPS_CACHE_DIR": str(group.cache),
            "PYTHONUNBUFFERED": "1"}
    return runner.Place(root=root, cwd=root / case.cwd, asset_map=group.folder / "maps" /
                        f"{slug(case.id)}.yml", env=env, log=log)


def run_case(case: Case, group: Group, root: Path, log: Path) -> Outcome:
    started = time.monotonic()
    deadline = started + case.timeout
    place = place_for(case, group, root, log)
    try:
        roots = standins.Roots(repo=root, state=group.folder / "state")
        paths = {s.reference: standins.generate(s, group.folder / "standins" / slug(case.id) /
                                                str(i), roots)
                 for i, s in enumerate(case.standins)}
    except (LocalError, OSError) as err:
        return Outcome(code=2, step="stand-ins", output=str(err))
    standins.write_map(paths, place.asset_map)
    runner.write_settings(place)
    outcome = steps(case, place, deadline, paths)
    return replace(outcome, output=runner.tail(log), seconds=time.monotonic() - started)


def steps(case: Case, place: runner.Place, deadline: float, paths: dict[str, Path]) -> Outcome:
    """The case's commands in order, to the first that fails."""
    for spec in case.setup:
        failed = attempt(runner.setup_command(spec, place), place, deadline, f"setup {spec}")
        if failed:
            return failed
    if case.kind == "online":
        request = paths.get(case.request) or place.root / case.request
        return online(case, place, deadline, str(request))
    if case.kind == "batch":
        source = paths.get(case.input) or place.root / case.input
        return endpoint(runner.batch_commands(case, place, str(source)), place, deadline)
    return attempt(runner.job_command(case, place), place, deadline, "run") or Outcome(code=0)


def online(case: Case, place: runner.Place, deadline: float, request: str) -> Outcome:
    return endpoint(runner.online_commands(case, place, runner.free_port(), request), place,
                    deadline)


def endpoint(commands: runner.Endpoint, place: runner.Place, deadline: float) -> Outcome:
    """Create the endpoint and its deployment, invoke it; the endpoint deleted whatever
    happened."""
    try:
        return (attempt(commands.create, place, deadline, "endpoint") or
                attempt(commands.deploy, place, deadline, "start") or
                attempt(commands.invoke, place, deadline, "invoke") or Outcome(code=0))
    finally:
        runner.execute(commands.delete, place, time.monotonic() + STOP_S)


def attempt(argv: list[str], place: runner.Place, deadline: float, step: str) -> Outcome | None:
    """None when the command succeeded; else how it failed."""
    finished = runner.execute(argv, place, deadline)
    if finished.code == 0:
        return None
    return Outcome(code=finished.code, stopped=finished.stopped, step=step)
