"""`type: parallel` pipeline nodes, run on the batch driver as Azure's parallel job runs them.

The node's `input_data` (a uri_folder: its files; a uri_file: that file; an mltable in direct
mode: its rows; one mounted or downloaded: the files its paths name) is cut into mini-batches
(`mini_batch_size`: a count of files, or a size such as "10kb" of table rows; `partition_keys`:
one mini-batch for each value of those columns, run(mini_batch, mini_batch_context) given it),
and
instance_count x max_concurrency_per_instance processes of the task's environment each import
`task.entry_script` from the snapshot of `task.code`, call init() once and run() on each
mini-batch they claim (mlops/runtime/minibatch.py: a list of file paths, or a
pandas DataFrame). `program_arguments` (with `${{inputs.x}}`/`${{outputs.x}}` substituted) are the
script's command line, which Azure's scripts read with argparse's parse_known_args in init().
retry_settings (max_retries, timeout), error_threshold (failed files or rows, -1: never) and
mini_batch_error_threshold (failed mini-batches) stop the node as on Azure; the rows run()
returns go, in mini-batch order, to `append_row_to` (a uri_file output is that file, a folder
gets parallel_run_step.txt). The node is one task of the local runtime, like every other.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

from mlops.environments.envspec import EnvironmentRef
from mlops.errors import LocalRunError
from mlops.runtime import (
    Batches,
    Driven,
    Limits,
    OutputSpec,
    Placement,
    Retry,
    Runtime,
    Tally,
    Task,
    TaskSource,
    Value,
    batch_processes,
    code_path,
    drive_batches,
    list_files,
    partition_batches,
    read_table,
    row_batches,
    table_files,
    variables,
    worker_command,
    write_rows,
)
from mlops.specs import SpecData

INPUT_REF = re.compile(r"^\$\{\{\s*inputs\.([\w.-]+)\s*\}\}$")
OUTPUT_REF = re.compile(r"^\$\{\{\s*outputs\.([\w.-]+)\s*\}\}$")
UNITS = {"": 1, "b": 1, "kb": 1024, "mb": 1024 ** 2, "gb": 1024 ** 3}
ROWS_FILE = "parallel_run_step.txt"
FILE_MODES = {"ro_mount", "download", "eval_mount", "eval_download"}  # an mltable as files
FUNCTION_TASKS = ("run_function", "function")  # azure-ai-ml's task types that run a script
RETRY = Retry(max_retries=3, timeout=60)  # a parallel job's retry_settings defaults
# what a node may set over its parallel component's values
NODE_SETTINGS = ("input_data", "mini_batch_size", "max_concurrency_per_instance",
                 "error_threshold", "mini_batch_error_threshold", "retry_settings",
                 "logging_level", "task", "resources", "partition_keys")


def batch_size(text, tabular: bool, where: str) -> int:
    """mini_batch_size: files per mini-batch, or bytes of table rows ("10kb", "1mb")."""
    match = re.fullmatch(r"\s*(\d+)\s*([kmg]?b?)\s*", str(text or ("1mb" if tabular else "10")),
                         flags=re.IGNORECASE)
    if not match or int(match.group(1)) < 1:
        raise LocalRunError(f"{where}.mini_batch_size: {text!r} is not a count or a size")
    return int(match.group(1)) * UNITS[match.group(2).lower()]


def input_name(definition: SpecData, inputs: dict[str, Value], where: str) -> str:
    match = INPUT_REF.match(str(definition.get("input_data") or ""))
    if not match or match.group(1) not in inputs or not inputs[match.group(1)].is_data:
        raise LocalRunError(f"{where}.input_data: name one of the node's data inputs as "
                            "${{inputs.<name>}}")
    return match.group(1)


def partition_keys(definition: SpecData, where: str) -> list[str]:
    """`partition_keys`: the columns whose values make the mini-batches ([]: none given)."""
    keys = definition.get("partition_keys") or []
    if isinstance(keys, str) or not all(isinstance(k, str) and k for k in keys):
        raise LocalRunError(f"{where}.partition_keys: a list of column names, as azure-ai-ml's "
                            "schema takes it")
    return list(keys)


def table_batches(value: Value, size: int, work: Path, where: str, *,
                  keys: list[str] | None = None) -> list[SpecData]:
    """The table's rows in mini-batches of about `size` bytes, each saved as a CSV; with
    partition keys, one mini-batch for each of their values (mini_batch_size aside)."""
    frame = read_table(Path(value.path), where, work / "table")
    if keys:
        missing = [k for k in keys if k not in frame.columns]
        if missing:
            raise LocalRunError(f"{where}.partition_keys: {', '.join(missing)} is not a column "
                                f"of its input_data (columns: {', '.join(map(str, frame.columns))})"
                                "; Azure partitions by keys every input table holds")
        return partition_batches(frame, keys, work / "tables")
    per_row = max(1, len(frame.to_csv(index=False).encode()) // max(1, len(frame)))
    return row_batches(frame, max(1, size // per_row), work / "tables")


def tabular(value: Value) -> bool:
    """run() gets the input's rows (DataFrames) when it is an mltable in `direct` mode (or no
    mode given); mounted or downloaded, an mltable is the list of the files its paths name, as
    Azure's parallel job reads its major input (a file list: mltable or uri_folder in ro_mount
    or download; a table: mltable in direct)."""
    return value.type == "mltable" and str(value.mode or "direct").lower() not in FILE_MODES


def input_files(value: Value, bound: Path, where: str) -> list[str]:
    """The input's files as the job sees them: under its own inputs/<name> (read-only, as
    mounted) where they lie in the input (an MLTable's: the files its paths name, in mltable's
    order)."""
    source = Path(value.path)
    if value.type == "mltable":
        base = os.path.realpath(source if source.is_dir() else source.parent)
        found = [os.path.realpath(p) for p in table_files(source, where)]
        return [str(bound / os.path.relpath(p, base)) if p.startswith(base + os.sep) else p
                for p in found]
    if source.is_file():
        return [str(bound / source.name)]
    listing = list_files(source)
    if listing.skipped:
        print(listing.notice(), file=sys.stderr)
    return [str(bound / os.path.relpath(p, source)) for p in listing.files]


def file_batches(files: list[str], size: int) -> list[list[str]]:
    """The files, `size` to a mini-batch."""
    return [files[i:i + size] for i in range(0, len(files), size)]


def rows_target(task_def: SpecData, outputs: dict[str, OutputSpec], where: str) -> str | None:
    """`append_row_to: ${{outputs.x}}`: the output to write the rows to (None: not asked)."""
    text = str(task_def.get("append_row_to") or "").strip()
    if not text:
        return None
    match = OUTPUT_REF.match(text)
    if not match or match.group(1) not in outputs:
        raise LocalRunError(f"{where}.task.append_row_to: name one of the node's outputs as "
                            "${{outputs.<name>}}")
    return match.group(1)


def key_settings(definition: SpecData) -> SpecData:
    """What a parallel node's reuse key adds to its task's: the settings that decide its
    mini-batches, its failure thresholds and where its rows go."""
    return {**{k: definition.get(k) for k in ("input_data", "mini_batch_size", "error_threshold",
                                               "mini_batch_error_threshold", "partition_keys")},
            "append_row_to": (definition.get("task") or {}).get("append_row_to")}


def entry_script(task_def: SpecData, where: str) -> str:
    """The script the task runs: its type is `run_function` or `function`, in any case (the
    task types azure-ai-ml's loader takes for a script, ParallelTaskType less `model`, lowered
    as it lowers them)."""
    kind = str(task_def.get("type") or "run_function").strip().lower()
    if kind not in FUNCTION_TASKS:
        raise LocalRunError(f"{where}.task.type: {kind!r} is not run here; a parallel task of "
                            "type run_function (or function) runs its entry_script")
    if not str(task_def.get("entry_script") or "").strip():
        raise LocalRunError(f"{where}.task.entry_script: name the script whose init() and "
                            "run(mini_batch) the task calls")
    return str(task_def["entry_script"]).strip()


def node_task(source: TaskSource, max_procs: int) -> Task:
    """The node as one task: the mini-batch worker around its entry script, in its
    environment."""
    definition, where = source.definition, source.where
    task_def = definition.get("task") or {}
    script = entry_script(task_def, where)
    requested = int((definition.get("resources") or {}).get("instance_count") or 1) * \
        int(definition.get("max_concurrency_per_instance") or 1)
    command = worker_command(
        source.folder / "work", script,
        Retry.from_spec(definition.get("retry_settings"), RETRY),
        str(task_def.get("program_arguments") or "").strip())
    env_vars = {**variables(definition.get("environment_variables")),
                "AZUREML_PARALLEL_LOGGING_LEVEL": str(definition.get("logging_level") or "INFO")}
    return Task(name=source.name, command=command, where=where, folder=source.folder,
                code=code_path(task_def.get("code"), source.base, f"{where}.task.code"),
                inputs=source.bound_inputs(), outputs=source.bound_outputs(),
                environment=EnvironmentRef(value=task_def.get("environment"), base=source.base),
                env_vars=env_vars,
                placement=Placement(copies=batch_processes(requested, max_procs, where)),
                experiment=source.experiment, tags=dict(source.tags), parent_run=source.parent,
                address=source.address, assets=source.stand_ins())


def run_node(definition: SpecData, task: Task, rt: Runtime) -> Driven:
    """Plan the mini-batches, run the processes, write the rows."""
    where = task.where
    name = input_name(definition, task.inputs, where)
    value = task.inputs[name]
    rows, keys = tabular(value), partition_keys(definition, where)
    if keys and not rows:
        raise LocalRunError(f"{where}.partition_keys: its input_data {name} is a "
                            f"{value.type} in {value.mode or 'its default'} mode; Azure partitions "
                            "a table: an mltable in direct mode")
    size = batch_size(definition.get("mini_batch_size"), rows, where)
    work = task.folder / "work"
    batches = table_batches(value, size, work, where, keys=keys) if rows else \
        file_batches(input_files(value, task.folder / "inputs" / name, where), size)
    items = sum(b["rows"] for b in batches) if rows else sum(len(b) for b in batches)
    print(f"step {task.name}: {items} {'rows' if rows else 'files'} in {len(batches)} "
          f"mini-batch(es), {task.placement.copies} process(es)", flush=True)
    driven = drive_batches(task, rt, Batches(
        batches=batches, items=items,
        limits=Limits.from_spec(definition, Retry.from_spec(definition.get("retry_settings"),
                                                            RETRY))),
        label=task.name)
    target = rows_target(definition.get("task") or {}, task.outputs, where)
    if target is not None:
        place, spec = Path(driven.result.outputs[target]), task.outputs[target]
        write_rows(work, place if spec.type == "uri_file" else place / ROWS_FILE)
    return driven


def summary(tally: Tally) -> str:
    return f"{tally.scored} of {tally.items} scored, {tally.failed} failed, " \
        f"{tally.failed_batches} mini-batch(es) failed; {time.strftime('%X')}"
