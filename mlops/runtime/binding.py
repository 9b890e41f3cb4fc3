"""Where a task's inputs and outputs live, as Azure's data capability lays them out.

Azure mounts each data input under its own short path and hands the job that path (a file keeps
its name). Here an input folder becomes a real folder under `<task>/inputs/<name>` whose files are
hard links to the originals (symbolic links across filesystems): the job sees ordinary files
whose real path stays in the run folder, as on Azure (MLflow, for one, refuses model folders that
resolve elsewhere), and nothing is copied. `mode: download` gets a private copy, as Azure
downloads one. A folder of more than FARM_LIMIT files is linked as a whole instead.
Inputs Azure mounts read-only (`ro_mount`, the default) are listed in MLOPS_READONLY_INPUTS for
the job's Python (mlops/runtime/readonly_inputs.py), which refuses writes under them as the mount
does, so a job never changes the user's files through the links.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from mlops.errors import LocalRunError
from mlops.runtime.records import TaskRecord
from mlops.runtime.values import OutputSpec, Value

FARM_LIMIT = 50_000
ARTIFACTS = "artifacts"


def _link(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        target.symlink_to(source)


def mirror(source: Path, target: Path) -> None:
    """A real folder tree at `target` whose files link to `source`'s."""
    plan: list[tuple[Path, Path | None]] = []  # (relative path, source file or None for a dir)
    for root, dirs, files in os.walk(source):
        base = Path(root).relative_to(source)
        for name in list(dirs):
            if (Path(root) / name).is_symlink():  # kept as a link: never walk into a loop
                dirs.remove(name)
                plan.append((base / name, Path(root) / name))
            else:
                plan.append((base / name, None))
        plan += [(base / name, Path(root) / name) for name in files]
        if len(plan) > FARM_LIMIT:
            target.symlink_to(source, target_is_directory=True)
            return
    target.mkdir(parents=True)
    for relative, origin in plan:
        if origin is None:
            (target / relative).mkdir(exist_ok=True)
        elif origin.is_dir():
            (target / relative).symlink_to(origin.resolve(), target_is_directory=True)
        else:
            _link(origin, target / relative)


def _clear(slot_path: Path) -> None:
    if slot_path.is_symlink() or slot_path.is_file():
        slot_path.unlink()
    elif slot_path.is_dir():
        shutil.rmtree(slot_path)


# modes whose data Azure downloads to the node: the job's own copy, which it may write (a
# mirror of links would let its writes reach the user's files)
COPIED_MODES = {"download", "eval_download"}


def bind_inputs(inputs: dict[str, Value], folder: Path) -> dict[str, str | None]:
    """Data inputs are laid out under inputs/; literals pass through as their text."""
    values = {}
    for name, value in inputs.items():
        if not value.is_data:
            values[name] = value.text
            continue
        place = folder / "inputs" / name
        _clear(place)
        source = value.path
        if source.is_dir() and value.type != "uri_file":
            place.parent.mkdir(parents=True, exist_ok=True)
            if str(value.mode or "").lower() in COPIED_MODES:
                shutil.copytree(source, place, symlinks=True)
            else:
                mirror(source, place)
            values[name] = str(place)
        else:
            place.mkdir(parents=True)
            target = place / source.name
            if source.is_dir():
                target.symlink_to(source, target_is_directory=True)
            elif str(value.mode or "").lower() in COPIED_MODES and source.is_file():
                shutil.copy2(source, target)
            elif source.is_file():
                _link(source, target)
            else:
                target.symlink_to(source)  # missing (a step output never written): fails later
            values[name] = str(target)
    return values


WRITABLE_MODES = {"download", "eval_download", "rw_mount", "direct"}


def read_only(inputs: dict[str, Value], folder: Path) -> list[str]:
    """The places a job must not write: each data input mounted read-only (Azure's default
    mode), as the job sees it and where its files really are."""
    paths, own = [], os.path.realpath(folder)
    for name, value in inputs.items():
        if value.is_data and str(value.mode or "ro_mount").lower() not in WRITABLE_MODES:
            paths.append(str(folder / "inputs" / name))
            source = os.path.realpath(value.path)
            if not (own + os.sep).startswith(source.rstrip(os.sep) + os.sep):
                paths.append(source)  # unless the task's own folder lies inside it (`path: .`)
    return paths


def mounted_outputs(outputs: dict[str, OutputSpec], paths: dict[str, str]) -> list[str]:
    """The output folders Azure mounts read-write (`rw_mount`, the default mode of folder and
    model outputs): each a mount point, which the job can empty but never remove. `upload`
    outputs are plain folders uploaded at the end; `direct` ones a URI; a uri_file a file."""
    return [paths[name] for name, spec in outputs.items() if name in paths
            and spec.type != "uri_file" and str(spec.mode or "rw_mount").lower() == "rw_mount"]


def bind_outputs(outputs: dict[str, OutputSpec], folder: Path) -> dict[str, str]:
    """uri_folder (and model) outputs are folders; a uri_file output is a file path to write. A
    `direct` output is a path only, as Azure's URI is: nothing is created there (Spark's
    writers refuse a folder that exists)."""
    paths = {}
    for name, spec in outputs.items():
        path = slot(name, spec, folder)
        if spec.type == "uri_file" and path.is_dir():
            raise LocalRunError(f"output {name} is a uri_file, and the path it is bound to is "
                                f"a folder: {path}; map its URI to a file path")
        empty = spec.type == "uri_file" or spec.mode == "direct"
        (path.parent if empty else path).mkdir(parents=True, exist_ok=True)
        paths[name] = str(path)
    return paths


def fill_artifacts(command: str, wd: Path, outputs: dict[str, str]) -> None:
    """A pipeline node output named `artifacts` that the command never writes is the job's
    artifact store on Azure (outputs/, logs/): give it those folders."""
    if ARTIFACTS in outputs and f"outputs.{ARTIFACTS}" not in "".join(command.split()):
        for name in ("outputs", "logs"):
            if (wd / name).is_dir():
                link_tree(wd / name, Path(outputs[ARTIFACTS]) / name)


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
    record = TaskRecord.read(task_folder)
    written = record.outputs if record is not None else {}
    paths = {}
    for name, spec in outputs.items():
        target = slot(name, spec, folder)
        if name in written:
            link_tree(Path(written[name]), target)
        paths[name] = str(target)
    return paths
