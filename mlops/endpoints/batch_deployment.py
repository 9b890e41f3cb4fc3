"""A batch deployment spec run locally, as `az ml batch-endpoint invoke` runs it on Azure.

The input's files are split into mini-batches of `mini_batch_size`; instance_count x
max_concurrency_per_instance scoring processes (capped by the cores, with a notice) each import
the deployment's scoring script from their snapshot of code_configuration.code, call init(), then
run() on mini-batches they claim: the runtime's mini-batch driver (mlops/runtime/minibatch.py),
the same one `type: parallel` pipeline nodes use, as one task of the runtime (snapshot,
environment layers, MLflow run, process handling). A mini-batch that raises or times out is
retried per retry_settings; the files run() does not return a row for count as failed, and the
run stops once more than error_threshold have (-1: never). With output_action append_row the rows
go to output_file_name in the run folder's outputs/, in mini-batch order. A .zip input is
extracted first, within limits (runtime/archives.py; on Azure, register the folder as a data
asset).
"""

from __future__ import annotations

import os
import shlex
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from mlops.checks.lint_assets import batch_settings
from mlops.endpoints.deployment import Deployment
from mlops.endpoints.models import ModelLayout, lay_out
from mlops.errors import LocalRunError
from mlops.runtime import (
    Batches,
    BatchHooks,
    Driven,
    Limits,
    Listing,
    Placement,
    Retry,
    Runtime,
    Status,
    Tally,
    Task,
    batch_processes,
    drive_batches,
    extract_archive,
    list_files,
    read_table,
    row_batches,
    variables,
    worker_command,
    write_rows,
)
from mlops.specs import SpecData

RETRY = Retry(max_retries=3, timeout=30)  # a batch deployment's retry_settings defaults


def check_input(source: Path, *, tabular: bool) -> None:
    """What refuses the input before anything starts: it is missing, or a folder that holds no
    file."""
    if not source.exists():
        raise LocalRunError(f"--input {source}: no such file or folder")
    if tabular or source.is_file():
        return
    plain = (name for _, _, names in os.walk(source) for name in names)
    if next(plain, None) is None and not list_files(source).files:
        raise LocalRunError(f"--input {source}: holds no files")


def input_files(source: Path, folder: Path) -> Listing:
    """Every file of the input folder (or of the zip, extracted under the run folder), and the
    entries that are not files; any other file is the one file of a uri_file input
    (`az ml batch-endpoint invoke --input <file> --input-type uri_file`: Azure scores it as
    one mini-batch of that file)."""
    check_input(source, tabular=False)
    if source.is_file() and not zipfile.is_zipfile(source):
        return Listing([str(source)], [])
    if source.is_file():
        extracted = extract_archive(source, folder / "inputs" / "data")
        if extracted.renamed:
            print(extracted.notice(), file=sys.stderr)
        source = extracted.folder
    listing = list_files(source)
    if not listing.files:
        raise LocalRunError(f"--input {source}: holds no files")
    return listing


def scoring_task(deployment: Deployment, folder: Path, *, layout: ModelLayout, settings: SpecData,
                 max_procs: int) -> Task:
    nodes = int((deployment.spec.data.get("resources") or {}).get("instance_count") or 1)
    requested = nodes * int(settings.get("max_concurrency_per_instance") or 1)
    level = str(settings.get("logging_level") or "info")
    # Azure's batch driver gives the scoring script its logging level on the command line, which
    # its docs read with argparse (how-to-troubleshoot-batch-endpoints: "--logging_level")
    command = worker_command(folder / "work", deployment.scoring_script,
                             Retry.from_spec(settings.get("retry_settings"), RETRY),
                             f"--logging_level {shlex.quote(level)}")
    env_vars = {**variables(settings.get("environment_variables")), **layout.env(),
                "AZUREML_BI_OUTPUT_PATH": str(folder / "outputs"), "LOGGING_LEVEL": level}
    return Task(name=deployment.name, command=command,
                        where=f"{deployment.spec.path}: environment", folder=folder,
                        code=deployment.code,
                        environment=deployment.environment,
                        env_vars=env_vars, read_only=[Path(p) for p in layout.read_only()],
                        experiment="batch-local", tags={"mlops.spec": str(deployment.spec.path)},
                        placement=Placement(copies=batch_processes(
                            requested, max_procs, str(deployment.spec.path))))


