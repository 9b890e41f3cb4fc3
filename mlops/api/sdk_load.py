"""An azure-ai-ml `load_<kind>` called as az ml calls it, its refusal said in its own words."""

from __future__ import annotations

import io
import logging
from pathlib import Path

from mlops.errors import LocalRunError
from mlops.specs import SpecData


def sdk_loaded(kind: str, source: Path | io.StringIO | None,
               override: list[dict[str, object]], what: str) -> SpecData:
    """azure-ai-ml's `load_<kind>(source, params_override=override)` as the dict az ml prints
    (`_to_dict()`); a LocalRunError naming `what` ("compute create") and the loader's message."""
    import azure.ai.ml as sdk

    logging.getLogger("azure.ai.ml").setLevel(logging.ERROR)
    try:
        entity = getattr(sdk, f"load_{kind}")(source, params_override=override)
    except OSError as err:
        raise LocalRunError(f"{what}: {err}") from None
    except Exception as err:  # noqa: BLE001 - marshmallow's and azure-ai-ml's refusals
        raise LocalRunError(f"{what}: {str(err).strip()}") from None
    return entity._to_dict()  # noqa: SLF001 - what az ml prints and keeps
