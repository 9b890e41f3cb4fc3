"""A registry, offline: `azureml://registries/<registry>/<kind>/<name>` (`/versions/<v>`,
`/labels/latest` or `@latest`) resolved from a folder the asset map names for the registry
(`azureml://registries/azureml: <a checkout of Azure/azureml-assets>`).

The folder is read as Azure's publishing reads azureml-assets (its scripts' AssetConfig): each
`asset.yaml` names a spec (`spec.yaml`), its type, and optionally a name and a version; a name
or version the asset file does not give is the spec's, and `version: auto` is the version the
release assigns (none here: such an asset answers `latest` only). A user's own export in the same
layout works the same way. The folder is walked once per run and the index kept on disk by each
asset file's size and time, so a later run reads only what changed; nothing is parsed per lookup.
A folder in the local workspace's own layout (`<kind>/<name>/<version>/asset.json`, what `azml
<kind> create --registry-name` writes) is read through the workspace store instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from mlops.errors import LocalRunError
from mlops.project import cache_root
from mlops.specs import read_yaml
from mlops.workspace.records import AssetKind
from mlops.workspace.store import Workspace, workspace_root

# a registry's name as Azure takes one (3 to 33 letters, digits, `-`, `_`; a letter or digit first)
REGISTRY_NAME = r"[A-Za-z0-9][A-Za-z0-9_-]{2,32}"
REF = re.compile(rf"^azureml://registries/({REGISTRY_NAME})/(components|models|environments|data)/"
                 r"([^/@]+)(?:@([^/]+)|/versions/([^/]+)|/labels/([^/]+))?/?$")
ROOT_KEY = re.compile(rf"^azureml://registries/({REGISTRY_NAME})/?$")
ASSET_FILES = {"asset.yaml", "asset.yml"}
KINDS = {"component": AssetKind.COMPONENT, "model": AssetKind.MODEL,
         "environment": AssetKind.ENVIRONMENT, "data": AssetKind.DATA}
SKIPPED = {".git", "node_modules", "__pycache__", ".venv", "venv", "mlruns"}
MAX_FILES = 300_000  # files walked in one registry folder (azureml-assets: about 5,300)
MAX_ASSET_BYTES = 1 << 20  # an asset or spec file larger than this is not an asset file
LATEST = "latest"


@dataclass(frozen=True, kw_only=True)
class RegistryRef:
    """One asset of a registry as a URI names it: a version, or a label (latest)."""

    registry: str
    kind: AssetKind
    name: str
    version: str | None = None
    label: str | None = None


def parse_ref(reference: object) -> RegistryRef | None:
    """The registry asset `reference` names; None for anything else."""
    match = REF.match(str(reference)) if isinstance(reference, str) else None
    if match is None:
        return None
    registry, kind, name, at, version, label = match.groups()
    if version is None and label is None:
        label = at or LATEST
    return RegistryRef(registry=registry, kind=AssetKind(kind), name=name, version=version,
                       label=label)


@dataclass(frozen=True, kw_only=True)
class RegistryAsset:
    """One asset version a registry folder holds: where its spec is, and its extra config
    (azureml-assets' model.yaml, environment.yaml)."""

    kind: AssetKind
    name: str
    version: str | None  # None: `version: auto`, numbered by the registry's release
    spec: Path
    extra: Path | None = None
    files: Path | None = None  # registered here (`--registry-name`): its checked content

    @property
    def shown(self) -> str:
        return self.version or "auto"


def version_order(version: str | None) -> tuple:
    """Azure's publishing compares versions as packaging does; what it cannot parse sorts
    before, by text; `auto` (unnumbered) sorts last, as the newest."""
    from packaging.version import InvalidVersion, Version

    if version is None:
        return (2,)
    try:
        return (1, Version(version))
    except InvalidVersion:
        return (0, version)


def registry_folders(data: dict[str, object], base: Path) -> dict[str, list[Path]]:
    """The registries an asset map names folders for (`azureml://registries/<r>`, with or
    without a final `/`: one folder, or a list of them, earlier ones first), relative paths
    from the repository's root."""
    found = {}
    for key, value in data.items():
        match = ROOT_KEY.match(str(key))
        if match and value is not None:
            values = value if isinstance(value, list) else [value]
            found[match.group(1)] = [(base / str(v)).expanduser().resolve() for v in values]
    return found


def _template(value: object) -> bool:
    return isinstance(value, str) and "{{" in value


def _yaml_file(path: Path) -> dict[str, object]:
    if path.stat().st_size > MAX_ASSET_BYTES:
        raise ValueError(f"larger than {MAX_ASSET_BYTES} bytes")
    data = read_yaml(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError("not a mapping")
    return data


def read_asset(asset_file: Path) -> RegistryAsset | None:
    """One asset.yaml as azureml-assets' AssetConfig reads it; None for a type that is not an
    asset kind a URI can name (prompts, evaluators, benchmark specs)."""
    asset = _yaml_file(asset_file)
    kind = KINDS.get(str(asset.get("type") or "").lower())
    if kind is None:
        return None
    spec = (asset_file.parent / str(asset.get("spec") or "spec.yaml")).resolve()
    name, version = asset.get("name"), asset.get("version")
    auto = str(version) == "auto"
    if not name or _template(name) or auto or version in (None, ""):
        data = _yaml_file(spec)
        name = name if name and not _template(name) else data.get("name")
        version = data.get("version") if auto or version in (None, "") else version
    if not name or _template(name):
        raise ValueError(f"no name in it or in its spec {spec.name}")
    version = None if version in (None, "") or _template(version) else str(version)
    extra = asset.get("extra_config")
    return RegistryAsset(kind=kind, name=str(name), version=version, spec=spec,
                         extra=(asset_file.parent / str(extra)).resolve() if extra else None)


@dataclass(frozen=True)
class Problem:
    """An asset file the index could not read, and why."""

    file: Path
    reason: str


class RegistryIndex:
    """Every asset a registry folder holds, by kind and name."""

    def __init__(self, folder: Path, assets: list[RegistryAsset],
                 problems: list[Problem] | None = None):
        self.folder = folder
        self.problems = problems or []
        self._by_name: dict[tuple[AssetKind, str], list[RegistryAsset]] = {}
        for asset in assets:
            self._by_name.setdefault((asset.kind, asset.name), []).append(asset)
        for versions in self._by_name.values():
            versions.sort(key=lambda a: version_order(a.version))

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_name.values())

    def versions(self, kind: AssetKind, name: str) -> list[RegistryAsset]:
        return list(self._by_name.get((kind, name), []))

    def get(self, ref: RegistryRef) -> RegistryAsset | None:
        """The version `ref` names; None when the folder holds no asset of that name."""
        return Registry([self]).get(ref)


class Registry:
    """A registry's folders, earlier ones first: a version is the first folder's that holds it,
    latest the highest version any holds."""

    def __init__(self, indexes: list[RegistryIndex]):
        self.indexes = indexes

    @property
    def problems(self) -> list[Problem]:
        return [p for i in self.indexes for p in i.problems]

    @property
    def folders(self) -> str:
        return ", ".join(str(i.folder) for i in self.indexes)

    def versions(self, kind: AssetKind, name: str) -> list[RegistryAsset]:
        held: dict[str | None, RegistryAsset] = {}
        for each in self.indexes:
            for asset in each.versions(kind, name):
                held.setdefault(asset.version, asset)
        return sorted(held.values(), key=lambda a: version_order(a.version))

    def get(self, ref: RegistryRef) -> RegistryAsset | None:
        """The version `ref` names; None when no folder holds an asset of that name."""
        held = self.versions(ref.kind, ref.name)
        if not held:
            return None
        if ref.version is not None:
            chosen = [a for a in held if a.version == ref.version]
        elif (ref.label or LATEST) == LATEST:
            chosen = held[-1:]
        else:
            raise LocalRunError(f"{ref.kind.noun} {ref.name} in registry {ref.registry}: label "
                                f"{ref.label!r}; a registry's assets have one label, latest")
        if not chosen:
            raise LocalRunError(self._missing(ref, held))
        return chosen[0]

    def _missing(self, ref: RegistryRef, held: list[RegistryAsset]) -> str:
        have = ", ".join(a.shown for a in held)
        spec = held[-1].spec
        repo = next((f for f in (spec, *spec.parents) if (f / ".git").exists()), None)
        where = (f"; in a git checkout, `git -C {repo} log --reverse --format='%h %cs %s' -S "
                 f"'version: {ref.version}' -- {spec.relative_to(repo)}` lists the commits that "
                 "added and replaced it, oldest first: the first published it; add a checkout "
                 "of that commit (git worktree add <folder> <commit>) to the registry's folders "
                 "(a list) in the asset map") if repo is not None else \
            ": add a folder that holds it to the registry's folders (a list) in the asset map"
        return (f"{ref.kind.noun} {ref.name} version {ref.version} is not in registry "
                f"{ref.registry}'s folder {self.folders} (it holds {have}){where}")


def local_store(name: str) -> Path:
    """Where `azml <kind> create --registry-name <name>` registers: a workspace of its own,
    `registries/<name>` in the local workspace."""
    return workspace_root() / "registries" / name


def from_store(ref: RegistryRef) -> RegistryAsset | None:
    """The version `ref` names among what was registered here into its registry; None when
    nothing of that name was (an error listing the versions held when that one was not)."""
    store = local_store(ref.registry)
    if not store.is_dir():
        return None
    workspace = Workspace(store)
    record = workspace.find(ref.kind, ref.name, version=ref.version, label=ref.label)
    if record is None:
        return None
    path = workspace.checked(record)
    spec = path / "spec.yml" if (path / "spec.yml").is_file() else path
    return RegistryAsset(kind=ref.kind, name=record.name, version=record.version, spec=spec,
                         files=path)


# ---- building and caching the index --------------------------------------------------------

_MEMO: dict[Path, RegistryIndex] = {}


def _walk(folder: Path) -> list[Path]:
    found, count = [], 0
    for here, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED and not d.startswith("."))
        count += len(files)
        if count > MAX_FILES:
            raise LocalRunError(f"{folder}: more than {MAX_FILES} files; map the registry to "
                                "the folder that holds its assets")
        found += [Path(here) / f for f in files if f in ASSET_FILES]
    return sorted(found)


