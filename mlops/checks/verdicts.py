"""A spec's verdict kept between runs: a job spec that passed every check before a local run
passes again, without azure-ai-ml's import and validation (seconds of CPU), as long as nothing
the checks looked at has changed.

The verdict is found by what the checks were given (the spec's file and bytes, its data after
--set and --remove, the current folder, Azure's variables, azure-ai-ml's release, the installed
packages and the checks' own code) and then held against what they read while they ran: each
file opened (its bytes' digest), each path looked at (missing, a folder, or a file of a size and
time), each folder listed (its names), recorded as the checks ran (an audit hook for opens and
listings; os.stat and os.lstat watched for the duration). Anything changed, and the checks run
again. Only a spec that passed is kept (with its warnings, printed again): one Azure would refuse
is checked every time. Entries are written atomically with a checksum (mlops/project.py
remember), so a damaged one is checked afresh and replaced.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
import sysconfig
import threading
from dataclasses import asdict
from pathlib import Path

from mlops.project import project, remember, remembered
from mlops.specs import Finding, Spec

KIND = "verdicts"
PACKAGE = Path(__file__).resolve().parents[1]
TOOL_FILES = (".py", ".json", ".yml")
SYSTEM = ("/proc/", "/sys/", "/dev/")
_local = threading.local()
_hooked: list[bool] = []


def observe(path: str, what: str) -> object:
    """What a check saw of `path`: `stat` (missing, a folder, or a file's size and time),
    `read` (its bytes' digest), `list` (a folder's names)."""
    try:
        if what == "read":
            with open(path, "rb") as handle:
                return hashlib.file_digest(handle, "sha256").hexdigest()
        if what == "list":
            return sorted(os.listdir(path))
        found = os.stat(path)
    except OSError as err:
        return f"error {err.errno}"
    if stat.S_ISDIR(found.st_mode):
        return "folder"
    return ["file", found.st_size, found.st_mtime_ns] if stat.S_ISREG(found.st_mode) else "other"


def ignored() -> tuple[str, ...]:
    """The interpreter's and the packages' own files (their releases are in the key) and the
    system's: what no verdict depends on."""
    own = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(PACKAGE)}
    return SYSTEM + tuple(p + os.sep for p in own)


class Recording:
    """What the checks of this thread touched while it is active."""

    def __init__(self) -> None:
        self.seen: dict[str, set[str]] = {}
        self.ignored = ignored()

    def note(self, path, what: str) -> None:
        """`path` was opened, listed or looked at (the import system's realpath calls are
        many: absolute paths are taken as they come)."""
        if isinstance(path, str) and path.startswith("/"):
            name = path
        elif isinstance(path, (str, bytes, os.PathLike)):
            try:
                name = os.path.abspath(os.fsdecode(path))
            except (TypeError, ValueError):
                return
        else:
            return  # a descriptor
        if not name.startswith(self.ignored) and "<frozen " not in name:
            self.seen.setdefault(name, set()).add(what)

    def observed(self) -> dict[str, dict[str, object]]:
        return {path: {what: observe(path, what) for what in sorted(kinds)}
                for path, kinds in sorted(self.seen.items())}

    def __enter__(self) -> Recording:
        if not _hooked:
            sys.addaudithook(_audit)
            _hooked.append(True)
        _local.recording = self
        self._real = os.stat, os.lstat
        os.stat, os.lstat = _watched(os.stat), _watched(os.lstat)
        return self

    def __exit__(self, *_) -> None:
        os.stat, os.lstat = self._real
        _local.recording = None


def _reading(mode, flags) -> bool:
    if isinstance(mode, str):
        return not set(mode) & set("wax+")
    return isinstance(flags, int) and flags & os.O_ACCMODE == os.O_RDONLY


def _audit(event: str, args: tuple) -> None:
    recording = getattr(_local, "recording", None)
    if recording is None:
        return
    if event == "open" and len(args) >= 3 and _reading(args[1], args[2]):
        recording.note(args[0], "read")
    elif event in ("os.listdir", "os.scandir") and args and args[0] not in sys.path:
        recording.note(args[0], "list")  # (the import system lists sys.path's folders)


def _watched(real):
    def stat_call(path, *args, **kwargs):
        recording = getattr(_local, "recording", None)
        if recording is not None and not kwargs.get("dir_fd") and not args:
            recording.note(path, "stat")
        return real(path, *args, **kwargs)

    return stat_call


def tool_stamp() -> list[object]:
    """The checks' own code and the installed packages, as they stand (a change to either is
    another verdict)."""
    files = []
    for folder, dirs, names in os.walk(PACKAGE):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(n for n in names if n.endswith(TOOL_FILES)):
            found = os.stat(os.path.join(folder, name))
            files.append([os.path.join(folder, name), found.st_size, found.st_mtime_ns])
    site = sysconfig.get_paths()["purelib"]
    return [files, sys.version, os.stat(site).st_mtime_ns if os.path.isdir(site) else 0]


def verdict_key(spec: Spec) -> list[object]:
    """What the checks are given: the spec as it will run, its file's bytes (the lines findings
    name), where they run from, Azure's variables, the settings file, the tool."""
    config = project().config
    return [str(spec.path.resolve()), observe(str(spec.path), "read"), spec.role, spec.data,
            os.getcwd(), sorted((k, v) for k, v in os.environ.items() if k.startswith("AZURE")),
            observe(str(config), "read") if config else None, tool_stamp()]


def held(entry: object) -> list[Finding] | None:
    """The findings a kept verdict had, when everything its checks saw is still as it was."""
    if not isinstance(entry, dict) or not isinstance(entry.get("seen"), dict):
        return None
    for path, kinds in entry["seen"].items():
        if not isinstance(kinds, dict) or any(observe(path, what) != value
                                              for what, value in kinds.items()):
            return None
    try:
        return [Finding(**{**f, "path": Path(f["path"])}) for f in entry["findings"]]
    except (TypeError, KeyError):
        return None


def checked(spec: Spec, check) -> list[Finding]:
    """`check(spec)`'s findings, from the verdict kept for this spec when it still holds."""
    key = verdict_key(spec)
    found = held(remembered(KIND, key))
    if found is not None:
        return found
    with Recording() as recording:
        found = check(spec)
    if not any(f.is_error for f in found):
        findings = [{**asdict(f), "path": str(f.path)} for f in found]
        remember(KIND, key, {"findings": findings, "seen": recording.observed()})
    return found
