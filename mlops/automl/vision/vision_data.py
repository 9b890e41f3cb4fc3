"""An image MLTable (JSON Lines of image_url and label) as the label files Azure's image runner
reads when it is not given a workspace dataset.

On Azure the runner streams each `image_url` (a datastore URI) through the workspace. Here each
URL becomes a local file: through the run's URL map (AZUREML_AUTOML_URL_MAP, the entries of
assets/local-paths.yml as absolute paths, matched as every input is: the whole URL, the short
form of a long datastore URI, then the longest prefix ending in "/"), a `file:` URL or an
absolute path as it is, and a relative path from the MLTable's folder. A URL with no local
stand-in stops the trial with its name before any training starts.

Classification: the runner's label file as its own reader parses it
(ImageFolderLabelFileDatasetWrapper in azureml-automl-dnn-vision 1.62: csv.reader with a tab
between image and labels, '"' as its quote and initial spaces skipped; then the labels field
through csv.reader with ',' between labels, "'" as its quote, initial spaces skipped). Every
field is quoted at both levels, so a label holding a comma, a quote of either kind, a tab, a
leading space or a line break reaches the runner exactly as written, for a single label and for
each of several; a NUL, which the runner's csv module (Python 3.10) refuses, is refused here by
row. Object detection and instance segmentation: one JSON line per box, {"imageUrl",
"imageDetails", "label": {label, topX, topY, bottomX, bottomY, isCrowd, polygon}}, the runner's
annotation file.

The MLTable file is read as Azure's mltable reads it (safe YAML: a `!!python/object` tag is
refused), and its paths as mltable resolves them: a file, folder or pattern that names no file
is refused with mltable's own words (ScriptExecution.StreamAccess.NotFound). A table that is
not UTF-8 is refused at its file and line.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import os
import re
from pathlib import Path

import yaml

MAP_VARIABLE = "AZUREML_AUTOML_URL_MAP"
LONG_DATASTORE = re.compile(r"^azureml://subscriptions/[^/]+/resourcegroups/[^/]+/"
                            r"(?:providers/[^/]+/)?workspaces/[^/]+/(datastores/.+)$", re.I)
REMOTE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
MAX_LINE = 1 << 20  # a JSON line longer than this is not an image's annotation
COLUMNS = {"delimiter": "\t", "quotechar": '"', "quoting": csv.QUOTE_ALL}  # the runner's file
LABELS = {"delimiter": ",", "quotechar": "'", "quoting": csv.QUOTE_ALL}  # its labels field
NOT_FOUND = ("Error Code: ScriptExecution.StreamAccess.NotFound ... The requested stream was "
             "not found. Please make sure the request uri is correct.")  # mltable 1.7's words


class DataError(ValueError):
    """The table cannot become the runner's files; the message says which row and why."""


def url_map() -> dict[str, str]:
    raw = os.environ.get(MAP_VARIABLE) or "{}"
    found = json.loads(raw)
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def mapped(url: str, mapping: dict[str, str]) -> str | None:
    keys = [url]
    long_form = LONG_DATASTORE.match(url)
    if long_form:
        keys.append(f"azureml://{long_form.group(1)}")
    for key in keys:
        if key in mapping:
            return mapping[key]
    for key in keys:
        prefixes = [p for p in mapping if p.endswith("/") and key.startswith(p)]
        if prefixes:
            prefix = max(prefixes, key=len)
            rest = key[len(prefix):]
            if ".." in rest.split("/"):  # a path under a datastore stays under it
                raise DataError(f"{url}: '..' would leave {prefix} (mapped to "
                                f"{mapping[prefix]})")
            return mapping[prefix].rstrip("/") + "/" + rest
    return None


def local_image(url: str, table: Path, mapping: dict[str, str]) -> str:
    if url.startswith("file://"):
        return url[len("file://"):]
    if REMOTE.match(url) or url.startswith("azureml:"):
        local = mapped(url, mapping)
        if local is None:
            raise DataError(f"image_url {url} has no local stand-in: add a line mapping it (or "
                            "a prefix of it ending in '/') to a local path in "
                            "assets/local-paths.yml")
        return local
    return str(Path(url) if os.path.isabs(url) else (table / url).resolve())


def table_spec(spec_file: Path) -> dict[str, object]:
    """The MLTable file, read as mltable reads it (YAML's safe loader)."""
    try:
        spec = yaml.safe_load(spec_file.read_text(encoding="utf-8")) or {}
    except (OSError, ValueError, yaml.YAMLError) as err:
        raise DataError(f"{spec_file}: MLTable yaml is invalid ({' '.join(str(err).split())}); "
                        "Azure's mltable refuses it too") from None
    if not isinstance(spec, dict):
        raise DataError(f"{spec_file}: an MLTable file is a mapping with paths:")
    return spec


