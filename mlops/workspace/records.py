"""One registered asset version, as `asset.json` beside its content.

Standard library only (and the tooling's error). A record is written once, whole, by rename;
archiving rewrites it the same way. The content digest (sha256 over every file's relative path
and bytes) is taken when the version is created and checked before the content is used.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path

from mlops.errors import LocalRunError

MODEL_TYPES = {"custom_model", "mlflow_model", "triton_model"}
RECORD = "asset.json"
CONTENT = "content"
TRANSIENT = {"folder", "new"}


class AssetKind(StrEnum):
    """What `az ml <kind> create` registers; the values are the URI segments Azure uses."""

    MODEL = "models"
    DATA = "data"
    ENVIRONMENT = "environments"
    COMPONENT = "components"

    @property
    def noun(self) -> str:
        return {AssetKind.MODEL: "model", AssetKind.DATA: "data asset",
                AssetKind.ENVIRONMENT: "environment", AssetKind.COMPONENT: "component"}[self]

    @classmethod
    def parse(cls, text: str) -> AssetKind:
        text = text.strip().lower()
        for kind in cls:
            if text in (kind.value, kind.value.rstrip("s"), kind.noun):
                return kind
        raise ValueError(f"{text!r} is not an asset kind: model, data, environment, component")


def asset_kind(data_type: str) -> str:
    """The workspace asset kind an input or output of `data_type` names by `azureml:<name>`."""
    return "model" if data_type in MODEL_TYPES else "data"


@dataclass
class AssetVersion:
    """What the workspace holds for one version: Azure's fields, and where its files are."""

    kind: AssetKind
    name: str
    version: str
    type: str = ""  # custom_model, mlflow_model, uri_folder, uri_file, mltable, ...
    description: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    properties: dict[str, str] = field(default_factory=dict)
    stage: str = ""  # models only
    archived: bool = False
    sequence: int = 0  # creation order within the name: `latest` is the highest not archived
    created: str = ""
    origin: str = ""  # where it came from: a spec file, an MLflow registration, a job output
    item: str = ""  # the file or folder name under content/ ("" for a spec-only asset)
    digest: str = ""
    folder: Path = field(default=Path(), compare=False)  # where the record lies (not stored)
    new: bool = field(default=False, compare=False)  # created by this call (not stored)

    @property
    def reference(self) -> str:
        return f"azureml:{self.name}:{self.version}"

    @property
    def path(self) -> Path:
        """The registered file or folder."""
        return self.folder / CONTENT / self.item if self.item else self.folder / CONTENT

    def write(self) -> None:
        record = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in TRANSIENT}
        write_atomic(self.folder / RECORD, json.dumps(record, indent=2, default=str) + "\n")

    @classmethod
    def read(cls, folder: Path) -> AssetVersion:
        """The record in `folder`; a LocalRunError naming the file when it is damaged."""
        path = folder / RECORD
        try:
            data = json.loads(path.read_text())
            data["kind"] = AssetKind(data["kind"])
            known = {f.name for f in fields(cls)} - TRANSIENT
            return cls(**{k: v for k, v in data.items() if k in known}, folder=folder)
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise LocalRunError(f"{path}: damaged asset record ({err}); restore it, or remove "
                                f"{folder} (that version is then gone)") from None

    def summary(self) -> dict[str, object]:
        shown = asdict(self)
        for name in TRANSIENT:
            shown.pop(name)
        shown["kind"] = self.kind.noun
        shown["path"] = str(self.path)
        return shown


def write_atomic(path: Path, text: str) -> None:
    """`text` into `path` whole: a reader sees the old file or the new one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@contextlib.contextmanager
def held(lock: Path) -> Iterator[None]:
    """An exclusive lock on the file `lock`, waited for; let go on exit (or when the process
    dies)."""
    with open(lock, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def tree_digest(path: Path) -> str:
    """sha256 over a file, or over a folder's relative paths and bytes (links followed)."""
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        digest.update(str(file.relative_to(path) if file != path else file.name).encode())
        digest.update(b"\0")
        with open(file, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()
