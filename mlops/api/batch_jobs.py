"""`az ml batch-endpoint invoke` and `list-jobs`: a batch endpoint's jobs.

Invoking picks the deployment (--deployment-name, else the endpoint's default), checks the
input (a local folder or file must exist; an `azureml:` data asset, job output or mapped URI is
resolved as jobs resolve theirs), names the job (`batchjob-<uuid>` as Azure does, or
--job-name), records it Starting and starts its runner in the background (`python -m
mlops.batch`, the same runner, through the one run set-up), as `azml job create` starts a job:
`azml job show|stream|cancel|download` work on it. What it prints is the job, as az prints it.

The job-level settings az takes (--mini-batch-size, --instance-count, --output-file-name, and
the same keys under --set) override the deployment's for this job only. Outputs stay in the run
folder (`azml job download -n <job> --output-name score`): --output-path, a datastore on Azure,
is noted and ignored.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from mlops.api import batch_endpoints as state
from mlops.api.jobs import runtime_module, start
from mlops.api.records import JobRecord, all_jobs
from mlops.checks.overrides import apply_sets, parse_sets
from mlops.endpoints.batch_deployment import check_input
from mlops.endpoints.batch_run import BatchRequest, identity, input_type
from mlops.errors import LocalRunError
from mlops.project import project
from mlops.runtime import BATCH_JOB, AssetMap, is_remote
from mlops.specs import SpecData, load_spec

DATA_TYPES = ("uri_folder", "uri_file", "mltable")
JOB_FILE = "batch-job.yml"  # a pipeline deployment's job, in its run folder
# a job's settings (BatchJobSchema's) -> where a model deployment's spec holds them
JOB_SETTINGS = {"mini_batch_size": "settings.mini_batch_size",
                "output_file_name": "settings.output_file_name",
                "error_threshold": "settings.error_threshold",
                "logging_level": "settings.logging_level",
                "max_concurrency_per_instance": "settings.max_concurrency_per_instance",
                "instance_count": "resources.instance_count"}


@dataclass(frozen=True, kw_only=True)
class Invocation:
    """`az ml batch-endpoint invoke`'s arguments, and how the job runs here (local only:
    max_procs, debug)."""

    endpoint: str
    deployment: str | None = None
    input: str | None = None
    input_type: str | None = None
    inputs: str | None = None  # --inputs: a JSON object of named inputs
    file: Path | None = None  # -f: a YAML of `inputs:` (and `outputs:`)
    sets: list[str] = field(default_factory=list)  # --set KEY=VALUE: inputs.*, job settings
    job_name: str | None = None
    settings: dict[str, str] = field(default_factory=dict)  # --mini-batch-size, ...
    max_procs: int = 0  # 0: the session's
    debug: list[str] = field(default_factory=list)  # --debug/--debug-port, for the runner
    asset_file: Path | None = None
    env_file: Path | None = None


def named_inputs(invocation: Invocation) -> SpecData:
    """Every input the invocation names: -f's `inputs:`, --inputs, then --set inputs.*."""
    found: SpecData = {}
    if invocation.file is not None:
        found.update(load_spec(invocation.file).data.get("inputs") or {})
    if invocation.inputs:
        try:
            given = json.loads(invocation.inputs)
        except ValueError as err:
            raise LocalRunError(f"--inputs: not a JSON object ({err})") from None
        if not isinstance(given, dict):
            raise LocalRunError("--inputs: give a JSON object of named inputs")
        found.update(given)
    sets = [s for s in invocation.sets if s.startswith("inputs.")]
    return apply_sets({"inputs": found}, parse_sets(sets, Path("--set")), Path("--set"))["inputs"]


def named_outputs(invocation: Invocation) -> SpecData:
    """Every output the invocation names: -f's `outputs:`, then --set outputs.*."""
    found = dict(load_spec(invocation.file).data.get("outputs") or {}) \
        if invocation.file is not None else {}
    sets = [s for s in invocation.sets if s.startswith("outputs.")]
    return apply_sets({"outputs": found}, parse_sets(sets, Path("--set")),
                      Path("--set"))["outputs"]


