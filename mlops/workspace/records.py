"""One registered asset version, as `asset.json` beside its content.

Standard library only (and the tooling's error). A record is written once, whole, by rename;
archiving rewrites it the same way. The content digest (sha256 over every file's relative path
and bytes) is taken when the version is created and checked before the content is used.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path

from mlops.errors import MachineError

RecordData = dict[str, object]  # a record's JSON object, as read

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


@dataclass(kw_only=True)
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
    def read(cls, folder: Path, *, kind: AssetKind | None = None,
             name: str | None = None) -> AssetVersion:
        """The record in `folder` (the version folder of `kind` and `name`), every field
        type-checked; DamagedRecord naming the file, what is wrong and what to do."""
        path = folder / RECORD
        linked = next((p for p in (folder, path, folder / CONTENT) if p.is_symlink()), None)
        if linked is not None:
            raise DamagedRecord(f"{path}: damaged asset record ({linked} is a link to "
                                f"{os.readlink(linked)}: the workspace writes none); remove "
                                f"{folder} (that version is then gone)")
        try:
            with open(path, "rb") as handle:
                text = handle.read(MAX_RECORD + 1)
            data = json.loads(text) if len(text) <= MAX_RECORD else None
            wrong = _wrong_fields(data, folder, kind, name) if data is not None else \
                f"over {MAX_RECORD // 1024} KiB, far more than a record holds"
        except (OSError, ValueError, RecursionError) as err:
            wrong = f"it cannot be read: {err}"
        if wrong:
            raise DamagedRecord(f"{path}: damaged asset record ({wrong}); restore it, or "
                                f"remove {folder} (that version is then gone)")
        known = {f.name for f in fields(cls)} - TRANSIENT
        values = {k: v for k, v in data.items() if k in known}
        return cls(**{**values, "kind": AssetKind(data["kind"])}, folder=folder)

    def summary(self) -> dict[str, object]:
        shown = asdict(self)
        for name in TRANSIENT:
            shown.pop(name)
        shown["kind"] = self.kind.noun
        shown["path"] = str(self.path)
        return shown


class DamagedRecord(MachineError):
    """A record or registered content on this machine was changed or cut short since it was
    written; the message names the file and what to do."""


FIELD_TYPES = {"kind": str, "name": str, "version": str, "type": str, "description": str,
               "stage": str, "archived": bool, "sequence": int, "created": str, "origin": str,
               "item": str, "digest": str, "tags": dict, "properties": dict}
DIGEST = re.compile(r"[0-9a-f]{64}")
MAX_RECORD = 1 << 20  # bytes: a record is a few hundred


def _wrong_fields(data: object, folder: Path, kind: AssetKind | None,
                  name: str | None) -> str:
    """What is wrong with a record's data ("" when nothing is)."""
    if not isinstance(data, dict):
        return "not a JSON object"
    for key in ("kind", "name", "version"):
        if key not in data:
            return f"no {key!r}"
    for key, wanted in FIELD_TYPES.items():
        value = data.get(key, wanted())
        if type(value) is not wanted:  # noqa: E721 - True is not a sequence number
            return f"{key!r} is {type(value).__name__} {str(value)[:40]!r}, not {wanted.__name__}"
        if wanted is dict and not all(isinstance(k, str) and isinstance(v, str)
                                      for k, v in value.items()):
            return f"{key!r} holds a value that is not text"
    return _wrong_place(data, folder, kind, name)


def _wrong_place(data: RecordData, folder: Path, kind: AssetKind | None,
                 name: str | None) -> str:
    """A record that names another version than the folder it lies in, or content outside
    its own `content/` folder."""
    if data["kind"] not in {k.value for k in AssetKind}:
        return f"kind {data['kind']!r} is not an asset kind"
    here = (kind.value if kind else data["kind"], name or data["name"], folder.name)
    if (data["kind"], data["name"], data["version"]) != here:
        return (f"it names {data['kind']}/{data['name']}/{data['version']} but lies in "
                f"{'/'.join(here)}")
    item = data.get("item", "")
    if item and (item in (".", "..") or "/" in item or "\\" in item or "\0" in item):
        return f"its item {item[:60]!r} is not a name inside {folder / CONTENT}"
    if item and not DIGEST.fullmatch(data.get("digest", "")):
        return "its digest is not a sha256"
    return ""


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
