"""The parts of a pipeline step's reuse key, kept so that a later run can say what changed.

reuse.py decides reuse by one hash over a step's identity (its key); this module computes that
identity and keeps its parts, one `KeyParts` per step (`<step folder>/reuse.json`): the command,
each code file's digest, each additional include, each input (a literal's text, a data input's
content digest), the environment (its label, Python and package list), the declared outputs,
the placement, the variables; and, outside the key, the component's name and version and a
trial's sampled parameters.

A code folder's per-file digests are kept as a tree of digests (`<runs>/.reuse/trees/`), one
small object per folder, named by its content as git names its trees: a step's parts hold only
the root, every run of the same snapshot shares its objects, a change to one file adds only the
objects of the folders above it, and comparing two snapshots reads only the folders that differ.
A code folder of 50,000 files costs one object per folder, once.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from mlops.runtime.snapshot import code_files

TREES = "trees"
SHORT = 16  # hex digits of a file's digest kept in a tree: to tell files apart, not to decide
IGNORE_FILES = (".amlignore", ".gitignore")
Json = str | int | float | bool | None | list["Json"] | dict[str, "Json"]


def file_digest(path: Path, cache: dict[str, object]) -> str:
    """sha256 of a file's bytes, remembered by (path, size, mtime) for this index."""
    stat = path.stat()
    memo = f"{path}|{stat.st_size}|{stat.st_mtime_ns}"
    if memo not in cache:
        digest = hashlib.sha256()
        with open(path, "rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
        cache[memo] = digest.hexdigest()
    return str(cache[memo])


def sorted_files(folder: Path):
    """(file, path relative to folder) for every file below it, in a stable order."""
    for root, dirs, files in os.walk(folder, followlinks=True):
        dirs.sort()
        for name in sorted(files):
            full = Path(root) / name
            yield full, full.relative_to(folder)


def data_digest(path: Path, cache: dict[str, object]) -> str:
    """A data input's identity: its content, wherever it lives."""
    if path.is_file():
        return file_digest(path, cache)
    if not path.is_dir():
        return f"missing:{path}"
    digest = hashlib.sha256()
    for full, relative in sorted_files(path):
        digest.update(f"{relative}\0{file_digest(full, cache)}\n".encode())
    return digest.hexdigest()


def tree_identity(code: Path, cache: dict[str, object]) -> str:
    """What decides which files Azure uploads: every path under the folder and the ignore
    files' text. The same identity gives the same upload list."""
    digest = hashlib.sha256()
    for full, relative in sorted_files(code):
        digest.update(f"{relative}\n".encode())
        if full.name in IGNORE_FILES:
            digest.update(file_digest(full, cache).encode())
    return digest.hexdigest()


def code_listing(code: Path, cache: dict[str, object]) -> list[tuple[str, str]]:
    """(path relative to `code`, sha256) of every file Azure uploads. The upload list comes from
    azure-ai-ml's helpers (importing it costs a second, most of an all-reused rerun), so it is
    remembered by the tree's identity."""
    memo = f"files|{code}|{tree_identity(code, cache)}"
    if memo not in cache:
        cache[memo] = sorted(relative for _, relative in code_files(code))
    return [(str(relative), file_digest(code / relative, cache)) for relative in cache[memo]]


def listing_digest(listing: list[tuple[str, str]]) -> str:
    digest = hashlib.sha256()
    for relative, file_sha in listing:
        digest.update(f"{relative}\0{file_sha}\n".encode())
    return digest.hexdigest()


def code_digest(code: Path | None, cache: dict[str, object]) -> str:
    """The snapshot's content: what the key hashes for `code:` and each additional include."""
    if code is None:
        return "none"
    if code.is_file():
        return file_digest(code, cache)
    return listing_digest(code_listing(code, cache))


@dataclass(frozen=True)
class Source:
    """`code:` or one additional include: where it is, its digest (in the key) and, for a
    folder, the root of its tree of digests."""

    path: str
    digest: str
    tree: str = ""


class TreeStore:
    """Trees of digests, one JSON object per folder ({name: "f<digest>" | "d<object>"}),
    stored once under their own digest."""

    def __init__(self, folder: Path):
        self.folder = folder / TREES

    def source(self, path: Path | None, cache: dict[str, object]) -> Source | None:
        if path is None:
            return None
        if path.is_file():
            return Source(str(path), file_digest(path, cache))
        listing = code_listing(path, cache)
        return Source(str(path), listing_digest(listing), self.put(listing))

    def put(self, listing: list[tuple[str, str]]) -> str:
        """Store the tree of `listing`; its root's name."""
        folders: dict[str, dict[str, str]] = {"": {}}
        for relative, digest in listing:
            parts = relative.split("/")
            for depth in range(1, len(parts)):
                folders.setdefault("/".join(parts[:depth]), {})
            folders["/".join(parts[:-1])][parts[-1]] = "f" + digest[:SHORT]
        root = ""
        for folder in sorted(folders, key=lambda f: f.count("/") + bool(f), reverse=True):
            name = self._write(folders[folder])
            if not folder:
                root = name
            else:
                parent, _, base = folder.rpartition("/")
                folders[parent][base] = "d" + name
        return root

    def _write(self, entries: dict[str, str]) -> str:
        text = json.dumps(entries, sort_keys=True, separators=(",", ":"))
        name = hashlib.sha256(text.encode()).hexdigest()[:32]
        path = self.folder / name[:2] / f"{name}.json"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(text)
            os.replace(tmp, path)
        return name

    def get(self, name: str) -> dict[str, str] | None:
        try:
            entries = json.loads((self.folder / name[:2] / f"{name}.json").read_text())
        except (OSError, ValueError):
            return None
        return entries if isinstance(entries, dict) else None

    def diff(self, old: str, new: str, limit: int = 50) -> list[tuple[str, str]]:
        """(path, "changed" | "added" | "removed") between two trees, at most `limit`; only the
        folders that differ are read. ("", "unknown") when an object is gone."""
        found: list[tuple[str, str]] = []
        self._diff(old, new, "", found, limit=limit)
        return found

    def _diff(self, old: str, new: str, above: str,
              found: list[tuple[str, str]], *, limit: int) -> None:
        before, after = self.get(old), self.get(new)
        if before is None or after is None:
            found.append((above.rstrip("/"), "unknown"))
            return
        for name in sorted(set(before) | set(after)):
            if len(found) >= limit:
                return
            was, now = before.get(name), after.get(name)
            if was == now:
                continue
            if was and now and was[0] == now[0] == "d":
                self._diff(was[1:], now[1:], f"{above}{name}/", found, limit=limit)
            else:
                slash = "/" if (now or was or "")[:1] == "d" else ""
                state = "added" if was is None else "removed" if now is None else "changed"
                found.append((f"{above}{name}{slash}", state))


@dataclass(frozen=True, kw_only=True)
class KeyParts:
    """What a step's key hashes, part by part (identity()), and what the key leaves out but a
    reader wants named (component, version, params); where the step ran (run, step, folder)."""

    key: str = ""
    command: str = ""
    code: Source | None = None
    includes: list[Source] = field(default_factory=list)
    environment: dict[str, Json] = field(default_factory=dict)  # label, python, packages...
    inputs: dict[str, str] = field(default_factory=dict)  # "data:<sha256>" | "text:<value>"
    outputs: dict[str, Json] = field(default_factory=dict)
    placement: dict[str, Json] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Json] = field(default_factory=dict)  # a parallel node's own settings
    component: str = ""
    version: str = ""
    params: dict[str, str] = field(default_factory=dict)  # a sweep trial's sampled values
    run: str = ""  # the run folder's name
    step: str = ""  # the step's path in its pipeline (outer/train)
    folder: str = ""  # the step's folder

    def identity(self) -> dict[str, Json]:
        """Exactly what the key hashes (an empty `extra` is left out: command steps' keys)."""
        env = self.environment
        identity: dict[str, Json] = {
            "command": self.command, "code": self.code.digest if self.code else "none",
            "includes": [source.digest for source in self.includes],
            "environment": [env.get("requirements", []), env.get("python"),
                            env.get("adds", []), env.get("fixed", [])],
            "inputs": self.inputs, "outputs": self.outputs, "placement": self.placement,
            "env": self.env}
        if self.extra:
            identity["extra"] = self.extra
        return identity

    def hashed(self) -> KeyParts:
        text = json.dumps(self.identity(), sort_keys=True, default=str)
        return replace(self, key=hashlib.sha256(text.encode()).hexdigest()[:24])

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"{PARTS_FILE}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(asdict(self), default=str))
        os.replace(tmp, folder / PARTS_FILE)

    @classmethod
    def read(cls, folder: Path) -> KeyParts | None:
        """The parts a step's folder keeps; None when there are none, or they are damaged."""
        try:
            data = json.loads((folder / PARTS_FILE).read_text())
            known = {f.name for f in fields(cls)}
            kept = {k: v for k, v in data.items() if k in known}
            kept["code"] = Source(**kept["code"]) if kept.get("code") else None
            kept["includes"] = [Source(**item) for item in kept.get("includes") or []]
            return cls(**kept)
        except (OSError, ValueError, TypeError, AttributeError, KeyError):
            return None


PARTS_FILE = "reuse.json"


def plain(value: object) -> Json:
    """`value` as JSON holds it (tuples as lists, paths and enums as text), so parts read back
    hash as they were written."""
    return json.loads(json.dumps(value, default=str))