def the_input(invocation: Invocation) -> tuple[str, str]:
    """The one data input a model deployment scores: (its path or reference, its type, ""
    when the type is to be found from the data asset)."""
    if invocation.input:
        return invocation.input, invocation.input_type or ""
    data = {k: v for k, v in named_inputs(invocation).items()
            if not isinstance(v, dict) or v.get("type") not in ("string", "number", "integer",
                                                                  "boolean")}
    if len(data) != 1:
        raise LocalRunError("a model deployment scores one data input: give --input <folder, "
                            "file or azureml:...> (or one input in --inputs / -f), "
                            f"not {len(data)}")
    (key, value), = data.items()
    path = value.get("path") if isinstance(value, dict) else value
    kind = str(value.get("type") or "") if isinstance(value, dict) else ""
    if not path or (kind and kind not in DATA_TYPES):
        raise LocalRunError(f"input {key!r}: give its path and a type of "
                            f"{', '.join(DATA_TYPES)}")
    return str(path), kind or invocation.input_type or ""


def job_sets(invocation: Invocation, deployment: SpecData) -> list[str]:
    """The job's settings as overrides of the deployment's (flat specs hold them at the top)."""
    nested = "settings" in deployment or deployment.get("type") == "model"
    given = dict(invocation.settings)
    for item in invocation.sets:
        key, _, value = item.partition("=")
        if key in JOB_SETTINGS:
            given[key] = value
        elif not key.startswith(("inputs.", "outputs.")):
            raise LocalRunError(f"--set {item}: an invoke sets inputs.*, outputs.* or a job "
                                f"setting ({', '.join(JOB_SETTINGS)})")
    return [f"{JOB_SETTINGS[k] if nested or k == 'instance_count' else k}={v}"
            for k, v in given.items()]


def _deployment(invocation: Invocation) -> tuple[str, SpecData]:
    endpoint = state.endpoint_spec(invocation.endpoint)
    name = invocation.deployment or str((endpoint.get("defaults") or {})
                                        .get("deployment_name") or "")
    if not name:
        raise LocalRunError(f"batch endpoint {invocation.endpoint} has no default deployment: "
                            "give --deployment-name, or create one with --set-default")
    return name, state.deployment_record(invocation.endpoint, name)


def _source(path: str, kind: str, invocation: Invocation) -> str:
    """A local input as an absolute path, checked; a reference as given (the runner resolves
    it as jobs resolve theirs)."""
    local = AssetMap(invocation.asset_file).local_path(path, "--input", Path.cwd(),
                                                       must_exist=False)
    check_input(local.resolve(), tabular=kind == "mltable")
    return path if is_remote(path) else str(Path(path).resolve())


def invoke(invocation: Invocation) -> JobRecord:
    """The job, recorded Starting and started in the background (module docstring)."""
    name, record = _deployment(invocation)
    spec = Path(str(record["source"]))
    if load_spec(spec, "batch-deployment").kind == state.PIPELINE:
        return invoke_pipeline(invocation, record)
    path, kind = the_input(invocation)
    sets = list(record.get("sets") or []) + job_sets(invocation, load_spec(spec).data)
    request = BatchRequest(deployment=spec, input=_source(path, kind, invocation), sets=sets,
                           model=record.get("model"), endpoint=invocation.endpoint,
                           job_name=invocation.job_name or f"batchjob-{uuid.uuid4()}",
                           max_procs=invocation.max_procs, input_type=kind,
                           env_file=invocation.env_file, asset_file=invocation.asset_file)
    folder = project().runs_dir.resolve() / request.job_name
    if folder.exists():
        raise LocalRunError(f"job name {request.job_name!r} is taken by the local run {folder}: "
                            "names are unique in a workspace; give another --job-name")
    run = identity(request, deployment=name, folder=folder, kind=input_type(request))
    start(run, folder, runner_argv(request, folder, invocation.debug))
    return JobRecord.at(run.name, folder)


