"""Stand-in data for the references a case's spec makes (`azureml:<asset>`, a datastore path, a
URL the repository downloads): small generated files, or a file of the repository itself,
written into the case's scratch folder and named in a mapping file of the local runtime's form
(mlops/runtime/uris.py: a key is a reference, `azureml:<name>` for every version, or a prefix
ending in `/`; a value is a local path, here absolute).

A stand-in is one generator and its options:

    repo: data/taxi-data.csv                      # a file or folder of the repository
    state: "**/wd/outputs/model.joblib"           # the newest match in the group's runs so far
                                                  # (what an earlier case of the group wrote)
    shared: nyc-taxi                              # an empty folder every case of the group maps
                                                  # (a datastore path one writes, the next reads)
    csv: {rows: 200, columns: {age: int:18-90, income: float, churn: binary,
          city: category:a|b|c, note: text, day: date, id: id}, name: data.csv, folder: true}
    mltable: {rows: 50, columns: {...}}           # a folder: data.csv and its MLTable file
                                                  # (a name `col_[0-783]` is col_0 ... col_783)
    parquet: {rows: 50, columns: {...}, name: x.parquet}   # typed; a date column a timestamp
    images: {classes: [cat, dog], per_class: 4, size: 32}   # a folder per class, PNG files
    text: "a line"                                # a file holding that text
    folder: {files: {a.csv: {csv: {...}}, b.txt: {text: x}}}
"""

from __future__ import annotations

import csv
import io
import random
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath

import yaml

from mlops.errors import LocalRunError

GENERATORS = ("repo", "state", "shared", "csv", "mltable", "parquet", "images", "text",
              "folder")
COLUMN = re.compile(r"^(int|float)(:-?\d+(\.\d+)?--?\d+(\.\d+)?)?$|^(binary|text|date|id)$|"
                    r"^category:[^|]+(\|[^|]+)+$")
MAX_ROWS = 100_000
MAX_COLUMNS = 10_000
RANGE = re.compile(r"^(.*)\[(\d+)-(\d+)\](.*)$")  # col_[0-783]: col_0 ... col_783
MAX_IMAGES = 2_000


class StandinError(LocalRunError):
    """A stand-in's definition is wrong (the manifest's), or its repository file is missing."""


@dataclass(frozen=True)
class Roots:
    repo: Path  # the repository's checkout
    state: Path  # the group's runtime state (its runs/, workspace/)


@dataclass(frozen=True)
class Standin:
    reference: str  # what the spec names: azureml:taxi-data@latest, a datastore path, a URL
    generator: str
    options: dict[str, object] = field(default_factory=dict, hash=False, compare=False)


def parse(value: object, where: str) -> tuple[Standin, ...]:
    if value in (None, {}):
        return ()
    if not isinstance(value, dict):
        raise StandinError(f"{where}: standins: expected a mapping of references to generators")
    found = []
    for reference, spec in value.items():
        found.append(parse_one(str(reference), spec, f"{where}: standins[{reference}]"))
    return tuple(found)


def parse_one(reference: str, spec: object, where: str) -> Standin:
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in GENERATORS:
        raise StandinError(f"{where}: expected one generator of {', '.join(GENERATORS)}")
    generator, options = next(iter(spec.items()))
    if generator in ("repo", "state", "shared", "text"):
        if not isinstance(options, str):
            raise StandinError(f"{where}: {generator}: expected a string")
        if generator in ("repo", "state", "shared"):
            check_inside(options, where)
        return Standin(reference, generator, {"value": options})
    if not isinstance(options, dict):
        raise StandinError(f"{where}: {generator}: expected a mapping of options")
    CHECKS[generator](options, where)
    return Standin(reference, generator, dict(options))


def check_inside(path: str, where: str) -> None:
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or not path:
        raise StandinError(f"{where}: {path!r} must be a path inside the repository")


def check_table(options: dict[str, object], where: str) -> None:
    columns = options.get("columns")
    if not isinstance(columns, dict) or not columns:
        raise StandinError(f"{where}: columns: a mapping of column names to kinds")
    for name, kind in columns.items():
        if not isinstance(kind, str) or not COLUMN.match(kind):
            raise StandinError(f"{where}: columns.{name}: {kind!r} is not int[:lo-hi], "
                               "float[:lo-hi], binary, text, date, id or category:a|b")
    if not 0 < len(expand(columns)) <= MAX_COLUMNS:
        raise StandinError(f"{where}: columns: 1 to {MAX_COLUMNS} (a range [lo-hi] counts each)")
    rows = options.get("rows", 100)
    if not isinstance(rows, int) or not 0 < rows <= MAX_ROWS:
        raise StandinError(f"{where}: rows: 1 to {MAX_ROWS}")
    if "name" in options:
        check_inside(str(options["name"]), where)


def check_images(options: dict[str, object], where: str) -> None:
    classes, per_class = options.get("classes"), options.get("per_class", 4)
    if not isinstance(classes, list) or not classes or not all(isinstance(c, str) and c
                                                                for c in classes):
        raise StandinError(f"{where}: classes: a list of class names")
    if not isinstance(per_class, int) or not 0 < per_class * len(classes) <= MAX_IMAGES:
        raise StandinError(f"{where}: per_class: at most {MAX_IMAGES} images in all")


def check_folder(options: dict[str, object], where: str) -> None:
    files = options.get("files")
    if not isinstance(files, dict) or not files:
        raise StandinError(f"{where}: files: a mapping of file names to generators")
    for name, spec in files.items():
        check_inside(str(name), where)
        parse_one(str(name), spec, f"{where}: files[{name}]")


CHECKS = {"csv": check_table, "mltable": check_table, "parquet": check_table,
          "images": check_images,
          "folder": check_folder}


