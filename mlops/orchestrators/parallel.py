"""`type: parallel` pipeline nodes, run on the batch driver as Azure's parallel job runs them.

The node's `input_data` (a uri_folder: its files; a uri_file: that file; an mltable: its rows)
is cut into mini-batches (`mini_batch_size`: a count of files, or a size such as "10kb" of
table rows), and instance_count x max_concurrency_per_instance processes of the task's
environment each import `task.entry_script` from the snapshot of `task.code`, call init() once and
run() on each mini-batch they claim (mlops/endpoints/batch_worker.py: a list of file paths, or a
pandas DataFrame). `program_arguments` (with `${{inputs.x}}`/`${{outputs.x}}` substituted) are the
script's command line, which Azure's scripts read with argparse's parse_known_args in init().
retry_settings (max_retries, timeout), error_threshold (failed files or rows, -1: never) and
mini_batch_error_threshold (failed mini-batches) stop the node as on Azure; the rows run()
returns go, in mini-batch order, to `append_row_to` (a uri_file output is that file, a folder
gets parallel_run_step.txt). The node is one task of the local runtime, like every other.
"""

from __future__ import annotations

import re
import shlex
import sys
import time
from pathlib import Path

from mlops import runtime
from mlops.batch import outcomes, queue, watch
from mlops.errors import LocalRunError
from mlops.orchestrators.mltable import read_table
from mlops.runtime.tasks import code_path
from mlops.runtime.values import OutputSpec, Value

INPUT_REF = re.compile(r"^\$\{\{\s*inputs\.([\w.-]+)\s*\}\}$")
OUTPUT_REF = re.compile(r"^\$\{\{\s*outputs\.([\w.-]+)\s*\}\}$")
UNITS = {"": 1, "b": 1, "kb": 1024, "mb": 1024 ** 2, "gb": 1024 ** 3}
ROWS_FILE = "parallel_run_step.txt"
# what a node may set over its parallel component's values
NODE_SETTINGS = ("input_data", "mini_batch_size", "max_concurrency_per_instance",
                 "error_threshold", "mini_batch_error_threshold", "retry_settings",
                 "logging_level", "task", "resources")


def batch_size(text, tabular: bool, where: str) -> int:
    """mini_batch_size: files per mini-batch, or bytes of table rows ("10kb", "1mb")."""
    match = re.fullmatch(r"\s*(\d+)\s*([kmg]?b?)\s*", str(text or ("1mb" if tabular else "10")),
                         flags=re.IGNORECASE)
    if not match or int(match.group(1)) < 1:
        raise LocalRunError(f"{where}.mini_batch_size: {text!r} is not a count or a size")
    return int(match.group(1)) * UNITS[match.group(2).lower()]


def input_name(definition: dict, inputs: dict[str, Value], where: str) -> str:
    match = INPUT_REF.match(str(definition.get("input_data") or ""))
    if not match or match.group(1) not in inputs or not inputs[match.group(1)].is_data:
        raise LocalRunError(f"{where}.input_data: name one of the node's data inputs as "
                            "${{inputs.<name>}}")
    return match.group(1)


