"""`Session`: the one way into the local runtime, for the `azml` command, the make targets'
front doors and the tests. A session is the settings of one piece of work (the maps, how many
processes at once, what to debug); each method is one `az ml` verb's local twin and returns
what az would print (a JSON-ready value), or a job's exit code where a job runs in the
foreground."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from mlops.api import jobs, registry
from mlops.api.assets import AssetView, asset_view
from mlops.api.job_verbs import JobVerbs
from mlops.api.records import find_job
from mlops.api.resource_verbs import ResourceVerbs
from mlops.api.views import JobView, job_view
from mlops.errors import LocalError, LocalRunError
from mlops.runtime import BATCH_JOB, DebugRequest, Selection, usable_cores
from mlops.workspace.records import AssetKind

if TYPE_CHECKING:  # the endpoints' engines are imported on first use: a job never needs them
    from mlops.api import batch_endpoints, batch_jobs, endpoints
    from mlops.api.endpoints import View
    from mlops.api.generic_update import Edit


@dataclass(frozen=True, kw_only=True)
class AssetRequest:
    """`az ml <kind> create`: a spec (`--file`), or a model's or data asset's `--name` and
    `--path` (a local path, a local job's output, a mapped URI)."""

    kind: str | None = None  # model, data, environment, component (a spec's own $schema else)
    spec: Path | None = None
    name: str | None = None
    version: str | None = None
    path: str | None = None
    type: str = ""
    description: str = ""
    registry: str | None = None  # --registry-name: into that registry's local store
    # az's params_override: --set's KEY=VALUE, then what its flags set (--name, --version,
    # --image, ...), applied to the spec in order (or, without --file, making it: environment)
    overrides: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True, kw_only=True)
class AssetUpdate:
    """`az ml <kind> update -n N [-v V | -l L] --set/--add/--remove ... [--stage S]`."""

    kind: str
    name: str
    version: str | None = None
    label: str | None = None
    registry: str | None = None
    edits: tuple[Edit, ...] = ()
    force_string: bool = False
    stage: str | None = None  # a model's --stage
    description: str | None = None  # --description


