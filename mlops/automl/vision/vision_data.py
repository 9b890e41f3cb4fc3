"""An image MLTable (JSON Lines of image_url and label) as the label files Azure's image runner
reads when it is not given a workspace dataset.

On Azure the runner streams each `image_url` (a datastore URI) through the workspace. Here each
URL becomes a local file: through the run's URL map (AZUREML_AUTOML_URL_MAP, the entries of
assets/local-paths.yml as absolute paths, matched as every input is: the whole URL, the short
form of a long datastore URI, then the longest prefix ending in "/"), a `file:` URL or an
absolute path as it is, and a relative path from the MLTable's folder. A URL with no local
stand-in stops the trial with its name before any training starts.

Classification: a tab-separated file of image path and label (labels joined by commas for
multilabel), written with csv quoting. Object detection and instance segmentation: one JSON line
per box, {"imageUrl", "imageDetails", "label": {label, topX, topY, bottomX, bottomY, isCrowd,
polygon}}, the runner's annotation file.
"""

from __future__ import annotations

import csv
import glob
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
            return mapping[prefix].rstrip("/") + "/" + key[len(prefix):]
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


def jsonl_files(folder: Path) -> list[Path]:
    """The JSON Lines files an MLTable's paths: name (file, folder, pattern)."""
    spec_file = folder / "MLTable" if folder.is_dir() else folder
    table = spec_file.parent
    if not spec_file.is_file():
        raise DataError(f"{folder} holds no MLTable file (image data is an MLTable of JSON Lines)")
    spec = yaml.safe_load(spec_file.read_text()) or {}
    readers = [next(iter(t)) if isinstance(t, dict) else str(t)
               for t in spec.get("transformations") or []]
    if "read_json_lines" not in readers:
        raise DataError(f"{spec_file}: an image task's MLTable reads JSON Lines "
                        "(transformations: - read_json_lines: ...)")
    files: list[Path] = []
    for entry in spec.get("paths") or []:
        kind, value = next(iter(entry.items())) if isinstance(entry, dict) else ("file", entry)
        if REMOTE.match(str(value)):
            raise DataError(f"{spec_file}: {value} is not on this machine")
        where = table / str(value)
        if kind == "folder":  # the folder's JSON Lines files (not its images or MLTable)
            files += sorted(p for p in where.rglob("*.jsonl") if p.is_file())
        elif kind == "pattern":
            files += sorted(Path(p) for p in glob.glob(str(where), recursive=True))
        else:
            files.append(where)
    return files


def rows(folder: Path):
    """Each JSON line of the table, with the file and line it came from."""
    for path in jsonl_files(folder):
        with open(path, encoding="utf-8") as lines:
            for number, line in enumerate(iter(lambda: lines.readline(MAX_LINE + 1), ""), 1):
                if len(line) > MAX_LINE:
                    raise DataError(f"{path}:{number}: a line of over {MAX_LINE} characters")
                if line.strip():
                    try:
                        yield json.loads(line), f"{path}:{number}"
                    except json.JSONDecodeError as err:
                        raise DataError(f"{path}:{number}: not JSON ({err})") from None


def classification_file(folder: Path, out: Path, *, label: str, multilabel: bool) -> int:
    table, mapping, count = (folder if folder.is_dir() else folder.parent), url_map(), 0
    with open(out, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, delimiter="\t")
        for row, where in rows(folder):
            value = row.get(label)
            names = value if isinstance(value, list) else [value]
            if value is None or not all(isinstance(n, (str, int)) for n in names):
                raise DataError(f"{where}: no {label!r} of text (the row has {sorted(row)})")
            if multilabel and any("," in str(n) for n in names):
                raise DataError(f"{where}: label {value!r} holds a comma, which the runner's "
                                "label file uses between labels")
            image = local_image(str(row.get("image_url") or ""), table, mapping)
            writer.writerow([image, ",".join(map(str, names))])
            count += 1
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
