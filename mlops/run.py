"""Run an Azure ML CLI v2 job spec on this machine, as Azure would run it: no Docker, no Azure.

    python -m mlops.run jobs/train.yml [--set inputs.epochs=1 ...] [--run-dir runs/x]

The spec is checked as `az ml job create` checks it (azure-ai-ml's own loader and validation,
plus what the service refuses); `--set` works as the CLI's. Command jobs, sweep trials and
pipeline steps then run through one runtime (mlops/runtime/). The exit code is the job's;
2 when the spec cannot run; 128 + the signal number when interrupted.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from mlops import exit_with, runtime
from mlops.checks.overrides import apply_removals, apply_sets, parse_sets
from mlops.environments.envspec import ENV_MAP
from mlops.envs import Environments
from mlops.errors import LocalRunError
from mlops.runtime import launch
from mlops.runtime.mlflow_runs import Tracking, tracking_uri
from mlops.runtime.mlflow_server import Server
from mlops.runtime.tasks import command_task, experiment_name
from mlops.runtime.uris import ASSET_MAP, AssetMap
from mlops.specs import JOB_TYPES, ROOT, Spec, SpecError, load_spec

RUNS = ROOT / "runs"


@dataclass
class Job:
    """A spec that passed Azure's checks, with the overrides it was run with."""

    spec: Spec
    assets: AssetMap

    @property
    def data(self) -> dict:
        return self.spec.data

    @property
    def name(self) -> str:
        """The display name: the MLflow run's name, a label only (as on Azure)."""
        return str(self.data.get("display_name") or self.spec.path.stem)

    @property
    def slug(self) -> str:
        """The run folder's stem: a shell-safe slug of the display name (or the file's name);
        Azure generates a job's name, the display name may hold spaces and parentheses."""
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", self.name).strip("-.")
        return slug or re.sub(r"[^A-Za-z0-9_.-]+", "-", self.spec.path.stem) or "job"


def prepare(spec_path: str, sets: list[str], removes: list[str], assets: Path) -> Job:
    """Load, override, and refuse what Azure would refuse; print what it would only warn about."""
    from mlops.validate import check

    spec = load_spec(spec_path, role="job")
    apply_removals(apply_sets(spec.data, parse_sets(sets, spec.path), spec.path), removes,
                   spec.path)
    if spec.kind not in JOB_TYPES.values():
        raise LocalRunError(f"{spec_path}: a {spec.kind or 'spec of unknown type'} is not a job; "
                            "run a command, sweep or pipeline job spec (a component runs as a "
                            "pipeline step)")
    findings = check(spec, for_run=True)
    for finding in findings:
        if not finding.is_error:
            print(finding, file=sys.stderr)
    errors = [str(f) for f in findings if f.is_error]
    if errors:
        raise LocalRunError("\n".join(errors) + "\nAzure would refuse this spec: fix it first")
    return Job(spec, AssetMap(assets))


def run_folder(job: Job, requested: Path | None) -> Path:
    """A new runs/<name>-<time>, or the requested folder (a rerun resumes a command job)."""
    if requested is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        folder, n = RUNS / f"{job.slug}-{stamp}", 1
        while folder.exists():
            n += 1
            folder = RUNS / f"{job.slug}-{stamp}-{n}"
        return folder
    folder = requested.resolve()
    previous = folder / "run.json"
    if previous.is_file():
        kind = json.loads(previous.read_text()).get("kind")
        if kind == "sweepJob":
            raise LocalRunError(f"{folder} holds a sweep already; a sweep cannot be resumed (its "
                                "trials would mix parameters). Use a new --run-dir")
        if kind != job.spec.kind:
            raise LocalRunError(f"{folder} holds a {kind} run; a {job.spec.kind} cannot reuse it. "
                                "Use a new --run-dir")
    return folder


def services_note(data: dict, wd: Path) -> str:
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


