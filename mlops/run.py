"""Run an Azure ML job spec of this repo locally, without Docker or Azure.

    python -m mlops.run jobs/train.yml [--set inputs.epochs=1 ...]

Command jobs run their command in the project venv (distribution: pytorch through torchrun);
sweeps run their trials through Optuna with Azure's early-termination policies; pipelines run
their steps in dependency order. Outputs land in runs/<display name>-<timestamp>/; MLflow runs land
in the local store under the spec's experiment. The exit code is the job's.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import execute
from .resolve import (
    ASSET_MAP,
    LocalRunError,
    apply_overrides,
    apply_removals,
    load_asset_map,
    render_command,
    resolve_inputs,
)
from .specs import ROOT, Spec, SpecError, load_spec
from .validate import lint_layer, schema_layer

VENV_BIN = Path(sys.executable).parent


@dataclass
class Context:
    spec: Spec
    run_dir: Path
    asset_map: dict
    map_file: Path
    max_procs: int
    tracking: execute.Tracking
    warned: set = field(default_factory=set)


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def check_environment_pins(environment, ctx: Context) -> None:
    """Warn once when the spec's environment pins another torch/torchvision than the venv."""
    name = str(environment or "").removeprefix("azureml:").split("@")[0].split(":")[0]
    for env_file in (ROOT / "environments").glob("*.yml"):
        data = load_spec(env_file).data
        if data.get("name") != name or not data.get("conda_file"):
            continue
        conda = (env_file.parent / data["conda_file"]).read_text()
        for package in ("torch", "torchvision"):
            pinned = re.search(rf"^\s*-\s*{package}==([\w.]+)\s*$", conda, re.MULTILINE)
            have = importlib.metadata.version(package).split("+")[0]
            if pinned and pinned.group(1) != have and package not in ctx.warned:
                ctx.warned.add(package)
                print(f"warning: {env_file.name} pins {package}=={pinned.group(1)} but this venv "
                      f"has {have}: local results may differ from Azure (make setup)",
                      file=sys.stderr)


def process_env(extra: dict | None, run_id: str | None, threads: int | None = None) -> dict:
    env = {**os.environ, **{k: str(v) for k, v in (extra or {}).items()}}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"  # `python` is the venv's
    if run_id:
        env["MLFLOW_RUN_ID"] = run_id
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def launcher(command: str, job: dict, ctx: Context, key: str) -> str:
    """distribution: pytorch -> torchrun --standalone with instance_count x processes/node."""
    distribution = job.get("distribution") or {}
    kind = str(distribution.get("type", "")).lower()
    if not kind:
        return command
    if kind != "pytorch":
        raise LocalRunError(f"{ctx.spec.path}: distribution.type {kind} is not supported "
                            "locally (only pytorch, through torchrun)")
    instances = int((job.get("resources") or {}).get("instance_count", 1))
    wanted = instances * int(distribution.get("process_count_per_instance", 1))
    nproc = max(1, min(wanted, ctx.max_procs))
    if nproc < wanted:
        print(f"note: {wanted} processes requested, running {nproc} (--max-procs)",
              file=sys.stderr)
    match = re.match(r"^\s*python3?\s+", command)
    if not match:
        raise LocalRunError(f"{ctx.spec.path}: {key}: a distributed command must start with "
                            "`python` to run under torchrun locally")
    torchrun = VENV_BIN / "torchrun"
    return f"{torchrun} --standalone --nproc_per_node {nproc} {command[match.end():]}"


def output_dirs(outputs: dict, folder: Path) -> dict[str, str]:
    paths = {}
    for name in outputs or {}:
        path = folder / name
        path.mkdir(parents=True, exist_ok=True)
        paths[name] = str(path)
    return paths


def run_command_job(ctx: Context) -> int:
    job, path = ctx.spec.data, ctx.spec.path
    check_environment_pins(job.get("environment"), ctx)
    values = {"inputs": resolve_inputs(job.get("inputs"), path, ctx.asset_map, ctx.map_file),
              "outputs": output_dirs(job.get("outputs"), ctx.run_dir / "outputs")}
    command = launcher(render_command(str(job["command"]), values, path, "command"), job, ctx,
                       "command")
    name = job.get("display_name") or path.stem
    run_id = ctx.tracking.start(job.get("experiment_name") or "Default", name,
                                {"mlops.spec": str(path), "mlops.local": "true"})
    cwd = (path.parent / job["code"]).resolve() if job.get("code") else path.parent
    print(f"{name}: {command}\n  cwd {cwd}\n  outputs {ctx.run_dir / 'outputs'}")
    proc = execute.start("", command, cwd, process_env(job.get("environment_variables"), run_id),
                         ctx.run_dir / "log.txt", echo=True)
    try:
        code = execute.wait(proc)
    except KeyboardInterrupt:
        ctx.tracking.finish(run_id, "KILLED")
        return 130
    ctx.tracking.finish(run_id, "FINISHED" if code == 0 else "FAILED")
    status = "Completed" if code == 0 else f"Failed (exit {code}; log {ctx.run_dir / 'log.txt'})"
    print(f"{name}: {status}\n  outputs: {ctx.run_dir / 'outputs'}\n  MLflow run: {run_id}")
    return code


def prepare(spec_path: str, sets: list[str], removes: list[str], map_file: Path,
            run_dir: Path | None, max_procs: int) -> Context:
    spec = load_spec(spec_path)
    spec.data = apply_removals(apply_overrides(spec.data, sets, spec.path), removes, spec.path)
    problems = schema_layer(spec) or lint_layer(spec)
    if problems:
        raise LocalRunError("\n".join(map(str, problems)))
    name = spec.data.get("display_name") or spec.path.stem
    run_dir = run_dir or ROOT / "runs" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(spec.path, run_dir / "spec.yml")
    return Context(spec, run_dir.resolve(), load_asset_map(map_file), map_file, max_procs,
                   execute.Tracking())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a job spec locally (no Docker, no Azure).")
    parser.add_argument("spec", help="a command, sweep or pipeline job spec")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a spec value, as az ml job create --set does")
    parser.add_argument("--remove", action="append", default=[], metavar="KEY",
                        help="delete a spec key, as az's --remove does")
    parser.add_argument("--assets", type=Path, default=ASSET_MAP,
                        help="mapping of azureml: assets and URLs to local paths")
    parser.add_argument("--run-dir", type=Path, help="reuse a run folder (resumes training)")
    parser.add_argument("--max-procs", type=int, default=_cores(),
                        help="cap on processes run at once (default: the cores available)")
    args = parser.parse_args(argv)
    try:
        ctx = prepare(args.spec, args.set, args.remove, args.assets, args.run_dir,
                      max(1, args.max_procs))
        kind = ctx.spec.kind
        if kind == "commandJob":
            return run_command_job(ctx)
        if kind == "sweepJob":
            from .sweep import run_sweep

            return run_sweep(ctx)
        if kind == "pipelineJob":
            from .pipeline import run_pipeline

            return run_pipeline(ctx)
        raise LocalRunError(f"{args.spec}: a {kind or 'spec without $schema'} is not a job; "
                            "run a command, sweep or pipeline job spec")
    except (LocalRunError, SpecError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
