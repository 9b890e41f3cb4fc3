"""A curated environment at the version a spec names (`azureml:AzureML-sklearn-1.5:23`,
`azureml://registries/azureml/environments/sklearn-1.5/versions/23`, `@latest`): that version's
image, not today's definition. On Azure each version is one fixed image; its definition is the
release record of Azure/azureml-assets: the tag `environment/<name>/<version>`, whose
`latest/environment/<name>/` holds that version's spec and build context (the Python, the conda
file's conda and pip packages with every pin resolved, what its Dockerfile installs).
catalog/curated-env-versions.json holds them (scripts/gen_curated_envs.py reads every release
tag), compactly: each environment's definition at the versions where it changes, the versions
published (`1-5,7,9-84`), and for each legacy name (`AzureML-lightgbm-3.3-ubuntu20.04-py38-cpu`)
the last version whose tags gave that name. catalog/curated-envs.yml holds the catalogue of every
name (retired ones too, at their last definition).

- `:<N>`, published: exactly that version's definition.
- `:<N>` the records do not hold (before the first, after the last, a gap, or past the last
  version of a legacy name): the nearest published version at or below it (else the first)
  stands in, and one line names both.
- `@latest` / no version: the last published version (a legacy name's last), exact pins.
A legacy name's Python (`-py38-`) bounds it too: only versions whose definition has that Python
are published under it (the tags of a spec sometimes lagged its conda file).
What a definition leaves unpinned (azureml-mlflow's `mlflow-skinny`, a bare `tensorboard`) was
the newest release on the day Azure built the image, so the environment is resolved as of the
day after its release record (`--exclude-newer`, RESOLVED_AS_OF): `AzureML-sklearn-1.5:23`
(April 2025) gets MLflow 2.21, not today's 3.x. An environment retired before the release
records began (`AzureML-sklearn-0.24-ubuntu18.04-py37-cpu`, removed from azureml-assets in June
2022) resolves as of its removal (the catalogue's `retired`): every image of it was built by
then, so its unpinned joblib is 1.1, whose pickles joblib 1.0 reads, not today's 1.3.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import NamedTuple

VERSIONS = Path(__file__).resolve().parent / "catalog" / "curated-env-versions.json"
RESOLVED_AS_OF = "--exclude-newer"  # a requirement line: resolve.py hands it to uv
MARGIN_S = 86_400  # the image is built after its release record: packages of that day count


class Chosen(NamedTuple):
    """The definition chosen for a curated reference; `notice` says what stood in, if any."""

    entry: dict[str, object]
    version: str
    notice: str | None = None
    released: int | None = None  # the release record's time (unix seconds)

    def as_of(self) -> str | None:
        """The `--exclude-newer <time>` line: what PyPI held when the image was built."""
        return None if self.released is None else exclude_newer(self.released + MARGIN_S)


def exclude_newer(seconds: int) -> str:
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    return f"{RESOLVED_AS_OF} {moment.strftime('%Y-%m-%dT%H:%M:%SZ')}"


def retired_as_of(entry: object) -> str | None:
    """A catalogue entry without release records that azureml-assets removed (`retired`: the
    removal's time): every image of it was built by then, so it resolves as PyPI was then."""
    seconds = entry.get("retired") if isinstance(entry, dict) else None
    return exclude_newer(seconds) if isinstance(seconds, int) else None


@cache
def _history(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _number(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)) or (0,)


def expand(ranges: str) -> list[int]:
    """"1-3,5" -> [1, 2, 3, 5]."""
    found = []
    for part in filter(None, ranges.split(",")):
        first, _, last = part.partition("-")
        found += range(int(first), int(last or first) + 1)
    return found


def _at(pairs: list, version: str) -> dict[str, object] | None:
    """The definition in force at `version`: the last change at or before it."""
    chosen = None
    for first, entry in pairs:  # ascending by version
        if _number(first) <= _number(version):
            chosen = entry
    return chosen


def at_version(key: str, version: str, path: Path | None = None) -> dict[str, object] | None:
    """The catalogue entry of `key` (any of its names) as published at `version`: the last
    change at or before it (None: no history for it, or a version before the first)."""
    data = _history(path or VERSIONS)
    name = (data.get("names") or {}).get(key.lower())
    pairs = (data.get("versions") or {}).get(name) if name else None
    if not pairs or not re.fullmatch(r"\d+(\.\d+)*", str(version)):
        return None
    return _at(pairs, str(version))


def _python_of(key: str) -> str | None:
    """`azureml:AzureML-sklearn-1.0-ubuntu20.04-py38-cpu` -> "3.8"."""
    match = re.search(r"-py(\d)(\d+)-(?:cpu|gpu)$", key.lower())
    return f"{match.group(1)}.{match.group(2)}" if match else None


def _published(data: dict[str, object], name: str, key: str, pairs: list) -> list[int]:
    """The versions published under `key`: all of the environment's, a legacy name's up to
    its last and only those of its Python."""
    published = expand(str((data.get("published") or {}).get(name) or ""))
    legacy = (data.get("legacy") or {}).get(key.lower())
    if legacy and legacy[0] == name:
        published = [number for number in published if number <= int(legacy[1])]
        python = _python_of(key)
        matching = [n for n in published
                    if str((_at(pairs, str(n)) or {}).get("python", "")) == python]
        published = matching or published
    return published


def choose(key: str, version: str | None, label: str, path: Path | None = None) -> Chosen | None:
    """The definition of `key` at `version` (None: @latest) from the release records; None
    where they hold no published versions of it (the catalogue's entry applies)."""
    data = _history(path or VERSIONS)
    name = (data.get("names") or {}).get(key.lower())
    pairs = (data.get("versions") or {}).get(name) if name else None
    published = _published(data, name, key, pairs) if pairs else []
    if not published or version is not None and not re.fullmatch(r"\d+", str(version)):
        return None
    dates = (data.get("dates") or {}).get(name) or {}
    wanted = published[-1] if version is None else int(version)
    if wanted in published:
        return Chosen(_at(pairs, str(wanted)), str(wanted), None, dates.get(str(wanted)))
    stand_in = max((n for n in published if n <= wanted), default=published[0])
    shown = ",".join(f"{a}-{b}" if a != b else str(a) for a, b in _spans(published))
    return Chosen(_at(pairs, str(stand_in)), str(stand_in),
                  f"{label}: version {wanted} of curated environment {name} is not in "
                  f"Azure/azureml-assets' release records (published under this name: {shown});"
                  f" version {stand_in}'s definition stands in", dates.get(str(stand_in)))


def _spans(numbers: list[int]) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for number in numbers:
        if spans and spans[-1][1] == number - 1:
            spans[-1] = (spans[-1][0], number)
        else:
            spans.append((number, number))
    return spans
