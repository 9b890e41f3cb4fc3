"""A curated environment at the version a spec names (`azureml:AzureML-sklearn-1.5:23`,
`azureml://registries/azureml/environments/sklearn-1.5/versions/23`): that version's packages,
not the latest's. catalog/curated-env-versions.json holds them (scripts/gen_curated_envs.py reads
every release tag `environment/<name>/<version>` of Azure/azureml-assets and keeps the versions
where the packages change); catalog/curated-envs.yml holds each environment's latest.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

VERSIONS = Path(__file__).resolve().parent / "catalog" / "curated-env-versions.json"


@cache
def _history(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _number(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)) or (0,)


def at_version(key: str, version: str, path: Path | None = None) -> dict[str, object] | None:
    """The catalogue entry of `key` (any of its names) as published at `version`: the last
    change at or before it (None: no history for it, or a version before the first)."""
    data = _history(path or VERSIONS)
    name = (data.get("names") or {}).get(key.lower())
    pairs = (data.get("versions") or {}).get(name) if name else None
    if not pairs or not re.fullmatch(r"\d+(\.\d+)*", str(version)):
        return None
    chosen = None
    for first, entry in pairs:  # ascending by version
        if _number(first) <= _number(str(version)):
            chosen = entry
    return chosen
