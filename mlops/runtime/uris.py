"""Local stand-ins for the data an Azure spec names by reference (assets/local-paths.yml).

Azure resolves `azureml:<asset>:<version>`, `azureml:<asset>@latest`, `azureml://datastores/...`,
`azureml://subscriptions/.../datastores/...`, `wasbs://`, `abfss://` and `https://` itself; this
machine has none of them, so each needs a line in the mapping file. A key maps either one
reference exactly, an asset by name (`azureml:<name>` covers every version and label), or, ending
in `/`, every path under a prefix (`azureml://datastores/workspaceblobstore/paths/: data/blob/`).
Values are local paths relative to the repository root. An unmapped reference is an error that
names the reference and the file.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from mlops.errors import LocalRunError
from mlops.project import project
from mlops.specs import ROOT, read_yaml

ASSET_MAP = ROOT / "assets" / "local-paths.yml"
# What Azure fetches itself: assets, datastores, storage and web URLs, git repositories (code).
REMOTE = re.compile(r"^(azureml:|https?://|wasbs?://|abfss?://|adl://|s3://|gs://|git\+)", re.I)
LONG_DATASTORE = re.compile(r"^azureml://subscriptions/[^/]+/resource[gG]roups/[^/]+/"
                            r"(?:providers/[^/]+/)?workspaces/[^/]+/(datastores/.*)$")


def is_remote(reference) -> bool:
    return isinstance(reference, str) and bool(REMOTE.match(reference))


def load_map(path: Path = ASSET_MAP) -> dict[str, str]:
    if not path.is_file():
        return {}
    try:
        data = read_yaml(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise LocalRunError(f"{path}: not valid YAML ({err})") from None
    if not isinstance(data, dict):
        raise LocalRunError(f"{path}: expected a mapping of references to local paths")
    return {str(k): str(v) for k, v in data.items() if v is not None}


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
    for key in keys:  # the longest prefix key ending in "/" wins
        prefixes = [p for p in mapping if p.endswith("/") and key.startswith(p)]
        if prefixes:
            prefix = max(prefixes, key=len)
            return mapping[prefix].rstrip("/") + "/" + key[len(prefix):]
    return None


class AssetMap:
    """The mapping file, loaded once per run."""

    def __init__(self, path: Path = ASSET_MAP):
        self.file = Path(path)
        self.mapping = load_map(self.file)

    def local_path(self, reference, key: str, base: Path, *, must_exist: bool = True,
                   bare: bool = False, what: str = "local path") -> Path:
        """A local path for `reference`: remote ones through the map, others relative to base.
        bare: the reference is the key's whole value (`raw: azureml:x@latest`, `component:
        azureml:x@latest`), not the `path:` of a mapping; `what` the map should point at."""
        reference = str(reference)
        if is_remote(reference):
            local = lookup(reference, self.mapping)
            if local is None:
                named = reference.startswith("azureml:") and not reference.startswith("azureml://")
                suggestion = asset_key(reference) if named else reference
                dotted = key.rsplit(": ", 1)[-1]  # key is "<spec file>: jobs.a.inputs.b"
                dotted += "" if bare else ".path"
                raise LocalRunError(
                    f"{key}: {reference} has no local stand-in. Add a line '{suggestion}: <{what}>"
                    f"' to {self.file}, or override it: --set {dotted}=<{what}>")
            path = (ROOT / local).resolve()
        else:
            path = (base / reference.removeprefix("file:")).resolve()
        if must_exist and not path.exists():
            hint = project().hints.get("missing_data", "create it")
            raise LocalRunError(f"{key}: local path {path} does not exist: {hint}, or point "
                                "the input elsewhere")
        return path
