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
import errno
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mlops.errors import LocalError, LocalRunError, MachineError
from mlops.workspace import names
from mlops.workspace.records import CONTENT, AssetKind, AssetVersion, DamagedRecord, held
from mlops.workspace.uploads import copy_read_only, tree_digest

LATEST = "latest"


class MissingVersion(LocalRunError):
    """An asset the workspace holds, asked for at a version (or @latest) it does not hold."""


@dataclass(kw_only=True)
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
    uploaded: bool = True  # a local folder az ml would upload (its .amlignore applies); not a
    # job's output or an MLflow registration, which Azure registers where they lie


class Workspace:
    """One folder, shared by every run of the checkout (workspace_root())."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def _name_folder(self, kind: AssetKind, name: str) -> Path:
        """Where `name`'s versions lie; InvalidName (with Azure's rule) before any disk is
        touched for a name Azure would refuse."""
        return self.root / kind.value / names.asset_name(kind.value, name, kind.noun)

    def holds(self, kind: AssetKind, name: str) -> bool:
        """Whether `name` could be held here at all: a reference to a name Azure refuses for
        registration (a curated environment's, with dots) is simply not in this workspace."""
        try:
            names.asset_name(kind.value, name, kind.noun)
        except names.InvalidName:
            return False
        return True

    @contextlib.contextmanager
    def locked(self, kind: AssetKind, name: str) -> Iterator[Path]:
        folder = self._name_folder(kind, name)
        folder.mkdir(parents=True, exist_ok=True)
        with held(folder / ".lock"):
            yield folder

    def versions(self, kind: AssetKind, name: str) -> list[AssetVersion]:
        """Every version of `name`, oldest first (damaged records are named, not skipped)."""
        folder = self._name_folder(kind, name)
        if folder.is_symlink():
            raise DamagedRecord(f"{folder} is a link to {os.readlink(folder)}: the workspace "
                                "writes none; remove it (its versions are then gone)")
        if not folder.is_dir():
            return []
        found = [AssetVersion.read(p, kind=kind, name=name) for p in folder.iterdir()
                 if not p.name.startswith(".")]
        return sorted(found, key=lambda v: v.sequence)

    def names(self, kind: AssetKind) -> list[str]:
        """The names held; a folder whose name Azure refuses was not made here, and is named
        on stderr and left out."""
        folder = self.root / kind.value
        found = sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
        for stray in [n for n in found if not self.holds(kind, n)]:
            print(f"warning: {folder / stray}: not a {kind.noun} name Azure takes, so not "
                  "one this workspace made; left out (remove it)", file=sys.stderr)
        return [n for n in found if self.holds(kind, n)]

    def find(self, kind: AssetKind, name: str, *, version: str | None = None,
             label: str | None = None) -> AssetVersion | None:
        """The version asked for (a version, or the label `latest`), None when the workspace
        has no version of that name at all; an error listing the versions it has otherwise."""
        held = self.versions(kind, name) if self.holds(kind, name) else []
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
            raise MissingVersion(f"{kind.noun} {name} has no {asked} in the local workspace "
                                 f"{self.root}; it holds versions {shown}")
        return chosen

    def create(self, draft: Draft) -> AssetVersion:
        """Register `draft`; the existing version when the same version holds the same
        content. Its name and version are checked before anything touches the disk; the
        content is copied as az ml uploads it (uploads.py) and its copy digested: what is
        compared and kept is what was copied."""
        self._name_folder(draft.kind, draft.name)
        if draft.version is not None:
            version_folder(draft.version)
        if draft.source is not None and not draft.source.exists():
            raise LocalRunError(f"{draft.kind.noun} {draft.name}: {draft.source} does not exist")
        try:
            with self.locked(draft.kind, draft.name) as folder:
                for stale in folder.glob(".new-*"):  # a create killed half-way (lock held)
                    shutil.rmtree(stale, ignore_errors=True)
                staging = Path(tempfile.mkdtemp(prefix=".new-", dir=folder))
                try:
                    return self._place(draft, staging, folder)
                finally:
                    shutil.rmtree(staging, ignore_errors=True)  # gone once renamed into place
        except OSError as err:
            raise self._failed(err, draft) from None

    def _failed(self, err: OSError, draft: Draft) -> LocalError:
        """An OSError while registering: the source's (cannot be read: the input) or the
        workspace's (read-only, full: the machine)."""
        where = Path(err.filename or "")
        full = err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS)  # the copy, not the read
        if err.filename and not where.is_relative_to(self.root) and not full:
            return LocalRunError(f"{draft.kind.noun} {draft.name}: cannot read {where} "
                                 f"({err.strerror}); nothing was registered")
        return self.unwritable(err)

    def unwritable(self, err: OSError) -> MachineError:
        full = " (the disk is full)" if err.errno in (errno.ENOSPC, errno.EDQUOT) else ""
        return MachineError(f"the local workspace {self.root} could not be written: "
                            f"{err.strerror or err}{full}; nothing was changed. Free space or "
                            "make it writable, or point MLOPS_WORKSPACE_DIR at another folder")

    def _place(self, draft: Draft, staging: Path, folder: Path) -> AssetVersion:
        (staging / CONTENT).mkdir()
        item = draft.source.name if draft.source is not None else ""
        if draft.source is not None:
            copy_read_only(draft.source, staging / CONTENT / item,
                           f"{draft.kind.noun} {draft.name}", ignore=draft.uploaded)
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
        record = AssetVersion(kind=draft.kind, name=draft.name, version=version, type=draft.type,
                              description=draft.description, tags=dict(draft.tags),
                              properties=dict(draft.properties), stage=draft.stage,
                              sequence=max((v.sequence for v in held), default=0) + 1,
                              created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), origin=draft.origin,
                              item=item, digest=digest, folder=staging)
        record.write()
        final = folder / version_folder(version)
        os.replace(staging, final)
        record.folder, record.new = final, True
        return record

    def set_archived(self, kind: AssetKind, name: str, version: str | None,
                     archived: bool) -> list[AssetVersion]:
        """Archive (or restore) one version, or every version of the name (the container)."""
        held = self.versions(kind, name)
        chosen = [v for v in held if version is None or v.version == version]
        if not chosen:
            raise LocalRunError(f"{kind.noun} {name}" + (f":{version}" if version else "")
                                + f" is not in the local workspace {self.root}")
        try:
            with self.locked(kind, name):
                for record in self.versions(kind, name):
                    if record.version in {v.version for v in chosen}:
                        record.archived = archived
                        record.write()
                        chosen = [v if v.version != record.version else record for v in chosen]
        except OSError as err:
            raise self.unwritable(err) from None
        return chosen

    def update_version(self, record: AssetVersion,
                       change: Callable[[AssetVersion], None]) -> AssetVersion:
        """`change` applied to the version's record as it is now, written under the name's
        lock (a second update at once applies over the first, nothing lost)."""
        try:
            with self.locked(record.kind, record.name):
                now = AssetVersion.read(record.folder, kind=record.kind, name=record.name)
                change(now)
                now.write()
        except OSError as err:
            raise self.unwritable(err) from None
        return now

    def checked(self, record: AssetVersion) -> Path:
        """The registered content, after its digest is checked: content holds no link (a
        registered copy never does), so nothing it names lies outside its own folder."""
        if not record.item:
            return record.path
        try:
            digest = tree_digest(record.path, links=False)
        except OSError as err:
            raise DamagedRecord(f"{record.kind.noun} {record.reference}: its files in "
                                f"{record.folder} are damaged ({err}); register it again "
                                "under a new version") from None
        if digest != record.digest:
            raise DamagedRecord(f"{record.kind.noun} {record.reference}: its files in "
                                f"{record.folder} are damaged (digest differs); register it "
                                "again under a new version")
        return record.path


def next_version(held: list[AssetVersion]) -> str:
    numbers = [int(v.version) for v in held if v.version.isdigit()]
    return str(max(numbers, default=0) + 1)


def version_folder(version: str) -> str:
    return names.version(version)


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