@dataclass(frozen=True)
class Work:
    """The mini-batches a batch run scores, and what they are made of."""

    batches: Batches
    unit: str  # "files" or "rows"
    skipped: int = 0  # entries of the input that are not files


def plan(source: Path, root: Path, *, tabular: bool, size: int, limits: Limits
         ) -> Work:
    """`size` files of the input at a time, or `size` rows of its table (an MLTable folder,
    read by Azure's mltable package)."""
    if tabular:
        frame = read_table(source.resolve(), "--input", root / "work" / "table")
        batches = row_batches(frame, size, root / "work" / "tables")
        return Work(Batches(batches=batches, items=len(frame), limits=limits), "rows")
    listing = input_files(source.resolve(), root)
    if listing.skipped:
        print(listing.notice(), file=sys.stderr)
    files = listing.files
    batches = [files[i:i + size] for i in range(0, len(files), size)]
    return Work(Batches(batches=batches, items=len(files), limits=limits), "files",
                len(listing.skipped))


def run_batch(deployment: Deployment, source: Path, rt: Runtime, *,
              tabular: bool = False) -> int:
    """The scoring processes start first; the input is read (listed, a zip extracted, a table
    read) while they import the scoring script and load the model, and the rows and metrics
    are written while they exit."""
    settings = batch_settings(deployment.spec.data)
    check_input(source.resolve(), tabular=tabular)
    (rt.root / "outputs").mkdir(parents=True, exist_ok=True)
    layout = lay_out(deployment.model, rt.root)
    task = scoring_task(deployment, rt.root, layout=layout, settings=settings,
                        max_procs=rt.max_procs)
    driver = "the MLflow batch driver (no code)" if deployment.nocode else \
        deployment.scoring_script
    read: list[Work] = []

    def planned() -> Batches:
        read.append(plan(source, rt.root, tabular=tabular,
                         size=max(1, int(settings.get("mini_batch_size") or 10)),
                         limits=Limits(int(settings.get("error_threshold", -1)),
                                       max_retries=Retry.from_spec(
                                           settings.get("retry_settings"), RETRY).max_retries)))
        work = read[0]
        print(f"{task.name}: {work.batches.items} {work.unit} in {len(work.batches.batches)} "
              f"mini-batch(es), {task.placement.copies} process(es), {driver}\n  model: "
              f"{deployment.model.describe()} -> AZUREML_MODEL_DIR={layout.root}")
        return work.batches

    rows, where = rows_file(rt.root, settings), task.where
    driven = drive_batches(task, rt, planned, echo=False, hooks=BatchHooks(
        announce=lambda _: print(f"  environment: {rt.environments.labels.get(where, '.venv')}"),
        settled=lambda run_id, tally, seconds: settle(rt, run_id, tally, seconds, rows=rows)))
    return summarize(rt, driven, name=task.name, work=read[0], rows=rows)


def rows_file(root: Path, settings: SpecData) -> Path | None:
    """Where append_row puts every mini-batch's rows (None: summary_only)."""
    if str(settings.get("output_action", "append_row")).lower() != "append_row":
        return None
    return root / "outputs" / str(settings.get("output_file_name") or "predictions.csv")


def settle(rt: Runtime, run_id: str, tally: Tally, seconds: float, *, rows: Path | None
           ) -> None:
    """What needs only the results, done while the scoring processes exit: the rows into
    output_file_name (append_row), the rate and the failed files into the run's metrics."""
    if rows is not None:
        write_rows(rt.root / "work", rows)
    rt.tracking.log_metric(run_id, "images_per_s", tally.items / max(seconds, 1e-6))
    rt.tracking.log_metric(run_id, "failed_files", tally.failed)


def summarize(rt: Runtime, driven: Driven, *, name: str, work: Work, rows: Path | None) -> int:
    tally, result = driven.tally, driven.result
    rate = tally.items / max(driven.seconds, 1e-6)
    not_files = f", {work.skipped} not files (not scored)" if work.skipped else ""
    print(f"\n{name}: {result.status}: {tally.scored} of {tally.items} {work.unit} scored, "
          f"{tally.failed} failed{not_files}, {driven.seconds:.1f} s ({rate:.1f} "
          f"{work.unit}/s)")
    if rows is not None:
        print(f"  rows: {rows}")
    errors = sorted((rt.root / "outputs").glob("errors_*.csv"))
    if errors:
        print(f"  unreadable files: {', '.join(map(str, errors))}")
    print(f"  log: {result.log}")
    return 0 if result.status == Status.COMPLETED else 1
