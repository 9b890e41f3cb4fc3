"""The workspace's folder: `<root>/<kind>/<name>/<version>/{asset.json,content/}`.

Azure's rules, as its asset registry applies them:
- a version, once created, is immutable: creating it again with the same content is a no-op,
  with other content an error;
- no version given: the next integer after the largest integer version of that name (1 first);
- `latest` is the most recently created version that is not archived;
- an archived version still resolves by its number, never as `latest`.
Content is copied in (a registered version never changes when its source does), made
read-only, and renamed into place whole, under a lock per name: two creates at once get two
versions, a killed create leaves no version behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mlops.errors import LocalRunError
from mlops.workspace.records import CONTENT, AssetKind, AssetVersion, held, tree_digest

LATEST = "latest"


@dataclass
class Draft:
    """An asset version to create: Azure's fields, and the local file or folder it registers."""

    kind: AssetKind
    name: str
    source: Path | None  # None: the record alone (an environment given by image)
    version: str | None = None
    type: str = ""
    description: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    properties: dict[str, str] = field(default_factory=dict)
    stage: str = ""
    origin: str = ""


class Workspace:
    """One folder, shared by every run of the checkout (workspace_root())."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def _name_folder(self, kind: AssetKind, name: str) -> Path:
        if not name or name in (".", "..") or "/" in name or "\0" in name:
            raise LocalRunError(f"{name!r} is not a valid {kind.noun} name")
        return self.root / kind.value / name

    @contextlib.contextmanager
    def locked(self, kind: AssetKind, name: str) -> Iterator[Path]:
        folder = self._name_folder(kind, name)
        folder.mkdir(parents=True, exist_ok=True)
        with held(folder / ".lock"):
            yield folder

    def versions(self, kind: AssetKind, name: str) -> list[AssetVersion]:
        """Every version of `name`, oldest first (damaged records are named, not skipped)."""
        folder = self._name_folder(kind, name)
        if not folder.is_dir():
            return []
        found = [AssetVersion.read(p) for p in folder.iterdir()
                 if p.is_dir() and not p.name.startswith(".")]
        return sorted(found, key=lambda v: v.sequence)

    def names(self, kind: AssetKind) -> list[str]:
        folder = self.root / kind.value
        return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []

    def find(self, kind: AssetKind, name: str, *, version: str | None = None,
             label: str | None = None) -> AssetVersion | None:
        """The version asked for (a version, or the label `latest`), None when the workspace
        has no version of that name at all; an error listing the versions it has otherwise."""
        held = self.versions(kind, name)
        if not held:
            return None
        if version is not None:
            chosen = next((v for v in held if v.version == version), None)
        elif (label or LATEST) == LATEST:
            live = [v for v in held if not v.archived]
            chosen = live[-1] if live else None
        else:
            raise LocalRunError(f"{kind.noun} {name}: label {label!r} is not one Azure knows "
                                f"(only @{LATEST})")
        if chosen is None:
            shown = ", ".join(v.version + (" (archived)" if v.archived else "") for v in held)
            asked = f"version {version}" if version is not None else f"@{LATEST}"
            raise LocalRunError(f"{kind.noun} {name} has no {asked} in the local workspace "
                                f"{self.root}; it holds versions {shown}")
        return chosen

    def create(self, draft: Draft) -> AssetVersion:
        """Register `draft`; the existing version when the same version holds the same
        content. The content is copied first and its copy digested: what is compared and kept
        is what was copied (links followed)."""
        if draft.source is not None and not draft.source.exists():
            raise LocalRunError(f"{draft.kind.noun} {draft.name}: {draft.source} does not exist")
        with self.locked(draft.kind, draft.name) as folder:
            for stale in folder.glob(".new-*"):  # a create killed half-way (we hold the lock)
                shutil.rmtree(stale, ignore_errors=True)
            staging = Path(tempfile.mkdtemp(prefix=".new-", dir=folder))
            try:
                return self._place(draft, staging, folder)
            finally:
                shutil.rmtree(staging, ignore_errors=True)  # gone once renamed into place

    def _place(self, draft: Draft, staging: Path, folder: Path) -> AssetVersion:
        (staging / CONTENT).mkdir()
        item = draft.source.name if draft.source is not None else ""
        if draft.source is not None:
            copy_read_only(draft.source, staging / CONTENT / item)
        digest = tree_digest(staging / CONTENT / item) if item else ""
        held = self.versions(draft.kind, draft.name)
        version = draft.version or next_version(held)
        same = next((v for v in held if v.version == version), None)
        if same is not None:
            if same.digest == digest:
                return same
            raise LocalRunError(
                f"{draft.kind.noun} {draft.name}:{version} exists with other content; a "
                "version is immutable, as on Azure: give a new version, or none for "
                f"{next_version(held)}")
        record = AssetVersion(
            draft.kind, draft.name, version, type=draft.type, description=draft.description,
            tags=dict(draft.tags), properties=dict(draft.properties), stage=draft.stage,
            sequence=max((v.sequence for v in held), default=0) + 1,
            created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), origin=draft.origin, item=item,
            digest=digest, folder=staging)
        record.write()
        final = folder / version_folder(version)
        os.replace(staging, final)
        record.folder, record.new = final, True
        return record

    def set_archived(self, kind: AssetKind, name: str, version: str | None,
                     archived: bool) -> list[AssetVersion]:
        """Archive (or restore) one version, or every version of the name (the container)."""
        with self.locked(kind, name):
            held = self.versions(kind, name)
            chosen = [v for v in held if version is None or v.version == version]
            if not chosen:
                raise LocalRunError(f"{kind.noun} {name}" + (f":{version}" if version else "")
                                    + f" is not in the local workspace {self.root}")
            for record in chosen:
                record.archived = archived
                record.write()
            return chosen

    def checked(self, record: AssetVersion) -> Path:
        """The registered content, after its digest is checked."""
        if record.item and tree_digest(record.path) != record.digest:
            raise LocalRunError(f"{record.kind.noun} {record.reference}: its files in "
                                f"{record.folder} are damaged (digest differs); register it "
                                "again under a new version")
        return record.path


def next_version(held: list[AssetVersion]) -> str:
    numbers = [int(v.version) for v in held if v.version.isdigit()]
    return str(max(numbers, default=0) + 1)


def version_folder(version: str) -> str:
    if not version or version.startswith(".") or "/" in version or "\0" in version:
        raise LocalRunError(f"{version!r} is not a valid version")
    return version


def copy_read_only(source: Path, target: Path) -> None:
    """A copy whose files cannot be written (a registered version is immutable)."""
    if source.is_dir():
        shutil.copytree(source, target, symlinks=False)
        files = [p for p in target.rglob("*") if p.is_file()]
    else:
        shutil.copyfile(source, target)
        files = [target]
    for file in files:
        file.chmod(stat.S_IMODE(file.stat().st_mode) & ~0o222)


def workspace_root() -> Path:
    """MLOPS_WORKSPACE_DIR, else `workspace/` beside the local MLflow store (a sqlite or file
    store named by MLFLOW_TRACKING_URI), else under the state folder (project.state_dir())."""
    from mlops.project import state_dir

    if os.environ.get("MLOPS_WORKSPACE_DIR"):
        return Path(os.environ["MLOPS_WORKSPACE_DIR"]).expanduser()
    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    if uri.startswith("sqlite:///"):
        return Path(uri.removeprefix("sqlite:///")).expanduser().parent / "workspace"
    if uri.startswith("file://") or (uri and "://" not in uri):
        return Path(uri.removeprefix("file://")).expanduser().parent / "workspace"
    return state_dir() / "workspace"
