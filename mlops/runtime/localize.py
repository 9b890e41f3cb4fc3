"""What a Spark job's `files` and `archives` put in the working directory, as Azure's Spark does.

Azure's Spark job and component schemas: `files` are "copied to the working directory of each
executor", `archives` are "extracted into the working directory of each executor" (the CLI v2
Spark job and component YAML references). Azure's Spark localizes them as YARN does: a file under
its own name (or the `#alias` after it), an archive unpacked into a folder of that name
(`deps.tar.gz#deps` -> `deps/`, `deps.tar.gz` -> `deps.tar.gz/`). Here the executors run in
the driver's process, whose working directory is the run's `wd/` (the code's snapshot), while
`spark-submit --files/--archives` in local mode put them only in Spark's own scratch folder
(SparkFiles): so after the snapshot each one is placed in `wd/` by that name too.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from mlops.errors import LocalRunError


@dataclass(frozen=True)
class Localized:
    """One entry of `files` or `archives`: where it is under `code:`, the name it takes in the
    working directory, and whether it is unpacked there."""

    source: str  # as listed: a path relative to code:
    name: str  # its name in the working directory
    unpack: bool  # an archive: extracted into a folder of that name


def localized(files: list[str], archives: list[str]) -> tuple[Localized, ...]:
    """The entries a working directory gets; URIs (abfss://...) are Azure's to fetch, not ours."""
    placed = []
    for items, unpack in ((files, False), (archives, True)):
        for item in items:
            source, _, alias = str(item).partition("#")
            if "://" in source or not source:
                continue
            placed.append(Localized(source, alias or PurePosixPath(source).name, unpack))
    return tuple(placed)


def _format(path: Path) -> str | None:
    """shutil's name for the archive's format (Spark unpacks .jar, .zip, .tar, .tar.gz and
    .tgz; a .jar is a zip); None for what it copies as it is."""
    name = path.name.lower()
    if name.endswith((".zip", ".jar")):
        return "zip"
    for suffixes, kind in (((".tar.gz", ".tgz"), "gztar"), ((".tar",), "tar")):
        if name.endswith(suffixes):
            return kind
    return None


def place(entries: tuple[Localized, ...], wd: Path, where: str) -> list[str]:
    """Each entry into `wd` by its name; the warnings where it cannot be (one not there is left
    to spark-submit, which names it)."""
    warnings = []
    for entry in entries:
        source, target = wd / entry.source, wd / entry.name
        if not source.is_file():
            continue
        if target.exists():
            if target.resolve() != source.resolve():
                warnings.append(f"warning: {where}: {entry.source} is not placed as "
                                f"{entry.name} in the working directory: the code has one")
            elif entry.unpack:  # spark-submit reads the archive by that very name
                warnings.append(f"warning: {where}: archive {entry.source} is unpacked into "
                                f"{entry.name}/ on Azure; here it keeps the name (give it "
                                f"another after #: {entry.source}#name)")
            continue
        kind = _format(source) if entry.unpack else None
        if kind is None:  # a file, or an archive of a kind Spark copies as it is
            shutil.copy2(source, target)
        else:
            _unpack(source, target, kind)
    return warnings


def _unpack(source: Path, target: Path, kind: str) -> None:
    """A zip through the runtime's bounded extraction (archives.py: bombs, `..` and absolute
    names kept inside); a tar with tarfile's `data` filter (no member outside `target`, no
    links out of it, no devices)."""
    if kind == "zip":
        from mlops.runtime.archives import extract

        extract(source, target)
        return
    import tarfile

    target.mkdir(parents=True)
    try:
        with tarfile.open(source) as tar:
            tar.extractall(target, filter="data")
    except (tarfile.TarError, OSError) as err:
        raise LocalRunError(f"archives: {source.name} cannot be unpacked into {target.name}/ "
                            f"here ({err}); keep its members inside it, as plain files and "
                            "folders") from None
