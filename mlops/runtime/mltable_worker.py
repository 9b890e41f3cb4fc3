"""Read one MLTable with Azure's own `mltable` package and write its rows as Parquet.

    python mltable_worker.py <folder holding the MLTable file> <out.parquet>
    python mltable_worker.py --files <folder holding the MLTable file>   # its files, one a line

Run by mlops/runtime/mltable.py in the MLTable reader's environment (mltable's
azureml-dataprep and .venv's azureml-mlflow pin different azure-identity releases, so they
cannot share one). Also in every task's top layer as `_mlops_mltable_worker`
(environments/activation.py HELPERS), where the tabular AutoML stand-in reads its tables with
`load_table`. Standard library and mltable only, in Python 3.7's syntax.

mltable's own errors are long (a native trace, a session id) and never name the file an
encoding error is in: `load_table` raises TableError with mltable's code and message on one
line, and, for an encoding error, the first file and line that does not decode.
"""

from __future__ import annotations

import os
import re
import sys

# mltable's read_delimited / read_json_lines `encoding:` names, as Python's codecs
ENCODINGS = {"utf8": "utf-8", "utf8bom": "utf-8-sig", "ascii": "ascii", "latin1": "latin-1",
             "iso88591": "iso-8859-1", "windows1252": "cp1252"}


class TableError(Exception):
    """mltable could not read the table; the message is one line."""


def load_table(folder):
    """The MLTable at `folder` as a pandas DataFrame, as Azure's mltable reads it."""
    import mltable

    try:
        return mltable.load(folder).to_pandas_dataframe()
    except Exception as err:  # noqa: BLE001 - mltable's UserErrorException and native errors
        raise TableError(describe(err, folder)) from None


def describe(err, folder):
    """mltable's error code and message on one line (and where an encoding error is)."""
    text = str(err)
    code = re.search(r"Error Code: *(\S+)", text)
    message = re.search(r"Error Message: *(.*?)(?:\| *session_id=\S*|$)", text, re.S)
    if message:
        said = (code.group(1) + ": " if code else "") + " ".join(message.group(1).split())
    else:
        said = next((line.strip() for line in text.splitlines() if line.strip()),
                    type(err).__name__)
    if "encod" in text.lower():
        where = undecodable(folder)
        said += " (first in " + where + ")" if where else ""
    elif "NotFound" in text:
        said += " (its paths: " + named_paths(folder) + ")"
    return said


def named_paths(folder):
    """The MLTable's paths: as written, for a message."""
    try:
        with open(os.path.join(folder, "MLTable"), encoding="utf-8") as handle:
            found = re.findall(r"^\s*-\s*(file|folder|pattern)\s*:\s*(.+?)\s*$",
                               handle.read(), re.M)
    except (OSError, ValueError):
        return "?"
    return ", ".join(kind + ": " + value for kind, value in found) or "none"


def undecodable(folder):
    """`file:line` of the first line of the table's files that its encoding cannot decode."""
    try:
        files, encoding = table_files(folder)
    except Exception:  # noqa: BLE001 - only a better message is lost
        return ""
    for path in files:
        with open(path, "rb") as handle:
            for number, line in enumerate(handle, 1):
                try:
                    line.decode(encoding)
                except UnicodeDecodeError as err:
                    byte = line[err.start]
                    return (f"{path}:{number}, byte 0x{byte:02x} at column {err.start + 1}, "
                            f"not {encoding}")
    return ""


def table_files(folder):
    """The files the MLTable's paths name, as mltable resolves them, and its encoding."""
    import mltable
    import yaml

    with open(os.path.join(folder, "MLTable"), encoding="utf-8") as handle:
        spec = yaml.safe_load(handle) or {}
    encoding = "utf8"
    for step in spec.get("transformations") or []:
        for options in (step.values() if isinstance(step, dict) else []):
            if isinstance(options, dict) and options.get("encoding"):
                encoding = str(options["encoding"])
    paths = [{kind: value if "://" in str(value) or os.path.isabs(str(value))
              else os.path.join(folder, str(value))} for entry in spec.get("paths") or []
             for kind, value in entry.items()]
    found = mltable.from_paths(paths).to_pandas_dataframe()
    files = [str(p) for p in found[found.columns[0]] if os.path.isfile(str(p))]
    return files, ENCODINGS.get(encoding.lower(), encoding)


def list_files(folder):
    """Each file the table's paths name, one a line."""
    try:
        files = table_files(folder)[0]
    except Exception as err:  # noqa: BLE001 - mltable's UserErrorException and native errors
        print("error: " + describe(err, folder), file=sys.stderr, flush=True)
        return 2
    print("\n".join(files), flush=True)
    return 0


def main(argv=None):
    argv = argv or sys.argv[1:]
    if argv[0] == "--files":
        return list_files(argv[1])
    folder, out = argv[:2]
    try:
        frame = load_table(folder)
    except TableError as err:
        print("error: " + str(err), file=sys.stderr, flush=True)
        return 2
    frame.to_parquet(out, index=False)
    print(f"{len(frame)} rows, columns {list(frame.columns)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
