"""Jobs as `az ml job` knows them: created (checked at once, then run in the background, as
Azure queues a job and returns), streamed, canceled, downloaded.

`create` checks the spec as `az ml job create` does (an error is the input's: nothing starts),
takes a run folder and the job's name, records it Starting and starts the runner (`python -m
mlops.run <spec> --run-dir <folder>`, the same runner `make local` uses) in a session of its
own, its output in `<run>/runner.log`; the runner records Running, then how the job ended
(run.json: mlops/runtime/job.py). `stream` prints that log as `az ml job stream` prints the
job's, until the job ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from mlops.api.records import CANCEL_ASKED, RUNNER_LOG, JobRecord, find_job
from mlops.checks.prepare import prepare_job
from mlops.errors import LocalRunError
from mlops.runtime import (
    AssetMap,
    Identity,
    JobStatus,
    claim_job_name,
    job_name,
    locked,
    run_folder,
    update_record,
    write_record,
)

POLL_S = 0.2


def runtime_module(name: str) -> list[str]:
    """The command line that runs the runtime's module `name` in a process of its own, from the
    user's folder: `-P`, so that folder is not put first on sys.path, where a repository's own
    `mlops/` folder (every mlops-v2 template has one) would stand for the runtime's package."""
    return [sys.executable, "-P", "-m", name]


@dataclass(frozen=True, kw_only=True)
class Submission:
    """`az ml job create -f <spec> [--set ...] [--name ...]`, and how the runner runs it."""

    spec: Path
    sets: list[str] = field(default_factory=list)
    removes: list[str] = field(default_factory=list)
    name: str | None = None
    asset_file: Path | None = None
    env_file: Path | None = None
    max_procs: int = 1

    def runner_argv(self, folder: Path) -> list[str]:
        argv = [*runtime_module("mlops.run"), str(self.spec), "--run-dir", str(folder),
                "--max-procs", str(self.max_procs)]
        for value in self.all_sets:
            argv += ["--set", value]
        for key in self.removes:
            argv += ["--remove", key]
        for flag, path in (("--assets", self.asset_file), ("--envs", self.env_file)):
            if path is not None:
                argv += [flag, str(path)]
        return argv

    @property
    def all_sets(self) -> list[str]:
        return [*self.sets, *([f"name={self.name}"] if self.name else [])]


def create(submission: Submission) -> JobRecord:
    """The job, checked, named, recorded Starting and started in the background."""
    job = prepare_job(submission.spec, submission.all_sets, submission.removes,
                      AssetMap(submission.asset_file), env_file=submission.env_file)
    folder = run_folder(job, None)
    start(job.identity(folder), folder, submission.runner_argv(folder))
    return JobRecord.at(job_name(job, folder), folder)


def start(run: Identity, folder: Path, argv: list[str]) -> None:
    """The job's name claimed, the job recorded Starting in its folder, and its runner (`argv`,
    which records Running and the end: runtime/run_setup.py) started in a session of its own,
    its output in runner.log; nothing left behind when it could not start."""
    try:
        with locked(folder):
            claim_job_name(run.name, folder)
            write_record(run, folder, status=JobStatus.STARTING)
        log = open(folder / RUNNER_LOG, "ab")  # noqa: SIM115 - the runner's, closed below
        with log:
            runner = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)  # nothing started: leave nothing behind
        raise
    update_record(folder, pid=runner.pid)


def stream(name: str, out: TextIO) -> JobRecord:
    """The job's log from its start, as it grows, until the job ends (`az ml job stream`);
    Ctrl-C stops the streaming only, as on Azure: the job goes on."""
    record = find_job(name)
    out.write(f"RunId: {record.name}\nWeb View: {record.web_view}\n")
    offset, log = 0, record.folder / RUNNER_LOG
    try:
        while True:
            done = record.status.terminal
            offset = _copy_from(log, offset, out)
            if done:
                break
            time.sleep(POLL_S)
            record = record.refreshed()
    except KeyboardInterrupt:
        raise LocalRunError(f"the output streaming for {record.name} was interrupted, but the "
                            f"job goes on, as on Azure: azml job cancel -n {record.name} "
                            "stops it") from None
    out.write(f"\nExecution Summary\n=================\nRunId: {record.name}\n"
              f"Web View: {record.web_view}\n\n")
    out.flush()
    return record


