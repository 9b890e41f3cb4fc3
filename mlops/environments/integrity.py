"""A cached environment, whole: built once under a lock, its files checked against their wheels'
digests when it is built, and against its manifest before its first use in a process.

Files are installed by copying (resolve.uv_env), so a change in one environment reaches no
other and not uv's cache; a layer found damaged is built again, and a build whose files differ
from their wheels' RECORD digests (a damaged package cache) once more from freshly downloaded
packages. The manifest records each file's size and modification time: any write moves one.
A cache that cannot be written still serves the layers it holds (docs/environments.md).
"""

from __future__ import annotations

import base64
import contextlib
import csv
import fcntl
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from mlops.errors import MachineError

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 2  # each file's size and modification time
NOT_CONTENT = {"layer.json", MANIFEST, "used_by.txt"}  # the cache's own records


def contents(folder: Path) -> dict[str, list[int]]:
    """Every file (and link) a layer holds, by its path in the layer, with its size and
    modification time (any write moves it); Python's bytecode caches, which its users write,
    are not the layer's content."""
    found: dict[str, list[int]] = {}
    todo = [("", str(folder))]
    while todo:
        relative, path = todo.pop()
        with os.scandir(path) as entries:
            for entry in entries:
                name = f"{relative}{entry.name}"
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        todo.append((f"{name}/", entry.path))
                elif name not in NOT_CONTENT:
                    info = entry.stat(follow_symlinks=False)
                    found[name] = [info.st_size, info.st_mtime_ns]
    return found


def write_manifest(folder: Path) -> None:
    """The manifest, whole or not at all (a new file moved into place): a run that reads it
    while it is written, or after a build was killed writing it, never finds half of one."""
    text = json.dumps({"format": MANIFEST_FORMAT, "files": contents(folder)}, sort_keys=True)
    tmp = folder / f".{MANIFEST}.{os.getpid()}.tmp"
    try:
        tmp.write_text(text)
        os.replace(tmp, folder / MANIFEST)
    finally:
        tmp.unlink(missing_ok=True)


def damage(folder: Path) -> list[str]:
    """What a cached layer lost, had changed or had added since it was built ([] when whole).
    A layer from before manifests of this format gets one now (where the cache is writable)."""
    try:
        recorded = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        recorded = None
    except (OSError, ValueError):
        return [f"its {MANIFEST} is unreadable"]
    if not isinstance(recorded, dict) or recorded.get("format") != MANIFEST_FORMAT:
        with contextlib.suppress(OSError):  # a read-only cache: checked as it is
            write_manifest(folder)
        return []
    files, now = recorded.get("files") or {}, contents(folder)
    found = [f"{path} {'missing' if path not in now else 'changed'}"
             for path, seen in sorted(files.items()) if now.get(path) != seen]
    return found + [f"{path} added" for path in sorted(set(now) - set(files))]


def unverified(folder: Path) -> list[str]:
    """The installed files that differ from every sha256 their wheels' RECORDs give (a damaged
    package cache installs them so): the digest check of a freshly built layer. A file more than
    one wheel ships (a namespace package's `azureml/__init__.py`) holds one of theirs, as pip
    leaves the last installed; bytecode is the installer's own compilation, not the wheel's."""
    return [str(path.relative_to(folder)) for path in _wrong(_records(folder))]


def torn(folder: Path) -> list[list[str]]:
    """For each file more than one wheel ships that holds none of their contents, its owners
    as `name==version`: uv installs wheels in parallel and two of them writing one namespace
    `__init__.py` at once can leave a mix of both (astral-sh/uv#4831), where pip's serial
    install leaves the last one whole. Installing one owner again, alone, makes it whole."""
    records = _records(folder)
    found = []
    for path in _wrong(records):
        owners = sorted({_owner(info) for _, _, info in records[path]} - {""})
        if len(owners) > 1 and owners not in found:
            found.append(owners)
    return found