@dataclass(frozen=True, kw_only=True)
class Session(ResourceVerbs, JobVerbs):
    """Settings shared by every call; building one starts nothing."""

    asset_file: Path | None = None  # else the repository's asset_map (mlops/project.py)
    env_file: Path | None = None  # else the repository's env_map over the tool's stand-ins
    max_procs: int = field(default_factory=usable_cores)
    debug: DebugRequest | None = None
    force_rerun: bool = False  # every pipeline step runs, even where one could be reused
    explain: bool = False  # each pipeline step's whole reuse-key difference, under its line
    from_step: str | None = None  # a pipeline from this step on (local only: --from)
    only_steps: str | None = None  # just these pipeline steps, "a,outer/b" (--only)

    # jobs -------------------------------------------------------------------------------
    def run_job(self, spec: str | Path | None, *, sets: list[str] | None = None,
                removes: list[str] | None = None, run_dir: Path | None = None,
                resume: str | None = None) -> int:
        """Run a job in this process to its end (make local): its exit code. `run_dir` (or
        `resume`, a job's name) is an earlier run's folder: a pipeline resumes there, its
        completed steps reused unless they changed (`spec`: that run's own, when None)."""
        from mlops.orchestrators.jobs import JobRequest, run_local

        if resume is not None:
            spec, run_dir = _resumed(resume, spec, run_dir)
        if spec is None:
            raise LocalRunError("name the job's spec (-f), or a job to resume (--resume)")
        return run_local(JobRequest(
            spec=str(spec), sets=list(sets or []), removes=list(removes or []),
            asset_file=self.asset_file, env_file=self.env_file, run_dir=run_dir,
            force_rerun=self.force_rerun, max_procs=self.max_procs, debug=self.debug,
            explain=self.explain, selection=Selection.parse(self.from_step, self.only_steps)))

    def create_job(self, spec: str | Path, *, sets: list[str] | None = None,
                   removes: list[str] | None = None, name: str | None = None) -> JobView:
        """`az ml job create`: checked now, run in the background; the job as created."""
        if self.debug is not None:
            raise LocalRunError("--debug attaches to a job run in the foreground: "
                                "make local JOB=<spec> DEBUG=... (python -m mlops.run)")
        created = jobs.create(jobs.Submission(
            spec=Path(spec), sets=list(sets or []), removes=list(removes or []), name=name,
            asset_file=self.asset_file, env_file=self.env_file, max_procs=self.max_procs))
        return job_view(created)

    def validate_job(self, spec: Path, *, sets: list[str] | None = None,
                     name: str | None = None) -> dict[str, object]:
        return jobs.validate(spec, list(sets or []), name)

    def show_job(self, name: str) -> JobView:
        return job_view(find_job(name))

    def stream_job(self, name: str, out: TextIO = sys.stdout) -> int:
        """`az ml job stream`: 0 when the job completed, 1 (with its reason) when not."""
        record = jobs.stream(name, out)
        if str(record.status) != "Completed":
            code = record.run.exit_code if record.run else None
            lost = (f": its runner (process {record.pid}) is gone without recording an end "
                    "(killed, or the machine stopped); run the job again") \
                if record.runner_lost else ""
            raise JobEnded(f"job {record.name} ended {record.status}{lost}"
                           + (f" (exit {code})" if code is not None else "")
                           + f"; its log: {record.folder / jobs.RUNNER_LOG}")
        return 0

    def cancel_job(self, name: str, *, wait: bool = True) -> JobView:
        """`az ml job cancel`: the job's processes stopped, the job Canceled."""
        return job_view(jobs.cancel(name, wait=wait))

    def download_job(self, name: str, *, path: Path, output: str | None = None,
                     everything: bool = False) -> list[Path]:
        return jobs.download(find_job(name), path, output=output, everything=everything)


    # assets -----------------------------------------------------------------------------
    def create_asset(self, request: AssetRequest) -> AssetView:
        """`az ml <kind> create -f <spec>`, or `--name --path` (a model or data asset)."""
        from mlops.workspace.store import Draft

        kind = _kind(request.kind) if request.kind else None
        if request.spec is not None or kind == AssetKind.ENVIRONMENT:
            return asset_view(registry.create(request.spec, kind=request.kind,
                                             overrides=request.overrides,
                                             asset_file=self.asset_file,
                                             registry=request.registry))
        if kind not in (AssetKind.MODEL, AssetKind.DATA) or not request.name or \
                request.path is None:
            raise LocalRunError(f"{request.kind} create needs --file <spec>, or --name and "
                                "--path (a model or data asset), or --name and --image or "
                                "--build-context (an environment)")
        given = dict(request.overrides)  # az's Model(name, path, tags, stage, ...): no --set
        draft = Draft(kind=kind, name=request.name, source=None, version=request.version,
                      type=request.type, description=request.description, origin=request.path,
                      tags={str(k): str(v) for k, v in dict(given.get("tags") or {}).items()},
                      stage=str(given.get("stage") or ""))
        return asset_view(registry.create_from(draft, path=request.path,
                                              asset_file=self.asset_file,
                                              registry=request.registry))

    def list_assets(self, kind: str | None, *, name: str | None = None,
                    archived: bool = False, registry_name: str | None = None
                    ) -> list[AssetView]:
        """`az ml <kind> list`: the latest version of each name, or every version of one (no
        kind: every kind); `registry_name`: that registry's (--registry-name)."""
        chosen = _kind(kind) if kind else None
        return [asset_view(r) for r in registry.listed(chosen, name, archived, registry_name)]

    def show_asset(self, kind: str, name: str, *, version: str | None = None,
                   label: str | None = None, registry_name: str | None = None) -> AssetView:
        return asset_view(registry.show(registry.Selection(kind=_kind(kind), name=_named(name),
                                                           version=version, label=label,
                                                           registry=registry_name)))

    def download_model(self, name: str, version: str, path: Path, *,
                       registry_name: str | None = None) -> Path:
        return registry.download(registry.Selection(
            kind=AssetKind.MODEL, name=_named(name), version=version, registry=registry_name),
            path)

    def update_asset(self, request: AssetUpdate) -> AssetView:
        """`az ml model|data|environment update`: description and tags (a model's stage)."""
        from mlops.api.asset_updates import update

        selection = registry.Selection(kind=_kind(request.kind), name=_named(request.name),
                                       version=request.version, label=request.label,
                                       registry=request.registry)
        return asset_view(update(selection, list(request.edits),
                                 force_string=request.force_string,
                                 given={"stage": request.stage,
                                        "description": request.description}))

    def archive_asset(self, kind: str, name: str, *, version: str | None = None,
                      archived: bool = True, registry_name: str | None = None
                      ) -> list[AssetView]:
        """`az ml <kind> archive` (restore: archived=False): no longer @latest."""
        selection = registry.Selection(kind=_kind(kind), name=_named(name), version=version,
                                       registry=registry_name)
        return [asset_view(r) for r in registry.archive(selection, archived)]

    # online endpoints -------------------------------------------------------------------
    def create_endpoint(self, spec: Path | None, *, name: str | None = None,
                        port: int | None = None, auth: str = "",
                        sets: tuple[str, ...] = ()) -> View:
        """`az ml online-endpoint create -f [--set]` (or --name alone): recorded; nothing
        starts until a deployment (local only: the front's `port`, `auth` "none")."""
        return _online().create_endpoint(spec, name=name, port=port, auth=auth, sets=sets)

    def update_endpoint(self, name: str, sets: tuple[str, ...]) -> View:
        """`az ml online-endpoint update -n N --set k=v`, over the endpoint as recorded."""
        return _online().update_endpoint(name, sets)

    def show_endpoint(self, name: str) -> View:
        return _online().endpoint_view(name)

    def list_endpoints(self) -> list[View]:
        return _online().endpoints()

    def delete_endpoint(self, name: str) -> None:
        _online().delete_endpoint(name)

    def update_traffic(self, name: str, *, traffic: str | None, mirror: str | None) -> View:
        """`az ml online-endpoint update --traffic --mirror-traffic`."""
        return _online().update_traffic(name, traffic=traffic, mirror=mirror)

    def invoke(self, name: str, request: Path, *, deployment: str | None = None) -> str:
        return _online().invoke(name, request, deployment)

    def endpoint_credentials(self, name: str) -> dict[str, object]:
        return _online().credentials(name)

    def regenerate_endpoint_key(self, name: str, key_type: str = "primary") -> None:
        _online().regenerate_keys(name, key_type)

    def create_deployment(self, request: endpoints.DeploymentRequest) -> View:
        """`az ml online-deployment create|update -f [--all-traffic]`: its server started."""
        return _online().create_deployment(request)

    def show_deployment(self, endpoint: str, name: str) -> View:
        return _online().deployment_view(endpoint, name)

    def list_deployments(self, endpoint: str) -> list[View]:
        return _online().deployments(endpoint)

    def deployment_logs(self, endpoint: str, name: str, *, lines: int | None = None) -> str:
        return _online().deployment_logs(endpoint, name, lines)

    def delete_deployment(self, endpoint: str, name: str) -> None:
        _online().delete_deployment(endpoint, name)

    # batch endpoints ------------------------------------------------------------------
    def create_batch_endpoint(self, spec: Path | None, *, name: str | None = None,
                              sets: list[str] | None = None) -> View:
        """`az ml batch-endpoint create|update -f` (create: or --name alone): recorded; nothing
        runs until invoked."""
        return _batch().create_endpoint(spec, name=name, sets=sets)

    def update_batch_endpoint(self, name: str, sets: list[str]) -> View:
        return _batch().update_endpoint(name, sets)

    def show_batch_endpoint(self, name: str) -> View:
        return _batch().endpoint_view(name)

    def list_batch_endpoints(self) -> list[View]:
        return _batch().endpoints()

    def delete_batch_endpoint(self, name: str) -> None:
        _batch().delete_endpoint(name)

    def create_batch_deployment(self, request: batch_endpoints.DeploymentRequest, *,
                                update: bool = False) -> View:
        """`az ml batch-deployment create|update -f [--set-default]`: checked and recorded."""
        return _batch().create_deployment(replace(request, asset_file=self.asset_file),
                                                 update=update)

    def show_batch_deployment(self, endpoint: str, name: str) -> View:
        return _batch().deployment_view(endpoint, name)

    def list_batch_deployments(self, endpoint: str) -> list[View]:
        return _batch().deployments(endpoint)

    def delete_batch_deployment(self, endpoint: str, name: str) -> None:
        _batch().delete_deployment(endpoint, name)

    def invoke_batch(self, invocation: batch_jobs.Invocation) -> JobView:
        """`az ml batch-endpoint invoke`: a job, recorded Starting, run in the background."""
        return job_view(_batch_jobs().invoke(replace(
            invocation, asset_file=self.asset_file, env_file=self.env_file,
            max_procs=invocation.max_procs or self.max_procs)))

    def list_batch_jobs(self, endpoint: str, deployment: str | None = None) -> list[JobView]:
        """`az ml batch-endpoint list-jobs`, or `batch-deployment list-jobs` (`deployment`)."""
        return [job_view(r) for r in _batch_jobs().endpoint_jobs(endpoint, deployment)]


