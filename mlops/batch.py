"""Run a batch deployment spec locally, as `az ml batch-endpoint invoke` runs it on Azure.

    python -m mlops.batch endpoints/batch/deployment.yml --input <folder|zip> [--model DIR]

The input's files are split into mini-batches of `mini_batch_size`; instance_count x
max_concurrency_per_instance scoring processes (capped by the cores, with a notice) each import
the deployment's scoring script from their snapshot of code_configuration.code, call init(), then
run() on mini-batches they claim (mlops/endpoints/batch_worker.py). They are one task of the
local runtime: the same snapshot, environment layers, MLflow run and process handling as jobs. A
mini-batch that raises or times out is retried per retry_settings; the files run() does not return a
row for count as failed, and the run stops once more than error_threshold have (-1: never). With
output_action append_row the rows go to output_file_name in the run folder's outputs/, in
mini-batch order. A .zip input is extracted first (on Azure, register the folder as a data asset).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import zipfile
from pathlib import Path

from mlops import exit_with, runtime
from mlops.endpoints.deployment import Deployment, load
from mlops.endpoints.models import ModelLayout, lay_out
from mlops.environments.envspec import ENV_MAP
from mlops.envs import Environments
from mlops.errors import LocalRunError
from mlops.runtime import launch, readonly_inputs
from mlops.runtime.mlflow_runs import Tracking, tracking_uri
from mlops.runtime.mlflow_server import Server
from mlops.runtime.uris import ASSET_MAP
from mlops.specs import ROOT, SpecError


def input_files(source: Path, folder: Path) -> list[str]:
    """Every file of the input folder (or of the zip, extracted under the run folder)."""
    if not source.exists():
        raise LocalRunError(f"--input {source}: no such file or folder")
    if source.is_file():
        if not zipfile.is_zipfile(source):
            raise LocalRunError(f"--input {source}: give a folder of images, or a .zip of one")
        target = folder / "inputs" / "data"
        with zipfile.ZipFile(source) as archive:
            archive.extractall(target)
        source = target
    files = sorted(str(p) for p in source.rglob("*") if p.is_file())
    if not files:
        raise LocalRunError(f"--input {source}: holds no files")
    return files


def queue(batches: list, work: Path) -> int:
    """The mini-batches (lists of files, or tables) the processes claim, in order."""
    for name in ("todo", "claimed", "results"):
        (work / name).mkdir(parents=True, exist_ok=True)
    for index, batch in enumerate(batches):
        (work / "todo" / f"{index:06d}.json").write_text(json.dumps(batch))
    return len(batches)


def queue_files(files: list[str], size: int, work: Path) -> int:
    return queue([files[i:i + size] for i in range(0, len(files), size)], work)


def outcomes(work: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((work / "results").glob("*.json"))]


def watch(running: runtime.Running, total: int, files: int, threshold: int,
          batch_threshold: int = -1) -> str:
    """Progress until every mini-batch is done, the processes end, or errors pass a limit
    (failed files or rows; failed mini-batches)."""
    started, shown, tty = time.monotonic(), (-1, 0.0), sys.stdout.isatty()
    while True:
        launch.check_interrupt()
        done = outcomes(running.task.folder / "work")
        scored = sum(o["items"] for o in done)
        failed = sum(o["items"] - o["returned"] for o in done)
        elapsed = time.monotonic() - started
        if scored != shown[0] and (tty or elapsed - shown[1] >= 5 or len(done) == total):
            line = f"{scored}/{files} files, {scored / max(elapsed, 1e-6):.1f}/s, {failed} failed"
            print(f"\r{line}" if tty else line, end="" if tty else "\n", flush=True)
            shown = (scored, elapsed)
        if threshold >= 0 and failed > threshold:
            print(f"\nerror_threshold {threshold} exceeded ({failed} failed files): stopping")
            return "Failed"
        failed_batches = sum(1 for o in done if o.get("error"))
        if batch_threshold >= 0 and failed_batches > batch_threshold:
            print(f"\nmini_batch_error_threshold {batch_threshold} exceeded ({failed_batches} "
                  "failed mini-batches): stopping")
            return "Failed"
        if len(done) == total:
            return "Completed"
        if running.launch.poll() is not None:
            return "Failed"  # the processes ended with work left (init() failed, a crash)
        time.sleep(0.2)


def collect(folder: Path, settings: dict, total: int) -> Path | None:
    """append_row: the rows of every mini-batch, in order, into output_file_name."""
    if str(settings.get("output_action", "append_row")).lower() != "append_row":
        return None
    target = folder / "outputs" / str(settings.get("output_file_name") or "predictions.csv")
    with target.open("w") as out:
        for index in range(total):
            part = folder / "work" / "results" / f"{index:06d}.txt"
            if part.is_file():
                out.write(part.read_text())
    return target


def task_for(deployment: Deployment, args, folder: Path, layout: ModelLayout,
             settings: dict) -> runtime.Task:
    retry = settings.get("retry_settings") or {}
    nodes = int((deployment.spec.data.get("resources") or {}).get("instance_count") or 1)
    replicas = nodes * int(settings.get("max_concurrency_per_instance") or 1)
    if replicas > args.max_procs:
        print(f"note: {replicas} scoring processes requested, running {args.max_procs} on this "
              "machine (--max-procs)", file=sys.stderr)
    command = (f"python -m mlops.endpoints.batch_worker {folder / 'work'} "
               f"{deployment.scoring_script} "
               f"--retries {int(retry.get('max_retries', 3))} "
               f"--timeout {int(retry.get('timeout', 30))}")
    env_vars = {**(settings.get("environment_variables") or {}),
                **layout.env(), readonly_inputs.VARIABLE: os.pathsep.join(layout.read_only()),
                "AZUREML_BI_OUTPUT_PATH": str(folder / "outputs"),
                "LOGGING_LEVEL": str(settings.get("logging_level") or "info")}
    return runtime.Task(name=deployment.name, command=command,
                        where=f"{deployment.spec.path}: environment", folder=folder,
                        code=deployment.code, environment=deployment.environment,
                        env_base=deployment.env_base, env_vars=env_vars,
                        image_packages=deployment.image_packages(), experiment="batch-local",
                        tags={"mlops.spec": str(deployment.spec.path)},
                        replicas=min(replicas, args.max_procs))


def run_batch(deployment: Deployment, args, rt: runtime.Runtime) -> int:
    settings = deployment.spec.data.get("settings") or {}
    files = input_files(args.input.resolve(), rt.root)
    total = queue_files(files, max(1, int(settings.get("mini_batch_size") or 10)), rt.root / "work")
    (rt.root / "outputs").mkdir(parents=True, exist_ok=True)
    layout = lay_out(deployment.model, rt.root)
    task = task_for(deployment, args, rt.root, layout, settings)
    driver = "the MLflow batch driver (no code)" if deployment.nocode else \
        deployment.scoring_script
    print(f"{task.name}: {len(files)} files in {total} mini-batch(es), {task.replicas} "
          f"process(es), {driver}\n  model: {deployment.model.describe()} -> AZUREML_MODEL_DIR="
          f"{layout.root}")
    running = runtime.start(task, rt, echo=False)
    print(f"  environment: {rt.environments.labels.get(task.where, '.venv')}")
    started = time.monotonic()
    try:
        status = watch(running, total, len(files), int(settings.get("error_threshold", -1)))
    except KeyboardInterrupt:
        running.launch.stop()
        runtime.finish(running, rt, "Canceled")
        raise
    seconds = time.monotonic() - started
    if running.launch.poll() is None:
        if status == "Failed":
            running.launch.stop()
        else:
            running.launch.wait()
    result = runtime.finish(running, rt, status)
    return summarize(rt, running, settings, total, len(files), seconds, result)


def summarize(rt, running, settings, total, count, seconds, result) -> int:
    done = outcomes(rt.root / "work")
    failed = sum(o["items"] - o["returned"] for o in done) + \
        count - sum(o["items"] for o in done)
    output = collect(rt.root, settings, total)
    rate = count / max(seconds, 1e-6)
    rt.tracking.client.log_metric(running.run_id, "images_per_s", rate)
    rt.tracking.client.log_metric(running.run_id, "failed_files", failed)
    print(f"\n{running.task.name}: {result.status}: {count - failed} of {count} files scored, "
          f"{failed} failed, {seconds:.1f} s ({rate:.1f} files/s)")
    if output:
        print(f"  rows: {output}")
    errors = sorted((rt.root / "outputs").glob("errors_*.csv"))
    if errors:
        print(f"  unreadable files: {', '.join(map(str, errors))}")
    print(f"  log: {result.log}")
    return 0 if result.status == "Completed" else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("deployment", help="a model batch deployment spec")
    parser.add_argument("--input", type=Path, required=True, help="a folder of images, or a zip")
    parser.add_argument("--model", help="model folder (default: as make serve-local picks it)")
    parser.add_argument("--run-dir", type=Path)
    parser.add_argument("--max-procs", type=int, default=launch.usable_cores())
    parser.add_argument("--envs", type=Path, default=ENV_MAP)
    parser.add_argument("--assets", type=Path, default=ASSET_MAP)
    args = parser.parse_args(argv)
    handlers = launch.install_signal_handlers()
    server = Server(tracking_uri())
    try:
        deployment = load(args.deployment, "batch-deployment", args.model, args.assets)
        folder = (args.run_dir or ROOT / "runs" /
                  f"batch-{deployment.name}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
        if folder.exists() and any(folder.iterdir()):
            raise LocalRunError(f"{folder} is not empty: use a new --run-dir")
        rt = runtime.Runtime(folder, max(1, args.max_procs), Tracking(server),
                             Environments(args.envs))
        return run_batch(deployment, args, rt)
    except (LocalRunError, SpecError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:
        return 128 + getattr(err, "signum", 2)
    finally:
        server.close()
        launch.restore_signal_handlers(handlers)


if __name__ == "__main__":
    exit_with(main)
