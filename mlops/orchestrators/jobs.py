"""Run a job spec locally: resolve it, pick its run folder, and hand it to its kind's runner
(a command job is one task of the runtime; sweeps and pipelines are many)."""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mlops.checks.prepare import prepare_job
from mlops.environments.activation import Environments
from mlops.errors import LocalRunError
from mlops.project import tracking_uri
from mlops.runtime import (
    AssetMap,
    DebugRequest,
    Job,
    Runtime,
    Selection,
    Server,
    TaskSource,
    Tracking,
    check_interrupt,
    command_task,
    end_record,
    experiment_name,
    install_signal_handlers,
    job_name,
    job_outputs,
    locked,
    restore_signal_handlers,
    run_folder,
    run_task,
    safe_root,
    slot,
    spark_task,
    write_record,
)
from mlops.specs import SpecData


@dataclass(frozen=True, kw_only=True)
class JobRequest:
    """What `make local` asks for: a spec, its overrides, and where and how to run it."""

    spec: str
    sets: list[str] = field(default_factory=list)
    removes: list[str] = field(default_factory=list)
    asset_file: Path | None = None  # azureml: assets and URLs -> local paths (else the repo's)
    env_file: Path | None = None  # curated, registry, image environments (else the tool's)
    run_dir: Path | None = None  # a folder of an earlier run: a pipeline resumes there
    force_rerun: bool = False
    max_procs: int = 1
    debug: DebugRequest | None = None  # DEBUG=: the one process to debug
    explain: bool = False  # --explain: each step's whole reuse-key difference
    selection: Selection | None = None  # --from / --only: part of a pipeline


def services_note(data: SpecData, wd: Path) -> str:
    """What a job's `services:` (VS Code, JupyterLab, TensorBoard, SSH into its node) become
    here, where the job's node is this machine: "" when it asks for none."""
    services = data.get("services") or {}
    if not isinstance(services, dict) or not services:
        return ""
    named = ", ".join(f"{name} ({spec.get('type', '?')})" if isinstance(spec, dict)
                      else str(name) for name, spec in services.items())
    logs = [spec.get("log_dir") for spec in services.values() if isinstance(spec, dict)]
    board = next((f"; TensorBoard: tensorboard --logdir {wd / d}" for d in logs if d), "")
    return (f"note: services {named} are Azure's sessions into the job's node and are not "
            f"started here; the job runs on this machine: open {wd} in your own tools{board}")


def run_command_job(job: Job, rt: Runtime) -> int:
    path = job.spec.path
    if rt.debug is not None:
        rt.debug.check([()])
    kind = {"sparkJob": "spark", "autoMLJob": "automl"}.get(job.spec.kind, "command")
    source = TaskSource(definition=definition_of(job), base=path.parent, folder=rt.root,
                        assets=job.assets, where=f"{path}: {kind}", name=job.name,
                        experiment=experiment_name(job.data),
                        tags={"mlops.spec": str(path), "mlops.local": "true"})
    if kind == "spark":
        built = spark_task(source)
        task = built.task
        for note in built.notes:
            print(note, file=sys.stderr)
    else:
        task = command_task(source)
    print(f"{job.name}: running in {rt.shown / 'wd'}")
    if note := services_note(job.data, rt.root / "wd"):
        print(note, file=sys.stderr)
    result = run_task(task, rt)
    status = result.status if result.code == 0 else \
        f"{result.status} (exit {result.code}; log {result.log})"
    print(f"{job.name}: {status}\n  outputs: {rt.shown / 'outputs'}\n  MLflow run: {result.run_id}")
    return result.code


def definition_of(job: Job) -> SpecData:
    """What runs: the spec itself, or for an AutoML job the command that searches
    (mlops/automl/translate.py)."""
    if job.spec.kind != "autoMLJob":
        return job.data
    from mlops.automl.translate import automl_command

    built = automl_command(job.data, str(job.spec.path))
    for note in built.notes:
        print(note, file=sys.stderr)
    return built.definition


