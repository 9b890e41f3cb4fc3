"""Local stand-ins for the data an Azure spec names by reference (the repository's asset map:
`asset_map` in its settings, mlops/project.py; this repository's is assets/local-paths.yml).

Azure resolves `azureml:<asset>:<version>`, `azureml:<asset>@latest`, `azureml://datastores/...`,
`azureml://subscriptions/.../datastores/...`, `wasbs://`, `abfss://` and `https://` itself; this
machine has none of them, so each needs a line in the mapping file. A key maps either one
reference exactly, an asset by name (`azureml:<name>` covers every version and label), or, ending
in `/`, every path under a prefix (`azureml://datastores/workspaceblobstore/paths/: data/blob/`).
Values are local paths relative to the repository's root. The local workspace answers before the
file: a version registered there (`azureml:<name>:<version>`, `@latest`, the long workspace URI)
and a finished local job's output (`azureml://jobs/<name>/outputs/<output>`); see
mlops/workspace. A reference neither knows is an error that names the reference and the file.

A registry (`azureml://registries/<registry>/components|models|environments|data/<name>...`)
resolves from the folder the file maps the registry itself to (`azureml://registries/azureml:
<a checkout of Azure/azureml-assets>`), by each asset's own name and version
(mlops/workspace/registry.py); a model whose files the registry keeps in storage (azureml-assets'
`model.yaml` path) needs that storage URL mapped too.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from mlops.errors import LocalRunError
from mlops.project import CONFIG, project
from mlops.specs import read_yaml
from mlops.workspace import registry
from mlops.workspace.records import AssetKind
from mlops.workspace.references import JOB, Submission, azure_refusal

# What Azure fetches itself: assets, datastores, storage and web URLs, git repositories (code).
REMOTE = re.compile(r"^(azureml:|https?://|wasbs?://|abfss?://|adl://|s3://|gs://|git\+)", re.I)
LONG_DATASTORE = re.compile(r"^azureml://subscriptions/[^/]+/resource[gG]roups/[^/]+/"
                            r"(?:providers/[^/]+/)?workspaces/[^/]+/(datastores/.*)$")


WHAT = {"component": "local component .yml", "model": "local file or folder"}
REGISTER = "Register it as az ml would (azml {noun} create -f <its YAML>), or: "


def azure_says(reference: str, kind: str, by: Submission = JOB) -> str:
    """What `by` (az ml job create, unless a deployment's) says of a short name its workspace
    lacks, as a parenthesis ("" for other references): mlops/workspace/references.py."""
    refusal = azure_refusal(reference, AssetKind.parse(kind if kind in WHAT else "data"), by)
    return f" ({refusal})" if refusal else ""


def is_remote(reference) -> bool:
    return isinstance(reference, str) and bool(REMOTE.match(reference))


def read_map(path: Path | None) -> dict[str, object]:
    """The mapping file as written (a registry's value may be a list of folders)."""
    if path is None or not path.is_file():
        return {}
    try:
        data = read_yaml(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise LocalRunError(f"{path}: not valid YAML ({err})") from None
    if not isinstance(data, dict):
        raise LocalRunError(f"{path}: expected a mapping of references to local paths")
    return {str(k): v for k, v in data.items()}


def load_map(path: Path | None) -> dict[str, str]:
    return {k: str(v) for k, v in read_map(path).items() if v is not None}


def asset_key(reference: str) -> str:
    """azureml:name@latest, azureml:name:3 and azureml:name@3 all map by name."""
    name = reference.removeprefix("azureml:")
    return "azureml:" + re.split(r"[@:]", name, maxsplit=1)[0]


def candidates(reference: str) -> list[str]:
    """Keys to try, most specific first."""
    keys = [reference]
    long_form = LONG_DATASTORE.match(reference)
    if long_form:
        keys.append(f"azureml://{long_form.group(1)}")
    if reference.startswith("azureml:") and not reference.startswith("azureml://"):
        keys.append(asset_key(reference))
    return keys


def lookup(reference: str, mapping: dict[str, str]) -> str | None:
    keys = candidates(reference)
    for key in keys:
        if key in mapping:
            return mapping[key]
    for key in keys:  # the longest prefix key ending in "/" wins (a folder's own key too:
        # `path: azureml://datastores/d/paths/x/` is read as `.../x`)
        prefixes = [p for p in mapping if p.endswith("/") and (key + "/").startswith(p)]
        if prefixes:
            prefix = max(prefixes, key=len)
            rest = key[len(prefix):] if len(key) >= len(prefix) else ""
            if ".." in rest.split("/"):  # a path under a datastore stays under it
                raise LocalRunError(f"{reference}: '..' would leave {prefix} (mapped to "
                                    f"{mapping[prefix]}); a datastore path names a file or "
                                    "folder under it")
            return (mapping[prefix].rstrip("/") + "/" + rest).rstrip("/")
    return None


class AssetMap:
    """The mapping file, loaded once per run: `path`, else the repository's (its settings'
    `asset_map`; none when it names none). Its values are relative to the repository."""

    def __init__(self, path: Path | None = None, by: Submission = JOB):
        """`by`: the az ml command that resolves the names looked up through this map, as its
        refusal of a name the workspace lacks says (a job's, unless a deployment's)."""
        settings = project()
        self.by = by
        self.file = Path(path) if path is not None else settings.asset_map
        self.base = settings.root
        written = read_map(self.file)
        self.mapping = {k: str(v) for k, v in written.items() if v is not None}
        self.registries = registry.registry_folders(written, self.base)

    @property
    def named(self) -> str:
        """The file, as an error names it (the setting that names one, when there is none)."""
        if self.file is not None:
            return str(self.file)
        return f"an asset map (asset_map = \"<file>\" in {self.base / CONFIG}, or --assets)"

    def stand_ins(self) -> dict[str, str]:
        """The map's `azureml:<name>` entries as local paths: what an SDK v1 script's
        workspace calls name in the job (mlops/runtime/azureml_run.py)."""
        return {key: str((self.base / value).resolve()) for key, value in self.mapping.items()
                if key.startswith("azureml:") and "://" not in key}

    def mapped_output(self, reference: str) -> Path | None:
        """Where an output whose `path:` is `reference` is written: the local path the file
        maps it to, None for a local path or a reference it does not map (the run folder)."""
        if "${{" in reference or not is_remote(reference):
            return None
        local = lookup(reference, self.mapping)
        return (self.base / local).resolve() if local is not None else None

    def registry_asset(self, reference: str) -> registry.RegistryAsset | None:
        """The asset a registry URI names, from the folder this file maps its registry to;
        None for another reference, or a registry the file maps no folder for."""
        ref = registry.parse_ref(reference)
        if ref is None:
            return None
        here = registry.from_store(ref)  # registered here with --registry-name
        folders = self.registries.get(ref.registry)
        if here is not None or not folders:
            return here
        held = registry.Registry([registry.index(f) for f in folders])
        found = held.get(ref)
        problems = held.problems
        if found is None and ref.kind != AssetKind.ENVIRONMENT:  # those fall back on curated ones
            unread = f"; {len(problems)} asset file(s) there could not be read (first: " \
                f"{problems[0].file}: {problems[0].reason})" if problems else ""
            raise LocalRunError(f"{reference}: registry {ref.registry}'s folder {held.folders} "
                                f"(in {self.named}) holds no {ref.kind.noun} named {ref.name}"
                                f"{unread}")
        return found

    def registry_path(self, reference: str, key: str) -> Path | None:
        """The local files of the registry asset `reference` names: a component's spec, a data
        asset's or a model's files; None when its registry is not mapped to a folder."""
        asset = self.registry_asset(reference)
        if asset is None:
            return None
        if asset.kind == AssetKind.COMPONENT:
            return asset.spec
        if asset.kind == AssetKind.ENVIRONMENT:
            raise LocalRunError(f"{key}: {reference} is an environment, not data or a model")
        return self.asset_files(asset, reference, key)

    def asset_files(self, asset: registry.RegistryAsset, reference: str, key: str) -> Path:
        """A registry model's or data asset's files: its spec's `path:` (relative to the spec),
        or the storage its extra config names (azureml-assets' models), through this file."""
        if asset.files is not None and asset.kind in (AssetKind.MODEL, AssetKind.DATA):
            return asset.files
        spec = read_yaml(asset.spec.read_text(encoding="utf-8")) or {}
        extra = read_yaml(asset.extra.read_text(encoding="utf-8")) if asset.extra else None
        stored = (extra or {}).get("path") if isinstance(extra, dict) else None
        if isinstance(stored, dict) and stored.get("type") == "azureblob":
            url = (f"https://{stored.get('storage_name')}.blob.core.windows.net/"
                   f"{stored.get('container_name')}/{stored.get('container_path')}")
            local = lookup(url, self.mapping)
            if local is None:
                raise LocalRunError(
                    f"{key}: {reference}: the registry keeps {asset.name} {asset.shown}'s files "
                    f"in storage ({url}), not in {asset.spec.parent}; download them and add "
                    f"'{url}: <local folder>' to {self.named}")
            return (self.base / local).resolve()
        path = spec.get("path") if isinstance(spec, dict) else None
        if not isinstance(path, str) or not path:
            raise LocalRunError(f"{key}: {reference}: its spec {asset.spec} names no path")
        if is_remote(path):
            return self.local_path(path, key, asset.spec.parent, must_exist=False, bare=True)
        return (asset.spec.parent / path).resolve()

    def registered(self, reference: str, kind: str) -> Path | None:
        """What the local workspace holds under `reference` (a registered version, a local
        job's output), None when it holds nothing of that name (the mapping file is next)."""
        from mlops.workspace.records import AssetKind
        from mlops.workspace.references import local_path

        return local_path(reference, AssetKind.parse(kind))

    def local_path(self, reference, key: str, base: Path, *, must_exist: bool = True,
                   bare: bool = False, kind: str = "data") -> Path:
        """A local path for `reference`: remote ones through the map, others relative to base.
        bare: the reference is the key's whole value (`raw: azureml:x@latest`, `component:
        azureml:x@latest`), not the `path:` of a mapping; `kind` the workspace asset kind a
        short `azureml:<name>` names there (data, model, component). The local workspace
        answers first (mlops/workspace), then the mapping file."""
        reference = str(reference)
        what = WHAT.get(kind, "local path")  # what a line of the mapping file should point at
        registered = self.registered(reference, kind) if is_remote(reference) else None
        if registered is None and is_remote(reference):
            registered = self.registry_path(reference, key)
        if registered is not None:
            path = registered
        elif is_remote(reference):
            local = lookup(reference, self.mapping)
            if local is None:
                named = reference.startswith("azureml:") and not reference.startswith("azureml://")
                suggestion = asset_key(reference) if named else reference
                dotted = key.rsplit(": ", 1)[-1]  # key is "<spec file>: jobs.a.inputs.b"
                dotted += "" if bare else ".path"
                register = REGISTER.format(noun=kind if kind in WHAT else "data") if named else ""
                raise LocalRunError(
                    f"{key}: {reference} has no local stand-in: neither the local workspace nor "
                    f"{self.named} knows it{azure_says(reference, kind, self.by)}. {register}"
                    f"Add a line '{suggestion}: <{what}>' to {self.named}, or override it: "
                    f"--set {dotted}=<{what}>")
            path = (self.base / local).resolve()
        else:
            path = (base / reference.removeprefix("file:")).resolve()
        if must_exist and not path.exists():
            hint = project().hints.get("missing_data", "create it")
            raise LocalRunError(f"{key}: local path {path} does not exist: {hint}, or point "
                                "the input elsewhere")
        return path