def _online():  # -> the module mlops.api.endpoints
    from mlops.api import endpoints

    return endpoints


def _batch():  # -> the module mlops.api.batch_endpoints
    from mlops.api import batch_endpoints

    return batch_endpoints


def _batch_jobs():  # -> the module mlops.api.batch_jobs
    from mlops.api import batch_jobs

    return batch_jobs


def _resumed(name: str, spec: str | Path | None, run_dir: Path | None) -> tuple[str, Path]:
    """The spec and run folder of the job named `name`, to resume it there."""
    record = find_job(name)
    if run_dir is not None and Path(run_dir).resolve() != record.folder.resolve():
        raise LocalRunError(f"--resume {name} runs in its own folder {record.folder}; "
                            f"--run-dir names {run_dir}: give one of them")
    if record.run and record.run.kind == BATCH_JOB:
        raise LocalRunError(f"{name} is a batch endpoint's job: it is never resumed; invoke "
                            "the endpoint again (azml batch-endpoint invoke)")
    recorded = record.run.spec if record.run else None
    if spec is None and not recorded:
        raise LocalRunError(f"job {name}: its run folder records no spec; name it with -f")
    return str(spec or recorded), record.folder


def _kind(text: str | None) -> AssetKind:
    try:
        return AssetKind.parse(text or "")
    except ValueError as err:
        raise LocalRunError(str(err)) from None


def _named(name: str | None) -> str:
    if not name:
        raise LocalRunError("name the asset (--name)")
    return name


class JobEnded(LocalError):
    """A job that did not complete, met by a verb that waits for it (`az ml job stream`: exit
    1, as a job that failed exits 1): neither the input's fault nor the machine's."""

    exit_code = 1