def _stamp(path: Path | None) -> list[int] | None:
    if path is None:
        return None
    try:
        info = path.stat()
    except OSError:
        return None
    return [info.st_mtime_ns, info.st_size]


def _cache_file(folder: Path) -> Path:
    digest = hashlib.sha256(str(folder).encode()).hexdigest()[:24]
    return cache_root() / "registry-index" / f"{digest}.json"


def _load_cache(folder: Path) -> dict[str, dict[str, object]]:
    try:
        data = json.loads(_cache_file(folder).read_text())
    except (OSError, ValueError):
        return {}
    entries = data.get("entries") if isinstance(data, dict) else None
    return entries if isinstance(entries, dict) and data.get("folder") == str(folder) else {}


def _save_cache(folder: Path, entries: dict[str, dict[str, object]]) -> None:
    """Written whole or not at all; a cache that cannot be written is only slower next time."""
    target = _cache_file(folder)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps({"folder": str(folder), "entries": entries}))
        os.replace(partial, target)
    except OSError:
        pass


def _still_valid(entry: dict[str, object], stamp: list[int] | None) -> bool:
    files = entry.get("stamps")
    if not isinstance(files, dict) or files.get("asset") != stamp:
        return False
    return all(_stamp(Path(p)) == s for p, s in files.items() if p != "asset")


