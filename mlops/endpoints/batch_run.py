"""A batch deployment's job: the deployment run over one input (batch_deployment.py) in the one
run set-up every local job has (runtime/run_setup.py): its run folder locked, its name claimed
in the workspace, run.json Starting (when `azml batch-endpoint invoke` created it), Running,
then Completed, Failed or Canceled (SIGTERM: `azml job cancel`).

On Azure, `az ml batch-endpoint invoke` creates a job of type pipeline named `batchjob-<uuid>`,
its one data input `input_data`, its output `score` (the folder output_file_name is written
into); `az ml job show|stream|download` work on it. The local job is recorded the same way:
spec.yml holds that job as az prints it, and once it completed the workspace knows its output
`score` (the run folder's outputs/), for `azml job download --output-name score` and
`azureml://jobs/<name>/outputs/score`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from mlops.endpoints.batch_deployment import run_batch
from mlops.endpoints.deployment import Deployment, load
from mlops.errors import LocalRunError
from mlops.project import project
from mlops.runtime import (
    BATCH_JOB,
    AssetMap,
    DebugRequest,
    Identity,
    JobStatus,
    RunSetup,
    Runtime,
    folder_job_name,
    guarded_run,
    is_remote,
    read_record,
    run_in_folder,
)
from mlops.specs import SpecData

INPUT = "input_data"  # the one data input of a model deployment's job, as Azure names it
OUTPUT = "score"  # its output
STARTED = {".lock", "run.json", "spec.yml", "runner.log"}  # what invoke leaves before the run


@dataclass(frozen=True, kw_only=True)
class BatchRequest:
    """A batch deployment run over one input: what `azml batch-endpoint invoke` starts (and
    `python -m mlops.batch` runs in the foreground)."""

    deployment: Path
    input: str  # a folder of files, a .zip of one, or a reference (az ml batch-endpoint
    # invoke --input azureml:<data>@latest): the local workspace, then the mapping file
    sets: list[str] = field(default_factory=list)  # the deployment's --set, as created
    model: str | None = None  # a model folder (default: as make serve-local picks it)
    run_dir: Path | None = None
    job_name: str | None = None  # else the run folder's
    endpoint: str = ""  # the batch endpoint invoked ("": the deployment run on its own)
    max_procs: int = 1
    env_file: Path | None = None
    asset_file: Path | None = None
    debug: DebugRequest | None = None  # DEBUG=1 or worker:N: a scoring process to debug
    input_type: str = ""  # mltable: the input's rows (an MLTable folder), as an
    # Input(type="mltable") is scored on Azure; "": a data asset's own type, else uri_folder


def input_type(request: BatchRequest) -> str:
    """The type asked for, else that of the local workspace's data asset the input names (an
    mltable asset is scored by its rows, as on Azure), else uri_folder."""
    if request.input_type:
        return request.input_type
    if is_remote(request.input):
        from mlops.workspace.records import AssetKind
        from mlops.workspace.references import registered

        record = registered(str(request.input), AssetKind.DATA)
        if record is not None and record.type:
            return record.type
    return "uri_folder"


def job_data(request: BatchRequest, *, name: str, deployment: str, kind: str) -> SpecData:
    """The job as `az ml job show` prints a batch endpoint's job (spec.yml): a pipeline job
    named `name`, in the endpoint's experiment, its input and output."""
    return {"type": "pipeline", "name": name, "display_name": name,
            "experiment_name": request.endpoint or "batch-local",
            "inputs": {INPUT: {"type": kind, "path": str(request.input)}},
            "outputs": {OUTPUT: {"type": "uri_folder", "mode": "upload"}},
            "jobs": {}, "settings": {}, "tags": {},
            "properties": {"azureml.batchrun": "true",
                           "azureml.endpointname": request.endpoint,
                           "azureml.deploymentname": deployment}}


def batch_folder(request: BatchRequest, deployment: str) -> Path:
    """The requested run folder (empty, or holding only the Starting record of the invoke that
    made it), else a new one."""
    if request.run_dir is None:
        runs, stamp = project().runs_dir.resolve(), time.strftime("%Y%m%d-%H%M%S")
        folder, n = runs / f"batch-{deployment}-{stamp}", 1
        while folder.exists():
            n += 1
            folder = runs / f"batch-{deployment}-{stamp}-{n}"
        return folder
    folder = request.run_dir.resolve()
    held = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
    earlier = read_record(folder) if "run.json" in held else None
    starting = earlier is not None and earlier.kind == BATCH_JOB and \
        earlier.status == JobStatus.STARTING
    if held and not (held <= STARTED and starting):
        raise LocalRunError(f"{folder} is not empty: use a new --run-dir (a batch job is "
                            "never resumed: invoke the endpoint again)")
    return folder


def identity(request: BatchRequest, *, deployment: str, folder: Path, kind: str) -> Identity:
    """What run.json and spec.yml record: the same for the invoke that starts the job (its
    Starting record) and for the run itself."""
    name = request.job_name or folder_job_name(folder)
    return Identity(kind=BATCH_JOB, spec=request.deployment, name=name,
                    data=job_data(request, name=name, deployment=deployment, kind=kind))


def scored(deployment: Deployment, source: Path, rt: Runtime, *, tabular: bool,
           name: str) -> int:
    """The run's exit code; once it completed, its output `score` known to the workspace."""
    code = run_batch(deployment, source, rt, tabular=tabular)
    if code == 0:
        from mlops.workspace.jobs import record_job
        from mlops.workspace.store import Workspace, workspace_root

        record_job(Workspace(workspace_root()), [name], rt.shown,
                   {OUTPUT: str(rt.shown / "outputs")})
    return code


def run_local(request: BatchRequest) -> int:
    """0 when every mini-batch completed, 1 when the run failed, 128 + the signal when stopped;
    raises LocalRunError for input errors (nothing then starts)."""
    with guarded_run() as server:
        deployment = load(request.deployment, "batch-deployment", request.model,
                          request.asset_file, sets=request.sets)
        source = AssetMap(request.asset_file).local_path(str(request.input), "--input",
                                                         Path.cwd(), must_exist=False)
        folder = batch_folder(request, deployment.name)
        if request.debug is not None:
            request.debug.check([()])
        kind = input_type(request)
        run = identity(request, deployment=deployment.name, folder=folder, kind=kind)
        setup = RunSetup(folder=folder, identity=run, max_procs=request.max_procs,
                         env_file=request.env_file, debug=request.debug)
        return run_in_folder(setup, server, lambda rt: scored(
            deployment, source, rt, tabular=kind == "mltable", name=run.name))