def run_command_job(job: Job, rt: runtime.Runtime) -> int:
    path = job.spec.path
    task = command_task(job.data, path.parent, rt.root, job.assets, f"{path}: command",
                        job.name, experiment_name(job.data),
                        tags={"mlops.spec": str(path), "mlops.local": "true"})
    print(f"{job.name}: running in {rt.root / 'wd'}")
    if note := services_note(job.data, rt.root / "wd"):
        print(note, file=sys.stderr)
    result = runtime.run(task, rt)
    status = result.status if result.code == 0 else \
        f"{result.status} (exit {result.code}; log {result.log})"
    print(f"{job.name}: {status}\n  outputs: {rt.root / 'outputs'}\n  MLflow run: {result.run_id}")
    return result.code


def execute(job: Job, rt: runtime.Runtime) -> int:
    rt.root.mkdir(parents=True, exist_ok=True)
    (rt.root / "spec.yml").write_text(yaml.safe_dump(job.data, sort_keys=False))
    record = rt.root / "run.json"
    earlier = json.loads(record.read_text()) if record.is_file() else {}
    record.write_text(json.dumps({**earlier, "kind": job.spec.kind,
                                  "spec": str(job.spec.path)}) + "\n")
    if job.spec.kind == "sweepJob":
        from mlops.orchestrators.sweep import run_sweep_job

        return run_sweep_job(job, rt)
    if job.spec.kind == "pipelineJob":
        from mlops.orchestrators.pipeline import run_pipeline_job

        return run_pipeline_job(job, rt)
    return run_command_job(job, rt)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Run a job spec locally (no Docker, no Azure).")
    parser.add_argument("spec", help="a command, sweep or pipeline job spec")
    parser.add_argument("--set", action="append", nargs="+", default=[], metavar="KEY=VALUE",
                        help="override a spec value, as az ml job create --set does")
    parser.add_argument("--remove", action="append", default=[], metavar="KEY",
                        help="delete a spec key, as az's generic --remove does")
    parser.add_argument("--assets", type=Path, default=ASSET_MAP,
                        help="mapping of azureml: assets and URLs to local paths")
    parser.add_argument("--envs", type=Path, default=ENV_MAP,
                        help="mapping of curated, registry and image environments to packages")
    parser.add_argument("--run-dir", type=Path, help="reuse a run folder (resumes a command job)")
    parser.add_argument("--force-rerun", action="store_true",
                        help="run every pipeline step, even where an earlier one can be reused")
    parser.add_argument("--max-procs", type=int, default=launch.usable_cores(),
                        help="cap on processes run at once (default: the cores available)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handlers = launch.install_signal_handlers()
    bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # the lint imports entry
    try:  # points: write no .pyc into the sources being run
        return _main(args)
    finally:
        sys.dont_write_bytecode = bytecode
        launch.restore_signal_handlers(handlers)


def _main(args: argparse.Namespace) -> int:
    rt = None
    created = False
    server = Server(tracking_uri())  # starts when a job first asks
    try:
        job = prepare(args.spec, [s for group in args.set for s in group], args.remove,
                      args.assets)
        launch.check_interrupt()
        folder = run_folder(job, args.run_dir)
        created = not folder.exists()
        rt = runtime.Runtime(folder, max(1, args.max_procs), Tracking(server),
                             Environments(args.envs), force_rerun=args.force_rerun)
        return execute(job, rt)
    except (LocalRunError, SpecError) as err:
        print(f"error: {err}", file=sys.stderr)
        if created and rt is not None and not rt.started:
            shutil.rmtree(rt.root, ignore_errors=True)  # nothing ran: leave nothing behind
        return 2
    except KeyboardInterrupt as err:
        if created and rt is not None and not rt.started:
            shutil.rmtree(rt.root, ignore_errors=True)
        return 128 + getattr(err, "signum", 2)
    finally:
        server.close()


if __name__ == "__main__":
    exit_with(main)