def invoke_pipeline(invocation: Invocation, record: SpecData) -> JobRecord:
    """A pipeline component deployment's job: the pipeline job the service would run
    (mlops/endpoints/pipeline_deployment.py), written into its run folder as `batch-job.yml`,
    checked as `azml job create` checks a job, recorded Starting and run in the background by
    the pipeline runner (`python -m mlops.run`)."""
    from mlops.api.jobs import Submission
    from mlops.checks.prepare import prepare_job
    from mlops.endpoints import pipeline_deployment as pipeline

    deployment = pipeline.load_pipeline_deployment(
        Path(str(record["source"])), list(record.get("sets") or []), invocation.asset_file)
    job_sets(invocation, {})  # what an invoke may --set
    if invocation.settings or any(s.split("=", 1)[0] in JOB_SETTINGS for s in invocation.sets):
        print("note: a pipeline component deployment's job has no mini-batch settings: "
              f"{', '.join(JOB_SETTINGS)} are not used", file=sys.stderr)
    name = invocation.job_name or f"batchjob-{uuid.uuid4()}"
    folder = project().runs_dir.resolve() / name
    if folder.exists():
        raise LocalRunError(f"job name {name!r} is taken by the local run {folder}: names are "
                            "unique in a workspace; give another --job-name")
    data = pipeline.job_spec(deployment, pipeline.JobRequest(
        name=name, endpoint=invocation.endpoint, outputs=pipeline.invoke_outputs(
            named_outputs(invocation)),
        inputs=pipeline.invoke_inputs(named_inputs(invocation), Path.cwd())))
    submission = Submission(spec=folder / JOB_FILE, asset_file=invocation.asset_file,
                            env_file=invocation.env_file, max_procs=invocation.max_procs or 1)
    try:
        folder.mkdir(parents=True)
        submission.spec.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        job = prepare_job(submission.spec, [], [], AssetMap(invocation.asset_file),
                          env_file=invocation.env_file)
    except LocalRunError as err:  # the job file is removed with its folder: name the invoke
        shutil.rmtree(folder, ignore_errors=True)
        raise LocalRunError(invoke_said(str(err), submission.spec, invocation)) from None
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)  # nothing started: leave nothing behind
        raise
    start(job.identity(folder), folder, [*submission.runner_argv(folder), *invocation.debug])
    return JobRecord.at(name, folder)


def invoke_said(message: str, job_file: Path, invocation: Invocation) -> str:
    """A refusal of the pipeline job an invoke makes, said of the invoke: the job's file (its
    path as given, absolute or from here, and a line number) is gone with its folder."""
    said = f"batch-endpoint invoke -n {invocation.endpoint} (the pipeline job its inputs make)"
    names = {str(job_file)}
    with contextlib.suppress(ValueError):
        names.add(str(job_file.relative_to(Path.cwd())))
    for name in sorted(names, key=len, reverse=True):
        message = re.sub(re.escape(name) + r"(:\d+)?", lambda _: said, message)
    return message


def runner_argv(request: BatchRequest, folder: Path, debug: list[str]) -> list[str]:
    argv = [*runtime_module("mlops.batch"), str(request.deployment), "--input",
            request.input, "--run-dir", str(folder), "--job-name", str(request.job_name),
            "--endpoint", request.endpoint, "--max-procs", str(request.max_procs), *debug]
    for flag, value in (("--input-type", request.input_type), ("--model", request.model),
                        ("--assets", request.asset_file), ("--envs", request.env_file)):
        if value:
            argv += [flag, str(value)]
    for value in request.sets:
        argv += ["--set", value]
    return argv


def endpoint_jobs(endpoint: str, deployment: str | None = None) -> list[JobRecord]:
    """`az ml batch-endpoint list-jobs` (the endpoint's jobs here, newest first), or
    `batch-deployment list-jobs` (those of one of its deployments)."""
    state.endpoint_spec(endpoint)
    if deployment is not None:
        state.deployment_record(endpoint, deployment)
    found = []
    for record in all_jobs():
        if record.run and record.run.kind in (BATCH_JOB, "pipelineJob"):
            properties = _properties_of(record)
            if properties.get("azureml.endpointname") == endpoint and deployment in (
                    None, properties.get("azureml.deploymentname")):
                found.append(record)
    return found


def _properties_of(record: JobRecord) -> dict[str, str]:
    try:
        data = yaml.safe_load((record.folder / "spec.yml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    properties = data.get("properties") if isinstance(data, dict) else None
    return {str(k): str(v) for k, v in (properties or {}).items()} if isinstance(
        properties, dict) else {}

