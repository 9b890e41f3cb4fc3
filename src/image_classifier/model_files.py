"""A model folder's files, without torch: their names, where the folder is, their digests.

The trainer writes model.pt and model.json (export adds model.onnx and model.int8.onnx);
model.json records the sha256 of each model file beside it, which every loader checks before
use. The ONNX scoring path reads a folder through this module alone, so a worker serving an ONNX
model never imports torch (checkpoint.py, which reads and writes model.pt, builds on it).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MODEL_FILE = "model.pt"
METADATA_FILE = "model.json"
ONNX_FILE = "model.onnx"
INT8_FILE = "model.int8.onnx"


class DamagedFile(ValueError):
    """A checkpoint or model file that does not hold what was written to it."""


def _find(root: Path, names: tuple[str, ...]) -> Path:
    """The first of `names` at ``root``, else below it (a registered model nests the folder one
    or more levels); ``root`` itself when it is a file."""
    if root.is_file():
        return root
    for name in names:
        if (root / name).is_file():
            return root / name
    for name in names:
        found = sorted(root.rglob(name))
        if found:
            return found[0]
    listed = " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
    raise FileNotFoundError(f"{root}: no {listed} found. Point at the model folder the trainer "
                            "wrote (<output_dir>/model or the job's model output).")


def find_model_file(root: str | os.PathLike) -> Path:
    """model.pt at ``root`` or below it (a registered model nests the folder one or more levels)."""
    return _find(Path(root), (MODEL_FILE,))


def find_model_folder(root: str | os.PathLike) -> Path:
    """The folder a scorer serves: where model.pt is, else where an exported graph is
    (model.onnx or model.int8.onnx, with model.json beside it: a model registered as its ONNX
    export alone), at ``root`` or below it."""
    return _find(Path(root), (MODEL_FILE, ONNX_FILE, INT8_FILE)).parent


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_metadata(folder: Path) -> dict[str, object]:
    """model.json, or DamagedFile naming it when it cannot be read."""
    try:
        metadata = json.loads((folder / METADATA_FILE).read_text())
    except (OSError, ValueError) as err:
        raise DamagedFile(f"{folder / METADATA_FILE} cannot be read ({err})") from None
    if not isinstance(metadata, dict):
        raise DamagedFile(f"{folder / METADATA_FILE} is not a JSON object")
    return metadata


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def os_error_under(err: BaseException) -> OSError | None:
    """The OSError a library's own error stands for (torch's writer reports a full disk as
    "unexpected pos", with the OSError its write raised as the context), or None."""
    seen: BaseException | None = err
    while seen is not None and not isinstance(seen, OSError):
        seen = seen.__cause__ or seen.__context__
    return seen


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary file beside `path` for its new contents: it becomes `path` (os.replace, whole
    or not at all, with the usual permissions, not mkstemp's 0600) when the block ends without
    an error, and is removed when it raises. A full disk or a read-only folder under a library's
    own error is raised as the OSError it is, naming `path`."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        under = os_error_under(err) if isinstance(err, Exception) else None
        if under is not None and under.errno is not None and under is not err:
            raise OSError(under.errno, under.strerror, str(path)) from err
        raise


def write_metadata(folder: Path, metadata: dict[str, object]) -> None:
    with replacing(folder / METADATA_FILE) as tmp:
        tmp.write_text(json.dumps(metadata, indent=2) + "\n")


def record_file(folder: Path, name: str) -> None:
    """model.json notes the sha256 of a model file written beside it (an ONNX export)."""
    if not (folder / METADATA_FILE).is_file():
        return  # a bare export of a model folder without metadata
    metadata = json.loads((folder / METADATA_FILE).read_text())
    metadata.setdefault("files", {})[name] = file_digest(folder / name)
    write_metadata(folder, metadata)


def check_file(folder: Path, name: str) -> None:
    """Refuse a model file whose bytes differ from what model.json recorded for it."""
    recorded = read_metadata(folder).get("files", {}).get(name)
    if recorded and recorded != file_digest(folder / name):
        raise DamagedFile(f"{folder / name} is damaged: its sha256 differs from the one "
                          f"{METADATA_FILE} recorded when it was written")


# An exported ONNX graph carries what model.json says of it (metadata_props["model.json"]), so
# a scorer checks model.json against the graph without reading model.pt (and so without torch).
GRAPH_METADATA = METADATA_FILE
GRAPH_KEYS = ("classes", "image_size", "mean", "std")


def graph_metadata(metadata: dict[str, object]) -> str:
    """The JSON an export writes into the graph: model.json's keys that the graph depends on."""
    return json.dumps({key: metadata[key] for key in GRAPH_KEYS})  # tuples as JSON lists