def sharers(folder: Path) -> list[list[str]]:
    """Groups of wheels (`name==version`) whose RECORDs list one same file (mlflow and
    mlflow-skinny both ship the mlflow/ package): which of them wrote it last decides it."""
    groups: list[list[str]] = []
    for rows in _records(folder).values():
        infos = {info for _, _, info in rows}
        owners = sorted({_owner(info) for info in infos} - {""}) if len(infos) > 1 else []
        if len(owners) > 1 and owners not in groups:
            groups.append(owners)
    return groups


def _records(folder: Path) -> dict[Path, list[tuple[str, str, Path]]]:
    """Every file the layer's wheels list with a digest: (algorithm, digest, dist-info)."""
    wanted: dict[Path, list[tuple[str, str, Path]]] = {}
    for record in folder.glob("lib/python*/site-packages/*.dist-info/RECORD"):
        site = record.parent.parent
        with contextlib.suppress(OSError, csv.Error):
            for row in csv.reader(record.read_text(encoding="utf-8").splitlines()):
                algorithm, _, digest = (row[1] if len(row) > 1 else "").partition("=")
                path = Path(os.path.normpath(site / row[0])) if digest else None
                if path is None or not path.is_relative_to(folder) or \
                        algorithm not in hashlib.algorithms_guaranteed or \
                        "__pycache__" in path.parts:
                    continue
                wanted.setdefault(path, []).append((algorithm, digest, record.parent))
    return wanted


def _wrong(records: dict[Path, list[tuple[str, str, Path]]]) -> list[Path]:
    return [path for path, digests in records.items()
            if not any(_urlsafe_digest(path, a) == d for a, d, _ in digests)]


def _owner(info: Path) -> str:
    """`name==version` of a .dist-info folder ("" where its metadata cannot be read)."""
    from importlib.metadata import PathDistribution

    try:
        meta = PathDistribution(info).metadata
        return f"{meta['Name']}=={meta['Version']}" if meta["Name"] and meta["Version"] else ""
    except (OSError, ValueError):
        return ""


def _urlsafe_digest(path: Path, algorithm: str) -> str:
    digest = hashlib.new(algorithm)
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    except OSError:
        return ""
    return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


CHECKED: set[Path] = set()  # layers found whole by this process (a sweep's trials check once)