def table_batches(value: Value, size: int, work: Path, where: str) -> list[dict]:
    """The table's rows in mini-batches of about `size` bytes, each saved as a CSV."""
    frame = read_table(Path(value.path), where)
    per_row = max(1, len(frame.to_csv(index=False).encode()) // max(1, len(frame)))
    rows = max(1, size // per_row)
    (work / "tables").mkdir(parents=True, exist_ok=True)
    batches = []
    for index, start in enumerate(range(0, len(frame), rows)):
        path = work / "tables" / f"{index:06d}.csv"
        frame.iloc[start:start + rows].to_csv(path, index=False)
        batches.append({"table": str(path), "rows": len(frame.iloc[start:start + rows])})
    return batches


def file_batches(name: str, value: Value, size: int, folder: Path) -> list[list[str]]:
    """Paths as the job sees them: under its own inputs/<name> (read-only, as mounted)."""
    source = Path(value.path)
    bound = folder / "inputs" / name
    if source.is_file():
        files = [str(bound / source.name)]
    else:
        files = [str(bound / p.relative_to(source)) for p in sorted(source.rglob("*"))
                 if p.is_file()]
    return [files[i:i + size] for i in range(0, len(files), size)]


def rows_target(task_def: dict, outputs: dict[str, OutputSpec], where: str) -> str | None:
    """`append_row_to: ${{outputs.x}}`: the output to write the rows to (None: not asked)."""
    text = str(task_def.get("append_row_to") or "").strip()
    if not text:
        return None
    match = OUTPUT_REF.match(text)
    if not match or match.group(1) not in outputs:
        raise LocalRunError(f"{where}.task.append_row_to: name one of the node's outputs as "
                            "${{outputs.<name>}}")
    return match.group(1)


def node_task(definition: dict, base: Path, folder: Path, where: str, name: str,
              inputs: dict[str, Value], outputs: dict[str, OutputSpec], max_procs: int,
              **run) -> runtime.Task:
    """The node as one task: the batch worker around its entry script, in its environment."""
    task_def = definition.get("task") or {}
    if str(task_def.get("type") or "run_function") != "run_function" or \
            not task_def.get("entry_script"):
        raise LocalRunError(f"{where}.task: a parallel task is type run_function with an "
                            "entry_script")
    retry = definition.get("retry_settings") or {}
    processes = int((definition.get("resources") or {}).get("instance_count") or 1) * \
        int(definition.get("max_concurrency_per_instance") or 1)
    if processes > max_procs:
        print(f"note: {where}: {processes} processes requested, running {max_procs} on this "
              "machine (--max-procs)", file=sys.stderr)
    command = (f"python -m mlops.endpoints.batch_worker {folder / 'work'} "
               f"{shlex.quote(str(task_def['entry_script']))} "
               f"--retries {int(retry.get('max_retries', 3))} "
               f"--timeout {int(retry.get('timeout', 60))} -- "
               f"{task_def.get('program_arguments') or ''}").strip()
    env_vars = {**(definition.get("environment_variables") or {}),
                "AZUREML_PARALLEL_LOGGING_LEVEL": str(definition.get("logging_level") or "INFO")}
    return runtime.Task(name=name, command=command, where=where, folder=folder,
                        code=code_path(task_def.get("code"), base, f"{where}.task.code"),
                        inputs=inputs, outputs=outputs, environment=task_def.get("environment"),
                        env_base=base, env_vars=env_vars, replicas=min(processes, max_procs),
                        **run)


def run_node(definition: dict, task: runtime.Task, rt: runtime.Runtime) -> tuple:
    """Plan the mini-batches, run the processes, write the rows: (result, items)."""
    where = task.where
    name = input_name(definition, task.inputs, where)
    value = task.inputs[name]
    tabular = value.type == "mltable"
    size = batch_size(definition.get("mini_batch_size"), tabular, where)
    work = task.folder / "work"
    batches = table_batches(value, size, work, where) if tabular else \
        file_batches(name, value, size, task.folder)
    items = sum(b["rows"] for b in batches) if tabular else sum(len(b) for b in batches)
    total = _requeue(batches, work)
    print(f"step {task.name}: {items} {'rows' if tabular else 'files'} in {total} "
          f"mini-batch(es), {task.replicas} process(es)", flush=True)
    running = runtime.start(task, rt, label=task.name)
    try:
        status = watch(running, total, items, int(definition.get("error_threshold", -1)),
                       int(definition.get("mini_batch_error_threshold", -1)))
    except KeyboardInterrupt:
        running.launch.stop()
        runtime.finish(running, rt, "Canceled")
        raise
    if running.launch.poll() is None:
        running.launch.stop() if status == "Failed" else running.launch.wait()
    result = runtime.finish(running, rt, status)
    target = rows_target(definition.get("task") or {}, task.outputs, where)
    if target is not None:
        write_rows(work, total, Path(result.outputs[target]), task.outputs[target])
    return result, items


def _requeue(batches: list, work: Path) -> int:
    """A fresh queue: what an earlier attempt in this folder left is dropped."""
    for name in ("todo", "claimed", "results"):
        for stale in (work / name).glob("*") if (work / name).is_dir() else []:
            stale.unlink()
    return queue(batches, work)


def write_rows(work: Path, total: int, place: Path, spec: OutputSpec) -> Path:
    """append_row_to: every mini-batch's rows, in mini-batch order."""
    target = place if spec.type == "uri_file" else place / ROWS_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w") as out:
        for index in range(total):
            part = work / "results" / f"{index:06d}.txt"
            if part.is_file():
                out.write(part.read_text())
    return target


def summary(work: Path, items: int) -> str:
    done = outcomes(work)
    failed = sum(o["items"] - o["returned"] for o in done) + items - \
        sum(o["items"] for o in done)
    return f"{items - failed} of {items} scored, {failed} failed, " \
        f"{sum(1 for o in done if o.get('error'))} mini-batch(es) failed; {time.strftime('%X')}"
