"""Components and environments from a mapped registry folder, read as Azure reads them there.

A component published to a registry names its neighbours as the registry resolves them: a
pipeline component's `component: azureml:<name>:<version>` and a command component's
`environment: azureml:<name>:<version>` are that registry's assets, and a full
`azureml://registries/<r>/environments/<name>/versions/<v>` is the one the folder holds when it
holds that version. An environment the folder holds only as `version: auto` (azureml-assets'
curated environments, numbered at release) is left to the curated catalogue, which is generated
from the same repository's releases (mlops/environments/catalog/).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from mlops.errors import LocalRunError
from mlops.runtime.uris import AssetMap
from mlops.specs import SpecData, read_yaml
from mlops.workspace import registry
from mlops.workspace.records import AssetKind

SHORT = re.compile(r"^azureml:(?!//)([^@:/]+)(?::([^@:/]+)|@([^@:/]+))?$")
TEMPLATE = re.compile(r"\{\{\s*([\w.-]+)\s*\}\}")


class RegistryFile(NamedTuple):
    """A registry asset's spec file, and the registry its own references resolve in."""

    path: Path
    registry: str


def in_registry(reference: str, kind: AssetKind, registry_name: str | None) -> str:
    """`azureml:<name>:<v>` written inside a registry's asset, as that registry's URI."""
    match = SHORT.match(reference) if registry_name else None
    if match is None:
        return reference
    name, version, label = match.groups()
    tail = f"/versions/{version}" if version else f"/labels/{label or registry.LATEST}"
    return f"azureml://registries/{registry_name}/{kind.value}/{name}{tail}"


def component_file(reference: str, assets: AssetMap, where: str,
                   registry_name: str | None) -> RegistryFile | None:
    """The spec of the registry component `reference` names (a short name inside a registry's
    pipeline component names one of that registry's); None when no mapped registry holds it."""
    uri = in_registry(reference, AssetKind.COMPONENT, registry_name)
    ref = registry.parse_ref(uri)
    if ref is None:
        return None
    try:
        asset = assets.registry_asset(uri)
    except LocalRunError:
        if uri == reference:
            raise
        return None  # a short name the registry lacks: the workspace and the map are next
    return RegistryFile(asset.spec, ref.registry) if asset is not None else None


def _render(text: str, values: dict[str, str]) -> str:
    return TEMPLATE.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def environment_definition(asset: registry.RegistryAsset) -> SpecData:
    """A registry environment's spec as an inline definition: its files by absolute path, and
    azureml-assets' template tags for the asset and its build context filled in."""
    extra = read_yaml(asset.extra.read_text(encoding="utf-8")) if asset.extra else None
    image = (extra or {}).get("image") if isinstance(extra, dict) else None
    image = image if isinstance(image, dict) else {}
    context = image.get("context") if isinstance(image.get("context"), dict) else {}
    values = {"asset.name": asset.name, "asset.version": asset.shown,
              "image.context.path": str(context.get("dir") or "context"),
              "image.dockerfile.path": str(context.get("dockerfile") or "Dockerfile")}
    data = read_yaml(_render(asset.spec.read_text(encoding="utf-8"), values))
    if not isinstance(data, dict):
        raise LocalRunError(f"{asset.spec}: not an environment spec")
    base = asset.spec.parent
    if isinstance(data.get("conda_file"), str):
        data["conda_file"] = str((base / data["conda_file"].removeprefix("file:")).resolve())
    build = data.get("build")
    if isinstance(build, dict) and isinstance(build.get("path"), str):
        data["build"] = {**build, "path": str((base / build["path"]).resolve())}
    return data


def pinned_environment(environment, assets: AssetMap, registry_name: str | None):
    """A component's `environment:`, as the definition the mapped registry folder holds for
    it when it holds that version; otherwise unchanged (the curated catalogue, the workspace
    and the asset map resolve it as before)."""
    if not isinstance(environment, str):
        return environment
    uri = in_registry(environment, AssetKind.ENVIRONMENT, registry_name)
    ref = registry.parse_ref(uri)
    if ref is None or ref.kind != AssetKind.ENVIRONMENT:
        return environment
    try:
        asset = assets.registry_asset(uri)
    except LocalRunError:
        return environment  # an unnumbered or absent version: the catalogue's
    if asset is None or asset.version is None:
        return environment
    return environment_definition(asset)
