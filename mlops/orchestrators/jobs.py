"""Run a job spec locally: resolve it, pick its run folder, and hand it to its kind's runner
(a command job is one task of the runtime; sweeps and pipelines are many)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from mlops.checks.prepare import prepare_job
from mlops.errors import LocalRunError
from mlops.runtime import (
    AssetMap,
    DebugRequest,
    Job,
    RunSetup,
    Runtime,
    Selection,
    TaskSource,
    check_interrupt,
    command_task,
    experiment_name,
    guarded_run,
    job_outputs,
    run_artifacts,
    run_folder,
    run_in_folder,
    run_task,
    slot,
    spark_task,
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


def finished(job: Job, rt: Runtime) -> int:
    """The job's exit code, from the runner of its kind; a job that completed is known to the
    local workspace by name, with the outputs it declares with `name:` registered."""
    code = run_kind(job, rt)
    return remember(job, rt.shown) if code == 0 else code


def remember(job: Job, folder: Path) -> int:
    """`azureml://jobs/<name>/outputs/<output>` for the next job, and named outputs registered
    (mlops/workspace/jobs.py); 1 when the workspace refused one."""
    from mlops.workspace.jobs import record_job, register_named
    from mlops.workspace.store import Workspace, workspace_root

    assets = None if job.spec.kind == "sweepJob" else job.assets  # a sweep publishes in folder
    outputs = job.data.get("outputs")
    if job.spec.kind == "pipelineJob" and job.data.get("component") is not None:
        from mlops.orchestrators.component_job import pipeline_body  # its component's too

        outputs = pipeline_body(job.data, job.spec.path, job.assets).outputs
    if job.spec.kind == "autoMLJob":
        from mlops.automl.translate import automl_outputs

        outputs = automl_outputs(job.data)
    declared = job_outputs(outputs, assets)
    paths = {name: str(slot(name, spec, folder)) for name, spec in declared.items()}
    try:
        record_job(Workspace(workspace_root()), [job.named, folder.name],
                   folder, paths, artifacts=run_artifacts(folder))
    except OSError as err:
        print(f"error: {job.name} completed, but the local workspace could not record it: "
              f"{err}", file=sys.stderr)
        return 1
    return register_named(outputs, paths, origin=f"job {folder.name}",
                          label=job.name)


def run_kind(job: Job, rt: Runtime) -> int:
    if job.spec.kind == "sweepJob":
        from mlops.orchestrators.sweep import run_sweep_job  # optuna: 0.3 s, sweeps only

        return run_sweep_job(job, rt)
    if job.spec.kind == "pipelineJob":
        from mlops.orchestrators.pipeline import run_pipeline_job

        return run_pipeline_job(job, rt)
    return run_command_job(job, rt)


def run_local(request: JobRequest) -> int:
    """Resolve, then run in the one run set-up (runtime/run_setup.py: signals, lock, run.json,
    tracking), leaving nothing behind when nothing started (a refused spec, Ctrl-C while an
    environment builds). Raises LocalRunError for input errors."""
    with guarded_run() as server:
        job = prepare_job(request.spec, request.sets, request.removes,
                          AssetMap(request.asset_file), env_file=request.env_file)
        if request.selection is not None and job.spec.kind != "pipelineJob":
            raise LocalRunError(f"{request.selection.flag} picks steps of a pipeline; "
                                f"{request.spec} is a {job.spec.kind}")
        check_interrupt()
        folder = run_folder(job, request.run_dir)
        identity = job.identity(folder)
        job = replace(job, named=identity.name)
        setup = RunSetup(folder=folder, identity=identity,
                         max_procs=request.max_procs, env_file=request.env_file,
                         debug=request.debug, force_rerun=request.force_rerun,
                         explain=request.explain, selection=request.selection)
        return run_in_folder(setup, server, lambda rt: finished(job, rt))