def run_job(job: Job, rt: Runtime) -> int:
    """The job's exit code, from the runner of its kind; a job that completed is known to the
    local workspace by name, with the outputs it declares with `name:` registered."""
    write_record(job, rt.root)
    try:
        code = run_kind(job, rt)
        code = remember(job, rt.shown) if code == 0 else code
    except KeyboardInterrupt as err:
        end_record(rt.root, 128 + getattr(err, "signum", 2))
        raise
    except BaseException:
        end_record(rt.root, 1)
        raise
    end_record(rt.root, code)
    return code


def remember(job: Job, folder: Path) -> int:
    """`azureml://jobs/<name>/outputs/<output>` for the next job, and named outputs registered
    (mlops/workspace/jobs.py); 1 when the workspace refused one."""
    from mlops.workspace.jobs import record_job, register_named
    from mlops.workspace.store import Workspace, workspace_root

    assets = None if job.spec.kind == "sweepJob" else job.assets  # a sweep publishes in folder
    outputs = job.data.get("outputs")
    if job.spec.kind == "autoMLJob":
        from mlops.automl.translate import automl_outputs

        outputs = automl_outputs(job.data)
    declared = job_outputs(outputs, assets)
    paths = {name: str(slot(name, spec, folder)) for name, spec in declared.items()}
    try:
        record_job(Workspace(workspace_root()), [str(job.data.get("name") or ""), folder.name],
                   folder, paths)
    except OSError as err:
        print(f"error: {job.name} completed, but the local workspace could not record it: "
              f"{err}", file=sys.stderr)
        return 1
    return register_named(outputs, paths, origin=f"job {folder.name}",
                          label=job.name)


def claim(job: Job, folder: Path) -> None:
    """The job's name (its spec's `name:`, else its run folder's), unique in the workspace as on
    Azure (mlops/workspace/jobs.py): `azml job show -n <name>` finds it from the start."""
    from mlops.workspace.jobs import claim_name
    from mlops.workspace.store import Workspace, workspace_root

    claim_name(Workspace(workspace_root()), job_name(job, folder), folder.resolve())


def run_kind(job: Job, rt: Runtime) -> int:
    if job.spec.kind == "sweepJob":
        from mlops.orchestrators.sweep import run_sweep_job  # optuna: 0.3 s, sweeps only

        return run_sweep_job(job, rt)
    if job.spec.kind == "pipelineJob":
        from mlops.orchestrators.pipeline import run_pipeline_job

        return run_pipeline_job(job, rt)
    return run_command_job(job, rt)


@contextlib.contextmanager
def in_folder(folder: Path) -> Iterator[None]:
    """A write the machine refused without naming its file names the run folder."""
    try:
        yield
    except OSError as err:
        if err.filename is None:
            err.filename = str(folder)
        raise


def run_local(request: JobRequest) -> int:
    """Resolve, run, and leave nothing behind when nothing started (a refused spec, Ctrl-C
    while an environment builds). Raises LocalRunError for input errors."""
    handlers = install_signal_handlers()
    bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # the lint imports entry
    server = Server(tracking_uri())  # points: no .pyc into the sources; nothing starts yet
    try:
        job = prepare_job(request.spec, request.sets, request.removes,
                          AssetMap(request.asset_file))
        if request.selection is not None and job.spec.kind != "pipelineJob":
            raise LocalRunError(f"{request.selection.flag} picks steps of a pipeline; "
                                f"{request.spec} is a {job.spec.kind}")
        check_interrupt()
        folder = run_folder(job, request.run_dir)
        created = not folder.exists()
        with in_folder(folder), locked(folder):
            rt = None
            try:
                claim(job, folder)
                rt = Runtime(root=safe_root(folder), max_procs=max(1, request.max_procs),
                             tracking=Tracking(server), environments=Environments(request.env_file),
                             force_rerun=request.force_rerun, debug=request.debug,
                             explain=request.explain, selection=request.selection)
                rt.tracking.connect()  # the warm server (started now if none is) or the store
                return run_job(job, rt)
            except BaseException:
                if created and not (rt and rt.started):  # nothing ran: leave nothing behind
                    shutil.rmtree(folder, ignore_errors=True)
                raise
    finally:
        server.close()
        sys.dont_write_bytecode = bytecode
        restore_signal_handlers(handlers)
