"""The job's working directory: a private copy of `code:`, as Azure ML snapshots it.

Azure uploads the code folder (minus what its `.amlignore`, or else `.gitignore`, excludes) and
runs every job, trial and step in its own copy, with `outputs/` and `logs/` created beside the
code and uploaded as the run's artifacts. The file list comes from azure-ai-ml's own upload
helpers, so the copy holds exactly what `az ml job create` would upload. A job may write anywhere
in its copy; the source folder is never touched.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from mlops.errors import LocalRunError

ARTIFACT_DIRS = ("outputs", "logs")


def code_files(code: Path) -> list[tuple[Path, str]]:
    """(source file, relative path) pairs that Azure would upload for `code`."""
    from azure.ai.ml._utils._asset_utils import get_ignore_file, get_upload_files_from_folder

    if code.is_file():
        return [(code, code.name)]
    files = get_upload_files_from_folder(code, ignore_file=get_ignore_file(code))
    return [(Path(source), relative) for source, relative in files]


def take(code: Path | None, wd: Path) -> int:
    """Fill `wd` (recreated empty) with a copy of `code`; return the number of files copied."""
    if wd.exists():
        shutil.rmtree(wd)
    wd.mkdir(parents=True)
    count = 0
    if code is not None:
        if not code.exists():
            raise LocalRunError(f"code: {code} does not exist (az ml job create would fail to "
                                "upload it). Point code: at the folder with the entry point")
        for source, relative in code_files(code):
            target = wd / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            shutil.copymode(source, target)
            count += 1
    for name in ARTIFACT_DIRS:
        (wd / name).mkdir(exist_ok=True)
    return count

