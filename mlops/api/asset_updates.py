"""`az ml model|data|environment update`: az's generic update over the version as `show`
prints it, then the version again as the ml extension's setter makes it (azure-ai-ml's
Model|Data|Environment._load of the edited object, then create_or_update of the same name and
version).

A version's files and definition do not change once registered; what an update may change is
what each command's help says: "Only the 'description' and 'tags' properties can be updated"
(`az ml data update`), "The 'description', and 'tags' properties can be updated" (`az ml model
update`, which also takes --stage), and the same two for an environment (azure-cli-extensions,
src/machinelearningservices/azext_mlv2/manual/_help). Any other change is refused before
anything is written, naming what changed and how to register it instead.
"""

from __future__ import annotations

import copy
import logging

from mlops.api import registry
from mlops.api.assets import AssetView, asset_view
from mlops.api.generic_update import Edit, apply
from mlops.errors import LocalRunError
from mlops.workspace.records import AssetKind, AssetVersion

MUTABLE = {AssetKind.MODEL: ("description", "stage", "tags"),
           AssetKind.DATA: ("description", "tags"),
           AssetKind.ENVIRONMENT: ("description", "tags")}
SHOWN_ONLY = ("creation_context", "id", "resourceGroup")  # what the service sets itself


def update(selection: registry.Selection, edits: list[Edit], *, force_string: bool = False,
           given: dict[str, str | None] | None = None) -> AssetVersion:
    """The version `selection` names with `edits`, then `given` (--stage, --description: the
    ones not None), applied and kept."""
    record = registry.show(selection)
    shown = asset_view(record)
    edited = apply(copy.deepcopy(shown), edits, force_string=force_string)
    edited.update({k: v for k, v in (given or {}).items() if v is not None})
    _refuse_others(record, shown, edited)
    _load_as_az(record.kind, edited)

    def change(now: AssetVersion) -> None:
        now.description = str(edited.get("description") or "")
        now.tags = {str(k): str(v) for k, v in dict(edited.get("tags") or {}).items()}
        if now.kind == AssetKind.MODEL:
            now.stage = str(edited.get("stage") or "")

    updated = registry.workspace_of(selection).update_version(record, change)
    if updated.kind == AssetKind.MODEL and selection.registry is None:
        from mlops.workspace.mlflow_models import update_model_version

        update_model_version(updated)
    return updated


def _refuse_others(record: AssetVersion, shown: AssetView, edited: AssetView) -> None:
    mutable = MUTABLE.get(record.kind)
    if mutable is None:
        raise LocalRunError(f"az ml has no `{record.kind.noun} update`: a {record.kind.noun} "
                            "version does not change once created; create a new version")
    changed = sorted(k for k in set(shown) | set(edited)
                     if k not in mutable and shown.get(k) != edited.get(k))
    if changed:
        raise LocalRunError(
            f"{record.kind.noun} {record.reference}: only {', '.join(mutable)} can be updated "
            f"(az ml {record.kind.value.rstrip('s')} update's help), and this changes "
            f"{', '.join(changed)}. A registered version keeps its files and definition: "
            f"create a new version instead (az ml {record.kind.value.rstrip('s')} create "
            "--set version=...)")


def _load_as_az(kind: AssetKind, edited: AssetView) -> None:
    """The edited object loaded as the ml extension's setter loads it (Model._load(data=...)),
    so what azure-ai-ml refuses there (a tag's value that is no text) is refused here."""
    from azure.ai.ml import entities

    logging.getLogger("azure.ai.ml").setLevel(logging.ERROR)
    entity = {AssetKind.MODEL: entities.Model, AssetKind.DATA: entities.Data,
              AssetKind.ENVIRONMENT: entities.Environment}[kind]
    data = {k: v for k, v in edited.items() if k not in SHOWN_ONLY}
    try:
        entity._load(data=data)  # noqa: SLF001 - what `az ml <kind> update` calls
    except Exception as err:  # noqa: BLE001 - azure-ai-ml's refusal, said as the input's
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise LocalRunError(f"the updated {kind.noun} is refused by azure-ai-ml: {first}") \
            from None
