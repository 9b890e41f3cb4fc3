"""What `az ml` uploads from a local folder (a job's `code:`, a model's or data asset's `path:`),
and the entries its upload cannot take, refused by name before anything is copied.

azure-ai-ml lists a folder with os.walk, links followed, less what the folder's .amlignore (else
.gitignore) excludes (`get_upload_files_from_folder`); it then reads the size of every file it
listed and opens it to hash and upload it. So, of what a folder can hold:
- a named pipe (FIFO): opening it waits for a writer that never comes: the upload hangs;
- a socket: it cannot be opened (ENXIO): the upload fails;
- a device: it is read as a file: /dev/zero never ends, a disk is read whole;
- a link to nothing: its size cannot be read: the upload fails;
- links that point at each other: resolving them fails (a loop);
- an .amlignore or .gitignore that is not UTF-8 (UTF-16, as PowerShell writes it): reading it
  fails (UnicodeDecodeError);
- a link to a folder that holds it: the walk follows it into itself (a loop).
Each is refused here with its path, and how to keep it out (remove it, or list it in the
folder's .amlignore); nothing is skipped silently, since Azure skips none of them. The one thing
left out is the local runtime's own state folder (outside_state): Azure keeps runs and assets in
its service, not in the code folder.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from mlops.errors import LocalRunError
from mlops.project import installed, remember, remembered, state_dir

UNWALKED = {".git", ".venv", "node_modules", "__pycache__"}  # large, and never a code loop
KEEP_OUT = "remove it, or list it in an .amlignore file in"


def check_loops(folder: Path, what: str) -> None:
    """Refuse a link to a folder that holds it, by name, before anything walks into it. An
    .amlignore cannot keep it out: az ml's walk resolves each folder it enters, and matches the
    ignore file against the resolved paths, so the copies under the link are all uploaded."""
    real = Path(os.path.realpath(folder))
    for parent, dirs, _ in os.walk(real):  # links are looked at, not followed
        dirs[:] = [d for d in dirs if d not in UNWALKED]
        for name in dirs:
            link = Path(parent) / name
            if link.is_symlink() and Path(parent).resolve().is_relative_to(link.resolve()):
                raise LocalRunError(f"{what}: {link} links to {os.path.realpath(link)}, a "
                                    "folder it is in: az ml's upload would follow it into itself "
                                    "(an .amlignore does not stop it); remove the link")


def problem(path: Path) -> str:
    """Why az ml's upload could not take the file at `path` ("" when it can)."""
    try:
        mode = os.stat(path).st_mode  # through links, as the upload reads it
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "is a link that loops (its links point at each other): az ml's upload fails"
        if os.path.islink(path):
            return (f"is a link to {os.readlink(path)}, which does not exist: az ml's upload "
                    "fails on it")
        return f"cannot be read ({err.strerror})"
    if stat.S_ISFIFO(mode):
        return ("is a named pipe (FIFO): az ml's upload opens every file it lists and would "
                "wait on it forever")
    if stat.S_ISSOCK(mode):
        return "is a socket: az ml's upload cannot open it and fails"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return ("is a device: az ml's upload would read it as a file (endlessly, or a whole "
                "disk)")
    return ""


def upload_files(source: Path, what: str, *, ignore: bool = True,
                 nonempty: bool = False) -> list[tuple[Path, str]]:
    """(file to read, relative path) for each file az ml would upload from `source` (a file or
    a folder; `ignore`: less what its .amlignore or .gitignore excludes, as an upload does);
    LocalRunError naming the first entry it could not take, or (`nonempty`: where az ml uploads
    it) a folder with nothing to upload. azure-ai-ml lists a folder (its import costs a second
    or two of CPU); its answer is kept for the same walk of the same folder with the same ignore
    file (listed_before)."""
    if not source.is_dir():
        _refuse(source, source, what)
        return [(source, source.name)]
    check_loops(source, what)
    key = listing_key(source, ignore)
    listed = remembered("uploads", key) if key is not None else None
    if listed is None:  # kept without the state folder, which the key leaves out too
        listed = outside_state(source, sdk_listing(source, what, ignore))
        if key is not None:
            remember("uploads", key, listed)
    for _, relative in listed:
        _refuse(source / relative, source, what)
    if nonempty and not listed:  # upload_directory's EmptyDirectoryError
        kept = " after its .amlignore/.gitignore" if ignore else ""
        raise LocalRunError(f"{what}: Directory {source} is empty. path or local_path must be a "
                            f"non-empty directory (azure-ai-ml's upload: it holds no file to "
                            f"upload{kept}); put the files in it, or point at the right folder")
    return [(Path(file), relative) for file, relative in listed]