def cached_layer(folder: Path, build: Callable[[Path], None]) -> Path:
    """`folder`, built once by `build` (which writes its layer.json last), its files checked
    against their wheels' digests, and checked before its first use in a process against the
    manifest written after it: a lock keeps concurrent runs out, and a build that died
    half-way, or a layer damaged since, is built afresh. A cache that cannot be written still
    serves the layers it holds."""
    if folder in CHECKED and (folder / "layer.json").is_file():
        return folder
    if _sealed(folder) and not damage(folder):
        CHECKED.add(folder)
        return folder
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with open(folder.parent / f"{folder.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            _build_whole(folder, build)
    except OSError as err:
        if (folder / "layer.json").is_file() and not _sealed(folder) and \
                not _unsealed(folder):
            return folder  # a read-only cache: a layer it holds, checked as it is
        raise MachineError(f"the environment cache {folder.parent} cannot be written "
                           f"({err.strerror or err}) and {folder.name} needs building there: "
                           "make it writable, or set MLOPS_CACHE_DIR (or LOCAL_ENVS_DIR) to a "
                           "writable folder") from None
    CHECKED.add(folder)
    return folder


def _sealed(folder: Path) -> bool:
    """Whether the layer was built and its digest check passed: the manifest is written after
    both (a layer.json alone is a build stopped during its check, or one from before
    manifests)."""
    return (folder / "layer.json").is_file() and (folder / MANIFEST).is_file()


def _unsealed(folder: Path) -> list[str]:
    """Under the lock, a layer with a layer.json and no manifest: its files checked against
    their wheels' digests now and sealed when they hold (a read-only cache: used as it is);
    the files that differ, as damage."""
    if not (folder / "layer.json").is_file():
        return []
    wrong = unverified(folder)
    if not wrong:
        with contextlib.suppress(OSError):  # a read-only cache: checked as it is
            write_manifest(folder)
    return [f"{path} differs from its package's digest" for path in wrong]


def _build_whole(folder: Path, build: Callable[[Path], None]) -> None:
    """Under the lock: build `folder` unless another run just did; a damaged layer is built
    again, and a build whose files differ from their wheels' digests is built once more from
    freshly downloaded packages (uv's cache bypassed)."""
    broken = _unsealed(folder) if not _sealed(folder) else damage(folder)
    if broken and _sweep_added(folder, broken):
        return
    if broken:
        shown = ", ".join(broken[:3]) + (f" and {len(broken) - 3} more" if
                                         len(broken) > 3 else "")
        print(f"warning: the cached environment {folder} is damaged ({shown}); building "
              "it again", file=sys.stderr, flush=True)
    if not broken and (folder / "layer.json").is_file():
        return
    first: dict[str, str] = {}
    for fresh in (False, True):
        shutil.rmtree(folder, ignore_errors=True)
        with _downloads(fresh):
            build(folder)
        wrong = unverified(folder)
        held = {path: _urlsafe_digest(folder / path, "sha256") for path in wrong}
        if not wrong or (fresh and held == first):
            _as_published(folder, wrong)
            write_manifest(folder)
            return
        first = held
        print(f"warning: {len(wrong)} file(s) of the environment {folder} differ from their "
              f"packages' digests ({', '.join(wrong[:3])}): "
              + ("uv's package cache may be damaged; building it again from freshly "
                 "downloaded packages" if not fresh else "different bytes from fresh downloads"),
              file=sys.stderr, flush=True)
    shutil.rmtree(folder, ignore_errors=True)
    raise MachineError(f"the environment {folder.name} was built twice, the second time from "
                       f"freshly downloaded packages, and its files still differ from their "
                       f"digests, each time otherwise ({', '.join(wrong[:3])}): check the "
                       "disk and the package index")


def _as_published(folder: Path, wrong: list[str]) -> None:
    """Files that differ from their RECORD's digest with the same bytes from the package cache
    and from fresh downloads: the wheel was published so (torch 1.10.2's cp37 wheel misstates
    its METADATA's digest). pip installs a wheel without checking its RECORD's digests, so
    Azure's image holds these bytes too: one note, no refusal."""
    if wrong:
        print(f"note: {len(wrong)} file(s) of the environment {folder} differ from the digests "
              f"their wheels' RECORDs give, alike from the package cache and from fresh "
              f"downloads ({', '.join(wrong[:3])}): the wheels were published so, and pip "
              "installs them as they are", file=sys.stderr, flush=True)


def _sweep_added(folder: Path, broken: list[str]) -> bool:
    """Whether the layer is whole again once the files a run wrote into it are removed (a
    package that keeps state in its own folder: deepchecks' `.user_id`). A job on Azure writes
    into its own container's copy, which the next job never sees; here the layer is shared, so
    what a run added goes, and the rest, unchanged, is kept. Any file missing or changed is
    damage: False."""
    added = [entry.removesuffix(" added") for entry in broken]
    if not all(entry.endswith(" added") for entry in broken):
        return False
    for relative in added:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            (folder / relative).unlink()
    if damage(folder):
        return False
    shown = ", ".join(added[:3]) + (f" and {len(added) - 3} more" if len(added) > 3 else "")
    print(f"note: removed {len(added)} file(s) a run wrote into the cached environment "
          f"{folder} ({shown}): a fresh image holds none", file=sys.stderr, flush=True)
    return True


@contextlib.contextmanager
def _downloads(fresh: bool) -> Iterator[None]:
    """uv without its cache (every package downloaded again) while `fresh`."""
    if not fresh:
        yield
        return
    before = os.environ.get("UV_NO_CACHE")
    os.environ["UV_NO_CACHE"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("UV_NO_CACHE", None)
        else:
            os.environ["UV_NO_CACHE"] = before
