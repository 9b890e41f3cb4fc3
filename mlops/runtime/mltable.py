"""Reading an MLTable folder into a DataFrame as Azure does: with Azure's own `mltable` package.

Azure's parallel jobs hand a tabular input (`type: mltable`) to run() as pandas DataFrames,
read by `mltable`: its `paths:` (file, folder, pattern), its read transformation
(read_delimited, read_parquet, read_json_lines, read_delta_lake) and every other one it lists
(take, take_random_sample, filter, keep_columns, drop_columns, convert_column_types, ...).

mltable 1.7's azureml-dataprep needs azure-identity <= 1.17 and .venv's azureml-mlflow 1.60
needs 1.27, so the package cannot be imported here: a small environment of its own (READER,
built once and cached like any environment) reads the table into Parquet (mltable_worker.py),
which this process loads. A path outside this machine (a URI) is refused before that starts, so
nothing waits on a download.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from mlops.environments.interpreters import HERE
from mlops.environments.own_python import build_own_environment
from mlops.errors import LocalRunError
from mlops.specs import read_yaml

READER = ["mltable==1.7.0", "pandas==3.1.1", "pyarrow==25.0.1"]
WORKER = Path(__file__).with_name("mltable_worker.py")
TIMEOUT_S = 600
FILES = "--files"  # the worker lists the table's files instead of reading its rows


def remote_paths(spec_file: Path) -> list[str]:
    try:
        spec = read_yaml(spec_file.read_text(encoding="utf-8")) or {}
    except (OSError, ValueError, yaml.YAMLError) as err:
        reason = " ".join(str(err).split())
        raise LocalRunError(f"{spec_file}: not a readable MLTable file ({reason}); Azure's "
                            "mltable refuses it too (MLTable yaml is invalid)") from None
    if not isinstance(spec, dict):
        raise LocalRunError(f"{spec_file}: an MLTable file is a mapping with paths:")
    entries = spec.get("paths") or []
    return [str(value) for entry in entries if isinstance(entry, dict)
            for value in entry.values() if "://" in str(value)]


def local_table(folder: Path, where: str) -> Path:
    """The MLTable file at `folder` (or `folder` itself), checked: there, readable, local."""
    spec_file = folder / "MLTable" if folder.is_dir() else folder
    if not spec_file.is_file():
        raise LocalRunError(f"{where}: {folder} holds no MLTable file (a tabular input is a "
                            "folder with an MLTable file)")
    remote = remote_paths(spec_file)
    if remote:
        raise LocalRunError(f"{where}: {spec_file}: {remote[0]} is not on this machine (map "
                            "the data and point the MLTable at local files)")
    return spec_file


def run_reader(args: list[str], spec_file: Path, where: str) -> str:
    """The worker's output for `args`, in the MLTable reader's environment."""
    env = build_own_environment(READER, HERE.minor, HERE, label="the MLTable reader")
    # -I: the worker's own folder is not on sys.path, where this mltable.py would shadow mltable
    argv = [str(env / "bin" / "python"), "-I", str(WORKER), *args]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired:
        raise LocalRunError(f"{where}: reading {spec_file} took over {TIMEOUT_S} s") from None
    if done.returncode != 0:  # the worker's last line: mltable's code and words, on one line
        lines = [line for line in done.stderr.splitlines() if line.strip()] or ["(no output)"]
        raise LocalRunError(f"{where}: Azure's mltable could not read {spec_file}: "
                            f"{lines[-1].removeprefix('error: ')}")
    return done.stdout


def read_table(folder: Path, where: str, work: Path):
    """The MLTable at `folder` (or the MLTable file itself) as one pandas DataFrame; `work`
    holds the Parquet copy."""
    import pandas as pd

    spec_file = local_table(folder, where)
    work.mkdir(parents=True, exist_ok=True)
    out = work / "table.parquet"
    said = run_reader([str(spec_file.parent), str(out)], spec_file, where)
    print(f"{where}: {spec_file}: {said.strip()} (read by mltable)", file=sys.stderr)
    return pd.read_parquet(out)


def table_files(folder: Path, where: str) -> list[Path]:
    """The files the MLTable at `folder` names in its `paths:` (file, folder, pattern), as
    Azure's mltable resolves them, in its order."""
    spec_file = local_table(folder, where)
    said = run_reader([FILES, str(spec_file.parent)], spec_file, where)
    return [Path(line) for line in said.splitlines() if line.strip()]


def row_batches(frame, rows: int, folder: Path) -> list[dict[str, object]]:
    """The table's rows, `rows` at a time, each mini-batch saved as a CSV in `folder` with the
    table's column types (the mini-batch worker hands run() a DataFrame of it with those types,
    whatever the job environment's pandas: a CSV reads in every release)."""
    folder.mkdir(parents=True, exist_ok=True)
    types = {str(name): str(kind) for name, kind in frame.dtypes.items()}
    batches: list[dict[str, object]] = []
    for index, start in enumerate(range(0, len(frame), max(1, rows))):
        path = folder / f"{index:06d}.csv"
        part = frame.iloc[start:start + max(1, rows)]
        part.to_csv(path, index=False)
        batches.append({"table": str(path), "rows": len(part), "types": types})
    return batches


def plain(value: object) -> object:
    """A partition key's value as JSON carries it (numpy's scalars as Python's)."""
    return value.item() if hasattr(value, "item") else value


def partition_batches(frame, keys: list[str], folder: Path) -> list[dict[str, object]]:
    """`partition_keys`: one mini-batch for each distinct value of the keys (rows with the same
    values together, mini_batch_size aside, as Azure's parallel job partitions its input), in
    the order the values sort; each carries its values by key (run()'s
    mini_batch_context.partition_key_value). The rows keep every column, the keys' too."""
    folder.mkdir(parents=True, exist_ok=True)
    types = {str(name): str(kind) for name, kind in frame.dtypes.items()}
    batches: list[dict[str, object]] = []
    for index, (values, part) in enumerate(frame.groupby(keys, sort=True, dropna=False)):
        path = folder / f"{index:06d}.csv"
        part.to_csv(path, index=False)
        values = values if isinstance(values, tuple) else (values,)
        batches.append({"table": str(path), "rows": len(part), "types": types,
                        "partition": {key: plain(v) for key, v in zip(keys, values, strict=True)}})
    return batches