def outside_state(source: Path, listed: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """`listed` less the local runtime's state folder (its runs, MLflow store and workspace:
    `.azml/` by default) where it lies inside `source`: on Azure those are the service's, in no
    code folder, and a job's copy of them would hold every earlier run's (each step of a
    pipeline whose code is the repository copied the ones before it)."""
    state, root = os.path.realpath(state_dir()), os.path.realpath(source)
    if state == root or not state.startswith(root.rstrip(os.sep) + os.sep):
        return listed
    inside = Path(os.path.relpath(state, root)).as_posix() + "/"
    return [(file, relative) for file, relative in listed
            if not (Path(relative).as_posix() + "/").startswith(inside)]


def sdk_listing(source: Path, what: str, ignore: bool) -> list[tuple[str, str]]:
    """azure-ai-ml's own list of the files an upload of `source` takes."""
    from azure.ai.ml._utils._asset_utils import (
        IgnoreFile,
        get_ignore_file,
        get_upload_files_from_folder,
    )

    rules = get_ignore_file(source) if ignore else IgnoreFile(None)
    try:
        return [(str(file), str(relative))
                for file, relative in get_upload_files_from_folder(source, ignore_file=rules)]
    except UnicodeDecodeError as err:  # it reads the ignore file as UTF-8
        name = ".amlignore" if (source / ".amlignore").exists() else ".gitignore"  # its order
        raise LocalRunError(not_utf8(source / name, err, what)) from None
    except (RuntimeError, OSError):  # links that point at each other, as it resolves them
        for parent, _, names in os.walk(source):
            for name in names:
                if not rules.is_file_excluded((Path(parent) / name).as_posix()):
                    _refuse(Path(parent) / name, source, what)
        raise


def listing_key(source: Path, ignore: bool) -> list[object] | None:
    """Everything azure-ai-ml's listing of `source` depends on: the walk it makes (links
    followed: each folder's real path and file names, where each linked file leads), the
    ignore file it picks and its bytes, and its release; None when the walk fails (the listing
    itself then says why)."""
    try:
        rules = next((f for f in (source / ".amlignore", source / ".gitignore")
                      if f.exists()), None) if ignore else None
        walk = [[os.path.relpath(parent, source), os.path.realpath(parent), sorted(names),
                 {n: os.path.realpath(os.path.join(parent, n)) for n in names
                  if os.path.islink(os.path.join(parent, n))}]
                for parent, names in _walk_outside_state(source)]
        ignored = [str(rules.resolve()), rules.read_bytes().hex()] if rules else None
    except (OSError, RuntimeError):
        return None
    return [str(source.absolute()), walk, ignored, installed("azure.ai.ml")]


def _walk_outside_state(source: Path) -> Iterator[tuple[str, list[str]]]:
    """(folder, file names) of azure-ai-ml's walk of `source`, less the state folder, whose
    runs change with every job and would make each listing new (outside_state)."""
    state = os.path.realpath(state_dir())
    for parent, dirs, names in os.walk(source, followlinks=True):
        dirs[:] = [d for d in dirs if os.path.realpath(os.path.join(parent, d)) != state]
        yield parent, names


def not_utf8(path: Path, err: UnicodeDecodeError, what: str) -> str:
    """Why an ignore file stops the upload: azure-ai-ml reads it as UTF-8."""
    head = path.read_bytes()[:2] if path.is_file() else b""
    kind = ("UTF-16 text (as PowerShell's `>` and Out-File write it)"
            if head in (b"\xff\xfe", b"\xfe\xff") else f"not UTF-8 (byte {err.start})")
    return (f"{what}: {path} is {kind}; az ml reads it as UTF-8 to decide what to upload and "
            "stops on it the same way (UnicodeDecodeError). Save it as UTF-8")


def _refuse(entry: Path, source: Path, what: str) -> None:
    why = problem(entry)
    if why:
        raise LocalRunError(f"{what}: {entry} {why}. Fix: {KEEP_OUT} "
                            f"{source if source.is_dir() else source.parent}")


def copy_files(files: list[tuple[Path, str]], target: Path, *, read_only: bool = False) -> int:
    """Each (file, relative path) into `target` with its mode, less its write bits when
    `read_only`, else writable by its owner: a job writes anywhere in its snapshot, as in the
    copy Azure downloads from blob storage, even from a checkout whose files are read-only; the
    number copied."""
    target.mkdir(parents=True, exist_ok=True)
    for source, relative in files:
        copy = target / relative
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, copy)
        mode = stat.S_IMODE(os.stat(source).st_mode)
        os.chmod(copy, mode & ~0o222 if read_only else mode | stat.S_IWUSR)
    return len(files)


def copy_read_only(source: Path, target: Path, what: str, *, ignore: bool = True) -> None:
    """`source` (a file or a folder, as az ml uploads it) at `target`, its files read-only (a
    registered version is immutable)."""
    files = upload_files(source, what, ignore=ignore)
    if source.is_dir():
        copy_files(files, target, read_only=True)
        return
    shutil.copyfile(source, target)
    os.chmod(target, stat.S_IMODE(os.stat(source).st_mode) & ~0o222)


def tree_digest(path: Path, *, links: bool = True) -> str:
    """sha256 over a file, or over a folder's relative paths and bytes (links followed; with
    `links` False, a link anywhere is an OSError: registered content never holds one)."""
    digest = hashlib.sha256()
    entries = [path] if not path.is_dir() else sorted(path.rglob("*"))
    if not links and (path.is_symlink() or any(p.is_symlink() for p in entries)):
        link = next(p for p in [path, *entries] if p.is_symlink())
        raise OSError(errno.ELOOP, f"{link} is a link (to {os.readlink(link)})")
    for file in (p for p in entries if p.is_file()):
        digest.update(str(file.relative_to(path) if file != path else file.name).encode())
        digest.update(b"\0")
        with open(file, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()
