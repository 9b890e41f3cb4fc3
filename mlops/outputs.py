"""Outputs that Azure fills from another job's: a sweep's are its best trial's.

Files are hard-linked where the filesystem allows (no copy, no extra space), else copied.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from .resolve import OutputSpec


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def link_tree(source: Path, target: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, target, copy_function=_link_or_copy, dirs_exist_ok=True)
    elif source.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        _link_or_copy(str(source), str(target))


def slot(name: str, spec: OutputSpec, folder: Path) -> Path:
    if spec.target is not None:
        return spec.target
    if spec.type == "uri_file":
        return folder / "outputs" / name / (spec.filename or name)
    return folder / "outputs" / name


def publish(task_folder: Path, outputs: dict[str, OutputSpec], folder: Path) -> dict[str, str]:
    """Fill `folder`'s outputs (or their bound targets) from a finished task's outputs."""
    written = json.loads((task_folder / "status.json").read_text())["outputs"]
    paths = {}
    for name, spec in outputs.items():
        target = slot(name, spec, folder)
        if name in written:
            link_tree(Path(written[name]), target)
        paths[name] = str(target)
    return paths
