"""Archives given as inputs (a batch run's INPUT=x.zip), extracted with bounded disk and memory.

A zip states each member's sizes in its directory; a bomb states them honestly (2.4 MB of zip
that inflates to 2.4 GB) or lies (a member that inflates past what it states). Before anything
is written the directory is checked against limits: members, total bytes, and the ratio of
inflated to stored bytes (photos and CSVs stay far below it; nested zeros do not). Extraction
then streams each member in blocks with a running count, so a member that inflates past what it
stated is stopped there. A member named like one already extracted (two entries of one name, or
names that differ only by `..` or a leading `/`) is kept under a new name, and a warning names
both. Each limit can be raised with its variable.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from mlops.errors import LocalRunError

BLOCK = 1 << 20
SMALL = 1 << 20  # members below this are not checked for their ratio alone


@dataclass(frozen=True)
class ArchiveLimits:
    max_bytes: int = 10 * 2**30  # ARCHIVE_MAX_BYTES: inflated bytes in all
    max_members: int = 200_000  # ARCHIVE_MAX_MEMBERS
    max_ratio: int = 200  # ARCHIVE_MAX_RATIO: inflated / stored, whole archive or one member

    @classmethod
    def from_env(cls, environ=os.environ) -> ArchiveLimits:
        base = cls()
        try:
            return cls(int(environ.get("ARCHIVE_MAX_BYTES") or base.max_bytes),
                       int(environ.get("ARCHIVE_MAX_MEMBERS") or base.max_members),
                       int(environ.get("ARCHIVE_MAX_RATIO") or base.max_ratio))
        except ValueError as err:
            raise LocalRunError(f"ARCHIVE_MAX_*: {err}; give a whole number") from None


@dataclass
class Extracted:
    folder: Path
    files: int = 0
    renamed: list[str] = field(default_factory=list)  # "a.jpg (twice): kept as a~2.jpg"

    def notice(self) -> str:
        if not self.renamed:
            return ""
        shown = "; ".join(self.renamed[:10]) + (" ..." if len(self.renamed) > 10 else "")
        return (f"warning: {len(self.renamed)} archive member(s) share a name with another; "
                f"each is kept under a new name: {shown}")


def _refuse(source: Path, what: str, variable: str, limit: int) -> LocalRunError:
    return LocalRunError(f"{source}: {what}; the limit is {limit:,} ({variable}=<n> raises it)")


def check(source: Path, members: list[zipfile.ZipInfo], limits: ArchiveLimits) -> None:
    """The archive's directory against the limits, before anything is written."""
    files = [m for m in members if not m.is_dir()]
    if len(files) > limits.max_members:
        raise _refuse(source, f"{len(files):,} members", "ARCHIVE_MAX_MEMBERS", limits.max_members)
    total = sum(m.file_size for m in files)
    if total > limits.max_bytes:
        raise _refuse(source, f"inflates to {total:,} bytes", "ARCHIVE_MAX_BYTES",
                      limits.max_bytes)
    stored = sum(m.compress_size for m in files)
    for member in files:
        if member.file_size > SMALL and \
                member.file_size > limits.max_ratio * max(1, member.compress_size):
            raise _refuse(source, f"member {member.filename!r} inflates {member.compress_size:,}"
                          f" stored bytes to {member.file_size:,}, a zip bomb's ratio",
                          "ARCHIVE_MAX_RATIO", limits.max_ratio)
    if total > SMALL and total > limits.max_ratio * max(1, stored):
        raise _refuse(source, f"inflates {stored:,} stored bytes to {total:,}, a zip bomb's "
                      "ratio", "ARCHIVE_MAX_RATIO", limits.max_ratio)


def safe_name(name: str) -> PurePosixPath | None:
    """The member's path inside the target, as zipfile sanitizes it (no root, no `..`)."""
    parts = [p for p in PurePosixPath(name.replace("\\", "/")).parts
             if p not in ("/", "", ".", "..")]
    return PurePosixPath(*parts) if parts else None


def _unique(path: PurePosixPath, taken: set[PurePosixPath]) -> PurePosixPath:
    n = 2
    candidate = path
    while candidate in taken:
        candidate = path.with_name(f"{path.stem}~{n}{path.suffix}")
        n += 1
    return candidate


def _copy(archive: zipfile.ZipFile, member: zipfile.ZipInfo, target: Path, budget: int) -> int:
    """Stream one member; stop once it passes its stated size or the archive's budget."""
    written = 0
    with archive.open(member) as stream, open(target, "wb") as out:
        while block := stream.read(BLOCK):
            written += len(block)
            if written > member.file_size or written > budget:
                raise LocalRunError(f"member {member.filename!r} inflates past the "
                                    f"{member.file_size:,} bytes its archive states")
            out.write(block)
    return written


def extract(source: Path, folder: Path, limits: ArchiveLimits | None = None) -> Extracted:
    """`source` into `folder` within the limits; a refused archive leaves nothing behind."""
    limits = limits or ArchiveLimits.from_env()
    result, taken = Extracted(folder), set()
    try:
        with zipfile.ZipFile(source) as archive:
            members = archive.infolist()
            check(source, members, limits)
            budget = limits.max_bytes
            for member in (m for m in members if not m.is_dir()):
                name = safe_name(member.filename)
                if name is None:
                    continue
                kept = _unique(name, taken)
                if kept != name:
                    result.renamed.append(f"{member.filename} (again): kept as {kept}")
                taken.add(kept)
                (folder / kept).parent.mkdir(parents=True, exist_ok=True)
                budget -= _copy(archive, member, folder / kept, budget)
                result.files += 1
    except BaseException as err:
        shutil.rmtree(folder, ignore_errors=True)  # a full disk or Ctrl-C too: nothing half
        if not isinstance(err, (LocalRunError, zipfile.BadZipFile, zipfile.LargeZipFile)):
            raise
        message = str(err) if isinstance(err, LocalRunError) else f"not a readable zip ({err})"
        raise LocalRunError(message if message.startswith(str(source))
                            else f"{source}: {message}") from None
    return result