def _copy_from(log: Path, offset: int, out: TextIO) -> int:
    """What the log holds past `offset`, written to `out`; the new offset."""
    try:
        with open(log, "rb") as handle:
            handle.seek(offset)
            chunk = handle.read()
    except FileNotFoundError:
        return offset
    if chunk:
        out.write(chunk.decode("utf-8", errors="replace"))
        out.flush()
    return offset + len(chunk)


def cancel(name: str, *, wait: bool = True, timeout: float = 60.0) -> JobRecord:
    """Stop the job's runner (SIGTERM to its process group: it stops the job's processes and
    records the job Canceled) and wait until it has (`wait`; else it is CancelRequested until
    then); a job that has ended stays as it ended."""
    record = find_job(name)
    if record.status.terminal or record.pid is None:
        return record
    # job show says CancelRequested until the runner records the end, as on Azure (on a full
    # disk the cancel goes on, and show says Running until then)
    with contextlib.suppress(OSError):
        (record.folder / CANCEL_ASKED).write_text(str(record.pid))
    try:
        os.killpg(record.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return record.refreshed()
    deadline = time.monotonic() + timeout
    while wait and not record.status.terminal and time.monotonic() < deadline:
        time.sleep(POLL_S)
        record = record.refreshed()
    return record


def download(record: JobRecord, target: Path, *, output: str | None = None,
             everything: bool = False) -> list[Path]:
    """`az ml job download`: the job's logs and default outputs into `<target>/artifacts`, a
    named output into `<target>/named-outputs/<name>` (--output-name; --all: every one)."""
    if not record.status.terminal:
        raise LocalRunError(f"job {record.name} is {record.status}: download is allowed only "
                            "once it has ended (Completed, Failed or Canceled), as on Azure")
    named = record.named_outputs()
    if output is not None and output not in named:
        raise LocalRunError(f"job {record.name} has no output {output!r} (it has "
                            f"{', '.join(sorted(named)) or 'none'})")
    copies: dict[Path, Path] = {}
    if output is None:
        copies.update({target / "artifacts" / rel: src
                       for rel, src in record.artifacts().items()})
    for each in ([output] if output else sorted(named) if everything else []):
        copies[target / "named-outputs" / each] = named[each]
    for destination, source in copies.items():
        _copy(source, destination)
    return sorted(copies)


def _copy(source: Path, destination: Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, destination, dirs_exist_ok=True, symlinks=False)
    elif source.exists():
        shutil.copy2(source, destination)


def validate(spec: Path, sets: list[str], name: str | None = None) -> dict[str, object]:
    """`az ml job validate`: azure-ai-ml's validate_job over the spec with --set (and --name) as
    its params_override, printed as az prints the ValidationResult (`result`, `errors`,
    `warnings`); a failed validation is printed, not raised, as az's is. What az adds through
    the workspace (a pipeline's compute names resolved to ids) is not checked here: the local
    workspace does not hold the computes a workspace has (docs/azml.md)."""
    import logging

    from azure.ai.ml.entities._validate_funcs import validate_job

    from mlops.checks.overrides import parse_sets
    from mlops.specs import load_spec

    logging.getLogger("azure.ai.ml").setLevel(logging.ERROR)
    override = [*parse_sets(sets, spec), *([{"name": name}] if name else [])]
    if not spec.is_file():
        raise LocalRunError(f"job validate: {spec} is not a file; give the job's YAML spec")
    load_spec(spec)  # the project's limits first (a YAML bomb), before azure-ai-ml reads it
    try:
        result = validate_job(path=spec, ml_client=None, params_override=override)
    except Exception as err:  # noqa: BLE001 - what azure-ai-ml raises on reading the file
        raise LocalRunError(f"job validate: {spec}: {err}") from None
    return result._to_dict()  # noqa: SLF001 - what az ml prints

