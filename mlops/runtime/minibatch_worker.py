"""The worker in each process of the mini-batch driver (minibatch.py), as Azure's batch driver
runs a scoring or entry script.

    python -m _mlops_minibatch_worker <work folder> <scoring script>
        [--retries 3] [--timeout 300] [-- <the script's own arguments>]

Standard library only, and Python 3.7's syntax: it is copied into each task's top layer
(environments/activation.py) and runs in the environment's own Python, whichever that is.

It imports the deployment's scoring script from the working directory (the snapshot of
code_configuration.code), calls init() once, then claims mini-batches from <work>/todo (an atomic
rename, so processes never share one) until none is left. Each run() call gets `timeout`
seconds; a call that raises or times out is tried again up to `retries` times, then all its
files count as failed. Results go to <work>/results/<id>.txt (the rows) and <id>.json (counts).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import inspect
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path


def load_script(path: Path):
    sys.path.insert(0, os.getcwd())  # the code folder is the root, as on Azure
    spec = importlib.util.spec_from_file_location("batch_scoring_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in ("init", "run"):
        if not callable(getattr(module, name, None)):
            raise SystemExit(f"{path}: a batch scoring script defines init() and run(mini_batch)")
    return module


def provide_entry_script(work: Path) -> None:
    """Azure's driver gives entry scripts `azureml_user.parallel_run.EntryScript`: the same
    names here (entry_script.py, in the top layer as _mlops_entry_script)."""
    try:
        import _mlops_entry_script
    except ImportError:  # run outside a task's environment (its own tests)
        return
    _mlops_entry_script.install(work)


def claim(work: Path) -> Path | None:
    for item in sorted((work / "todo").glob("*.json")):
        target = work / "claimed" / f"{item.name}.{os.getpid()}"
        try:
            os.rename(item, target)
            return target
        except FileNotFoundError:
            continue  # another process took it first
    return None


def next_item(work: Path) -> Path | None:
    """The next mini-batch to score, waiting while the driver still queues them (it reads the
    input while the workers start); None once the queue is complete and empty."""
    while True:
        item = claim(work)
        if item is not None:
            return item
        if (work / "queued").exists():  # written after the last mini-batch
            return claim(work)
        time.sleep(0.02)


TEXT_TYPES = ("object", "str", "string")


def as_input(batch):
    """A mini-batch as run() receives it: a list of file paths, or a table as a DataFrame with
    the column types the whole table was read with (not those of its few rows)."""
    if isinstance(batch, dict) and "table" in batch:
        import pandas as pd

        types = batch.get("types") or {}
        dates = [name for name, kind in types.items() if kind.startswith("datetime")]
        given = {name: (str if kind in TEXT_TYPES else kind) for name, kind in types.items()
                 if name not in dates}
        return pd.read_csv(batch["table"], dtype=given or None, parse_dates=dates or False)
    return batch


class MiniBatchContext:
    """run()'s second argument, where run takes two (run(mini_batch, mini_batch_context)), as
    Azure's driver gives it: the mini-batch's values of the job's partition_keys by key ({}
    when it has none) and its index."""

    def __init__(self, partition_key_value, minibatch_index):
        self.partition_key_value = partition_key_value
        self.minibatch_index = minibatch_index


def takes_context(run):
    """Whether run() has a second positional parameter, for the mini-batch's context."""
    try:
        parameters = inspect.signature(run).parameters.values()
    except (TypeError, ValueError):  # a builtin or callable object without a signature
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return len([p for p in parameters if p.kind in positional]) >= 2


def call_run(module, batch, context):
    """run(mini_batch), or run(mini_batch, mini_batch_context) where run takes two."""
    if context is not None and takes_context(module.run):
        return module.run(batch, context)
    return module.run(batch)


def _alarm(signum, frame):  # noqa: ARG001 - the signal module's signature
    raise TimeoutError("run() took longer than retry_settings.timeout")


def as_lines(result) -> list[str]:
    """append_row: a DataFrame's rows space-separated, a list's elements one per line."""
    if hasattr(result, "to_csv"):
        text = result.to_csv(sep=" ", header=False, index=False)
        return [line for line in text.splitlines() if line]
    return [str(item) for item in (result or [])]


def take_debugger() -> None:
    """DEBUG=worker:N chose this worker: it waits for a debugger (or starts pdb) before it
    imports the scoring script (mlops/runtime/debug_hook.py, in the run's top layer)."""
    if os.environ.get("MLOPS_DEBUG"):
        import _mlops_debug

        _mlops_debug.activate(wait=True)


def score(module, batch: list[str], retries: int, timeout: int,
          context: MiniBatchContext | None = None) -> dict[str, object]:
    error = ""
    debugging = bool(os.environ.get("MLOPS_DEBUGGING"))  # a breakpoint may pause run()
    for attempt in range(1, retries + 2):
        signal.alarm(0 if debugging else max(1, timeout))
        try:
            lines = as_lines(call_run(module, batch, context))
            # more rows than items (several predictions per file) still means every item
            return {"items": len(batch), "returned": min(len(lines), len(batch)),
                    "attempts": attempt,
                    "lines": lines, "error": ""}
        except Exception:  # noqa: BLE001 - any failure of user code is retried, as on Azure
            error = traceback.format_exc(limit=3)
            print(f"mini-batch attempt {attempt} failed:\n{error}", file=sys.stderr, flush=True)
        finally:
            signal.alarm(0)
    return {"items": len(batch), "returned": 0, "attempts": retries + 1, "lines": [],
            "error": error.strip().splitlines()[-1] if error else "failed"}


def write_whole(path: Path, text: str) -> None:
    """Written whole or not at all: the parent counts what is there while processes write."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, errors="surrogateescape")  # file names that are not UTF-8, as they are
    os.rename(tmp, path)


def score_item(module, item: Path, args: argparse.Namespace) -> None:
    """One claimed mini-batch: its rows, then its counts (the parent's sign it is done)."""
    raw = json.loads(item.read_text())
    batch = as_input(raw)
    name = item.name.split(".json")[0]
    context = MiniBatchContext((raw.get("partition") or {}) if isinstance(raw, dict) else {},
                               int(name) if name.isdigit() else 0)
    started = time.time()
    outcome = score(module, batch, args.retries, args.timeout, context=context)
    outcome.update(started=started, ended=time.time(), seconds=round(time.time() - started, 3))
    write_whole(args.work / "results" / f"{name}.txt",
                "".join(f"{line}\n" for line in outcome.pop("lines")))
    write_whole(args.work / "results" / f"{name}.json", json.dumps(outcome))  # last: "done"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("script", type=Path)
    parser.add_argument("--retries", type=int, default=3)
    parser.add_argument("--timeout", type=int, default=300)
    argv = list(sys.argv[1:] if argv is None else argv)
    # after `--`: the script's own arguments (a parallel job's program_arguments)
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    signal.signal(signal.SIGALRM, _alarm)
    sys.argv = [str(args.script), *argv[split + 1:]]  # what the entry script's argparse reads
    # the debugged worker holds a mini-batch while it waits for its debugger: the others must
    # not take every one before it starts
    item = claim(args.work) if os.environ.get("MLOPS_DEBUG") else None
    take_debugger()
    provide_entry_script(args.work)
    module = load_script(args.script)
    module.init()
    if item is None:
        item = next_item(args.work)
    while item is not None:
        score_item(module, item, args)
        item = next_item(args.work)
    return 0


if __name__ == "__main__":
    try:
        code = main()
    finally:
        gc.freeze()  # no cycle scan of the script's objects at exit (mlops.exit_with's reason)
    sys.exit(code)