def jsonl_files(folder: Path) -> list[Path]:
    """The JSON Lines files an MLTable's paths: name (file, folder, pattern); an entry that
    names no file is refused as mltable refuses it."""
    spec_file = folder / "MLTable" if folder.is_dir() else folder
    table = spec_file.parent
    if not spec_file.is_file():
        raise DataError(f"{folder} holds no MLTable file (image data is an MLTable of JSON Lines)")
    spec = table_spec(spec_file)
    readers = [next(iter(t)) if isinstance(t, dict) else str(t)
               for t in spec.get("transformations") or []]
    if "read_json_lines" not in readers:
        raise DataError(f"{spec_file}: an image task's MLTable reads JSON Lines "
                        "(transformations: - read_json_lines: ...)")
    files: list[Path] = []
    for entry in spec.get("paths") or []:
        kind, value = next(iter(entry.items())) if isinstance(entry, dict) and entry else \
            ("file", entry)
        files += _named_files(table, str(kind), str(value), spec_file)
    return files


def _named_files(table: Path, kind: str, value: str, spec_file: Path) -> list[Path]:
    if REMOTE.match(value):
        raise DataError(f"{spec_file}: {value} is not on this machine")
    where = table / value
    if kind == "folder":  # the folder's JSON Lines files (not its images or MLTable)
        found = sorted(p for p in where.rglob("*.jsonl") if p.is_file())
    elif kind == "pattern":
        found = sorted(Path(p) for p in glob.glob(str(where), recursive=True)
                       if Path(p).is_file())
    else:
        found = [where] if where.is_file() else []
    if not found:
        raise DataError(f"{spec_file}: paths: {kind}: {value} matches no file ({where}); Azure's "
                        f"mltable refuses it: {NOT_FOUND}")
    return found


def rows(folder: Path):
    """Each JSON line of the table, with the file and line it came from."""
    for path in jsonl_files(folder):
        with open(path, "rb") as lines:
            for number, raw in enumerate(iter(lambda: lines.readline(MAX_LINE + 1), b""), 1):
                if len(raw) > MAX_LINE:
                    raise DataError(f"{path}:{number}: a line of over {MAX_LINE} characters")
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    raise DataError(f"{path}:{number}: not UTF-8 (byte 0x{raw[err.start]:02x} "
                                    f"at column {err.start + 1}); mltable reads JSON Lines as "
                                    "UTF-8: save the file as UTF-8") from None
                if line.strip():
                    try:
                        yield json.loads(line), f"{path}:{number}"
                    except json.JSONDecodeError as err:
                        raise DataError(f"{path}:{number}: not JSON ({err})") from None


def labels_field(names: list[object], where: str) -> str:
    """The labels as the runner's labels field: each quoted with "'" (one doubled inside)."""
    for name in names:
        if "\0" in str(name):
            raise DataError(f"{where}: label {name!r} holds a NUL character, which the "
                            "runner's label file (Python's csv) cannot carry")
    out = io.StringIO()
    csv.writer(out, lineterminator="", **LABELS).writerow([str(n) for n in names])
    return out.getvalue()


def classification_file(folder: Path, out: Path, *, label: str, multilabel: bool) -> int:
    table, mapping, count = (folder if folder.is_dir() else folder.parent), url_map(), 0
    with open(out, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, **COLUMNS)
        for row, where in rows(folder):
            value = row.get(label) if isinstance(row, dict) else None
            names = value if isinstance(value, list) and multilabel else [value]
            if value is None or not all(isinstance(n, (str, int)) and not isinstance(n, bool)
                                        for n in names):
                shown = sorted(row) if isinstance(row, dict) else type(row).__name__
                raise DataError(f"{where}: no {label!r} of text (the row has {shown})")
            image = local_image(str(row.get("image_url") or ""), table, mapping)
            writer.writerow([image, labels_field(names, where)])
            count += 1
    if not count:  # the runner's own words for an empty dataset, before any training
        raise DataError(f"{folder}: the table holds no image (its JSON Lines have no row); "
                        "Azure's runner stops on it: No valid datapoints found to initialize "
                        "dataset.")
    return count


def detection_file(folder: Path, out: Path, *, label: str) -> int:
    table, mapping, count = (folder if folder.is_dir() else folder.parent), url_map(), 0
    with open(out, "w", encoding="utf-8") as handle:
        for row, where in rows(folder):
            boxes = row.get(label)
            if not isinstance(boxes, list):
                raise DataError(f"{where}: {label!r} is a list of boxes ({{label, topX, topY, "
                                "bottomX, bottomY}})")
            image = local_image(str(row.get("image_url") or ""), table, mapping)
            for box in boxes:
                line = {"imageUrl": image, "imageDetails": row.get("image_details") or {},
                        "label": box}
                handle.write(json.dumps(line) + "\n")
                count += 1
    return count