def generate(standin: Standin, into: Path, roots: Roots) -> Path:
    """Write the stand-in under `into` (a folder of its own); its local path."""
    seed = random.Random(standin.reference)
    repo_root = roots.repo
    if standin.generator == "state":
        return newest(roots.state, str(standin.options["value"]), standin.reference)
    if standin.generator == "shared":
        shared = roots.state.parent / "shared" / str(standin.options["value"])
        shared.mkdir(parents=True, exist_ok=True)
        return shared
    if standin.generator == "repo":
        path = (repo_root / str(standin.options["value"])).resolve()
        if not path.exists() or not path.is_relative_to(repo_root.resolve()):
            raise StandinError(f"stand-in for {standin.reference}: {standin.options['value']} "
                               "is not in the repository at this commit")
        return path
    into.mkdir(parents=True, exist_ok=True)
    if standin.generator == "text":
        target = into / "data.txt"
        target.write_text(str(standin.options["value"]))
        return target
    if standin.generator == "folder":
        for name, spec in dict(standin.options["files"]).items():
            made = generate(parse_one(str(name), spec, "folder"), into / ".parts" / str(name),
                            roots)
            (into / str(name)).parent.mkdir(parents=True, exist_ok=True)
            (into / str(name)).write_bytes(made.read_bytes())
        return into
    return WRITERS[standin.generator](standin.options, into, seed)


def newest(state: Path, pattern: str, reference: str) -> Path:
    found = sorted(state.glob(pattern), key=lambda p: p.stat().st_mtime) if state.is_dir() else []
    if not found:
        raise StandinError(f"stand-in for {reference}: nothing matches {pattern} in the runs so "
                           "far (the case it comes from did not write it)")
    return found[-1]


def expand(columns: dict[str, object]) -> dict[str, object]:
    """Column names as written, a range `col_[0-783]` standing for col_0 ... col_783 (each of
    its kind): a table of hundreds of pixel columns in one line of the manifest."""
    found: dict[str, object] = {}
    for name, kind in columns.items():
        match = RANGE.match(str(name))
        if match is None:
            found[str(name)] = kind
            continue
        prefix, low, high, suffix = match.groups()
        found.update({f"{prefix}{i}{suffix}": kind for i in range(int(low), int(high) + 1)})
    return found


def table(options: dict[str, object], rng: random.Random) -> str:
    columns = expand(dict(options["columns"]))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in range(int(options.get("rows", 100))):
        writer.writerow([cell(str(kind), row, rng) for kind in columns.values()])
    return out.getvalue()


def cell(kind: str, row: int, rng: random.Random) -> object:
    name, _, bounds = kind.partition(":")
    if name == "id":
        return row + 1
    if name == "binary":
        return row % 2 if row < 2 else rng.randint(0, 1)  # both labels, always
    if name == "category":
        choices = bounds.split("|")
        return choices[row % len(choices)] if row < len(choices) else rng.choice(choices)
    if name == "text":
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
    if name == "date":
        return f"20{rng.randint(15, 23)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    low, high = (float(x) for x in re.split(r"(?<=\d)-", bounds)) if bounds else (0.0, 100.0)
    value = rng.uniform(low, high)
    return int(round(value)) if name == "int" else round(value, 4)


WORDS = ("good", "bad", "great", "terrible", "fine", "product", "service", "free", "offer",
         "meeting", "tomorrow", "win", "money", "hello", "thanks", "late", "fast", "slow")


def write_csv(options: dict[str, object], into: Path, rng: random.Random) -> Path:
    target = into / str(options.get("name", "data.csv"))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(table(options, rng))
    return into if options.get("folder") else target


def write_mltable(options: dict[str, object], into: Path, rng: random.Random) -> Path:
    (into / "data.csv").write_text(table(options, rng))
    spec = {"paths": [{"file": "./data.csv"}],
            "transformations": [{"read_delimited": {"delimiter": ",", "header":
                                                    "all_files_same_headers"}}]}
    (into / "MLTable").write_text(yaml.safe_dump(spec, sort_keys=False))
    return into


def write_parquet(options: dict[str, object], into: Path, rng: random.Random) -> Path:
    """The table as Parquet, each column typed (a `date` one a timestamp) and no pandas
    metadata in it, so every pandas and pyarrow release reads it alike."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = expand(dict(options["columns"]))
    rows = [[cell(str(kind), row, rng) for kind in columns.values()]
            for row in range(int(options.get("rows", 100)))]
    data = {}
    for index, (name, kind) in enumerate(columns.items()):
        values = [row[index] for row in rows]
        if str(kind) == "date":
            values = [datetime.fromisoformat(str(v)) for v in values]
        data[str(name)] = pa.array(values)
    target = into / str(options.get("name", "data.parquet"))
    target.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(data), target)
    return into if options.get("folder") else target


def write_images(options: dict[str, object], into: Path, rng: random.Random) -> Path:
    from PIL import Image

    size = int(options.get("size", 32))
    for label in list(options["classes"]):
        (into / label).mkdir(parents=True, exist_ok=True)
        for index in range(int(options.get("per_class", 4))):
            color = tuple(rng.randint(0, 255) for _ in range(3))
            Image.new("RGB", (size, size), color).save(into / label / f"{label}_{index}.png")
    return into


WRITERS = {"csv": write_csv, "mltable": write_mltable, "parquet": write_parquet,
           "images": write_images}


def write_map(paths: dict[str, Path], target: Path) -> Path:
    """The mapping file the runtime reads (--assets): each reference to its absolute path."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("# stand-ins for this conformance case (scripts/corpus/standins.py)\n" +
                      yaml.safe_dump({k: str(v) for k, v in paths.items()}, sort_keys=True))
    return target