def _entry(asset_file: Path, stamp: list[int] | None) -> dict[str, object]:
    try:
        asset = read_asset(asset_file)
    except (OSError, ValueError, UnicodeDecodeError, LocalRunError) as err:
        return {"stamps": {"asset": stamp}, "problem": str(err).splitlines()[0][:300]}
    except Exception as err:  # noqa: BLE001 - a YAML error of one file spoils no other asset
        return {"stamps": {"asset": stamp}, "problem": f"not valid YAML ({type(err).__name__})"}
    if asset is None:
        return {"stamps": {"asset": stamp}}
    stamps = {"asset": stamp, str(asset.spec): _stamp(asset.spec)}
    if asset.extra is not None:
        stamps[str(asset.extra)] = _stamp(asset.extra)
    return {"stamps": stamps, "asset": {**asdict(asset), "kind": asset.kind.value,
                                        "spec": str(asset.spec),
                                        "extra": str(asset.extra) if asset.extra else None}}


def _from_entry(entry: dict[str, object]) -> RegistryAsset:
    data = entry["asset"]
    return RegistryAsset(kind=AssetKind(data["kind"]), name=data["name"],
                         version=data["version"], spec=Path(data["spec"]),
                         extra=Path(data["extra"]) if data.get("extra") else None)


def index(folder: Path) -> RegistryIndex:
    """The folder's index: once per process; on disk between runs, each asset read again only
    when its asset file, spec or extra config changed."""
    folder = folder.resolve()
    if folder in _MEMO:
        return _MEMO[folder]
    if not folder.is_dir():
        raise LocalRunError(f"{folder}: the registry's folder does not exist")
    cached, entries, changed = _load_cache(folder), {}, False
    for asset_file in _walk(folder):
        stamp = _stamp(asset_file)
        entry = cached.get(str(asset_file))
        if entry is None or not _still_valid(entry, stamp):
            entry, changed = _entry(asset_file, stamp), True
        entries[str(asset_file)] = entry
    if changed or set(entries) != set(cached):
        _save_cache(folder, entries)
    assets = [_from_entry(e) for e in entries.values() if "asset" in e]
    problems = [Problem(Path(f), e["problem"]) for f, e in entries.items() if "problem" in e]
    _MEMO[folder] = RegistryIndex(folder, assets, problems)
    return _MEMO[folder]


def forget() -> None:
    """Drop the per-process indexes (tests, and a long-lived process that saw a folder change)."""
    _MEMO.clear()
