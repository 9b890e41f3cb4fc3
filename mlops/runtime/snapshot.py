"""The job's working directory: a private copy of `code:`, as Azure ML snapshots it.

Azure uploads the code folder (minus what its `.amlignore`, or else `.gitignore`, excludes) and
runs every job, trial and step in its own copy, with `outputs/` and `logs/` created beside the
code and uploaded as the run's artifacts. The file list comes from azure-ai-ml's own upload
helpers, so the copy holds exactly what `az ml job create` would upload. A job may write anywhere
in its copy; the source folder is never touched.

Before anything is copied, `code:` that is the filesystem's root or the home folder is
refused (it would copy the machine), and so is, by name, what az ml's upload could not take: a
link to a folder that contains it (a loop), a named pipe, a socket, a device, a link to nothing
(mlops/workspace/uploads.py); the files Azure would upload are bounded (MAX_FILES, MAX_BYTES: an
.amlignore keeps data and environments out of the code).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from mlops.errors import LocalRunError
from mlops.runtime import launch
from mlops.workspace.uploads import copy_files, upload_files

ARTIFACT_DIRS = ("outputs", "logs")
MAX_FILES = 50_000
MAX_BYTES = 4 * 2**30


def code_files(code: Path) -> list[tuple[Path, str]]:
    """(source file, relative path) pairs that Azure would upload for `code`; what its upload
    could not take (a pipe, a socket, a device, a link to nothing or a loop) is refused by name
    (mlops/workspace/uploads.py)."""
    return upload_files(code, "code", nonempty=True)


def check_folder(code: Path) -> None:
    """Refuse what would copy the machine, before anything is walked or copied."""
    if code.is_file():
        return
    real = Path(os.path.realpath(code))
    home = real == Path.home().resolve()
    if home or real == Path(real.anchor):
        raise LocalRunError(f"code: {code} is {'the home folder' if home else 'a filesystem root'}"
                            "; Azure would upload all of it. Point code: at the folder that holds "
                            "the entry script")


def checked_code(code: Path) -> list[tuple[Path, str]]:
    """What az ml job create uploads of `code` before the job exists, or the LocalRunError that
    its upload meets (a missing folder, the machine, a loop, a pipe, a link to nothing, past
    the bounds): checked at create, as Azure refuses it then, and again at the snapshot (the
    listing is kept between the two: uploads.upload_files)."""
    if not code.exists():
        raise LocalRunError(f"code: {code} does not exist (az ml job create would fail to "
                            "upload it). Point code: at the folder with the entry point")
    check_folder(code)
    files = code_files(code)
    check_size(files, code)
    return files


def check_size(files: list[tuple[Path, str]], code: Path) -> None:
    """What Azure would upload, bounded: data and environments belong elsewhere."""
    size = sum(_size(source) for source, _ in files[:MAX_FILES + 1])
    if len(files) > MAX_FILES or size > MAX_BYTES:
        raise LocalRunError(f"code: {code} holds {len(files)} files, {size / 2**20:.0f} MiB "
                            f"(at most {MAX_FILES} files and {MAX_BYTES // 2**30} GiB here); keep "
                            "data, environments and runs out of it with an .amlignore: Azure "
                            "uploads all of it with every job")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


CHUNK = 500  # files copied between two looks at a pending signal (launch.check_interrupt)


def take(code: Path | None, wd: Path, *, includes: list[Path] | None = None) -> int:
    """Fill `wd` (recreated empty) with a copy of `code` (merged with its additional_includes);
    return the number of files copied."""
    if includes:
        with merged(code, includes) as folder:
            return take(folder, wd)
    if wd.exists():
        shutil.rmtree(wd)
    wd.mkdir(parents=True)
    count = 0
    if code is not None:
        files = checked_code(code)
        for start in range(0, len(files), CHUNK):  # a signal stops a long copy between chunks
            launch.check_interrupt()
            count += copy_files(files[start:start + CHUNK], wd)
    for name in ARTIFACT_DIRS:
        (wd / name).mkdir(exist_ok=True)
    return count



@contextlib.contextmanager
def merged(code: Path | None, includes: list[Path]) -> Iterator[Path]:
    """`code` with `includes` merged in, by azure-ai-ml's own AdditionalIncludes (what `az ml`
    uploads: each include under its own name at the code's root, a `<folder>.zip` that does not
    exist zipped from `<folder>`), in a temporary folder removed afterwards."""
    from azure.ai.ml.entities._component._additional_includes import AdditionalIncludes

    for path in includes:
        if not path.exists() and not (path.suffix == ".zip" and path.with_suffix("").is_dir()):
            raise LocalRunError(f"additional_includes: {path} does not exist (az ml would "
                                "refuse it)")
    merger = AdditionalIncludes(origin_code_value=None if code is None else str(code),
                                base_path=Path("/"), configs=[str(p) for p in includes])
    with merger.merge_local_code_and_additional_includes() as folder:
        try:
            yield Path(folder)
        finally:
            shutil.rmtree(Path(folder).parent, ignore_errors=True)  # azure-ai-ml's mkdtemp
