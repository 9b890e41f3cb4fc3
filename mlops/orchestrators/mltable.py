"""Reading an MLTable folder into a DataFrame, as a tabular input's `MLTable` file describes it.

Azure's parallel jobs hand a tabular input (`type: mltable`) to run() as pandas DataFrames. The
MLTable file lists `paths:` (`file`, `folder` or `pattern`, relative to the MLTable's folder) and
a read transformation: `read_delimited` (delimiter, header: all_files_same_headers,
from_first_file, no_header, ...; encoding), `read_parquet` or `read_json_lines`. Other
transformations (take, filter, column types) are not applied here; a notice names them.
"""

from __future__ import annotations

import glob
import sys
from pathlib import Path

from mlops.errors import LocalRunError
from mlops.specs import read_yaml

READERS = ("read_delimited", "read_parquet", "read_json_lines", "read_delta_lake")


def files_of(folder: Path, paths: list) -> list[Path]:
    found: list[Path] = []
    for entry in paths or []:
        kind, value = next(iter(entry.items())) if isinstance(entry, dict) and entry else ("", "")
        if "://" in str(value):
            raise LocalRunError(f"{folder}/MLTable: {value} is not on this machine (map the "
                                "data and point the MLTable at local files)")
        if kind == "file":
            found.append(folder / str(value))
        elif kind == "folder":
            found += sorted(p for p in (folder / str(value)).rglob("*") if p.is_file())
        elif kind == "pattern":
            found += sorted(Path(p) for p in glob.glob(str(folder / str(value)), recursive=True)
                            if Path(p).is_file())
    return found


def read_table(folder: Path, where: str):
    """The MLTable at `folder` (or the file itself) as one pandas DataFrame."""
    import pandas as pd

    spec_file = folder / "MLTable" if folder.is_dir() else folder
    if not spec_file.is_file():
        raise LocalRunError(f"{where}: {folder} holds no MLTable file (a tabular input is a "
                            "folder with an MLTable file)")
    spec = read_yaml(spec_file.read_text()) or {}
    files = files_of(spec_file.parent, spec.get("paths"))
    steps = [t if isinstance(t, dict) else {t: {}} for t in spec.get("transformations") or []]
    reader, options = next(((k, v or {}) for t in steps for k, v in t.items() if k in READERS),
                           ("read_delimited", {}))
    ignored = [k for t in steps for k in t if k not in READERS]
    if ignored:
        print(f"note: {where}: MLTable transformations not applied locally: {ignored}",
              file=sys.stderr)
    frames = [_read(reader, options, path) for path in files]
    if not frames:
        raise LocalRunError(f"{where}: {spec_file} names no file that exists here")
    return pd.concat(frames, ignore_index=True)


def _read(reader: str, options: dict[str, object], path: Path):
    import pandas as pd

    if reader == "read_parquet":
        return pd.read_parquet(path)
    if reader == "read_json_lines":
        return pd.read_json(path, lines=True, encoding=options.get("encoding") or "utf-8")
    if reader != "read_delimited":
        raise LocalRunError(f"{path}: MLTable {reader} is not readable on this machine")
    header = str(options.get("header") or "all_files_same_headers").lower()
    return pd.read_csv(path, sep=options.get("delimiter") or ",",
                       header=None if header == "no_header" else 0,
                       encoding=(options.get("encoding") or "utf8").replace("utf8", "utf-8"))
