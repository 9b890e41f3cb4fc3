"""NumPy's binary interface: releases compiled for NumPy 1 fail to import under NumPy 2.

pip pairs them anyway (scikit-learn 1.2.2 asks only for numpy>=1.17.3), but conda-forge, which
builds Azure's conda environments, gave every package built before NumPy 2 an upper bound of
numpy<2. So after a layer is installed, the compiled packages in it that need numpy are imported
once; if one fails with NumPy's own binary-interface error, the layer is built again with
numpy<2, the pair Azure's conda build would have chosen.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
from pathlib import Path

from mlops.environments import steps
from mlops.environments.requirements import canonical, name_of

NUMPY_1 = "numpy<2"
ABI_ERROR = re.compile(r"numpy\.dtype size changed|compiled using NumPy 1\.x|"
                       r"_ARRAY_API not found|numpy\.core\.multiarray failed to import")
IMPORT_ALL = """
import importlib, json, sys
failed = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except BaseException as error:  # noqa: BLE001 - any failure is reported, none stops the rest
        failed[name] = f"{type(error).__name__}: {error}"
print(json.dumps(failed))
"""
CHECK_TIMEOUT_S = 120  # importing every package of a large layer (TensorFlow) takes seconds


def _needs_numpy(dist) -> bool:
    return any(name_of(line) == "numpy" for line in dist.requires or [])


def _modules(dist) -> set[str]:
    """The top-level modules of a distribution that ships compiled extensions (none: set())."""
    files = [str(f) for f in dist.files or []]
    if not any(f.endswith((".so", ".pyd")) for f in files):
        return set()
    tops = (dist.read_text("top_level.txt") or "").split()
    if not tops:  # no top_level.txt: the first part of every module path it installs
        tops = [f.split("/")[0].split(".")[0] for f in files if f.endswith((".py", ".so"))]
    return {top for top in tops if top.isidentifier()}


def compiled_numpy_users(site: Path) -> list[str]:
    """The modules, installed in `site`, of compiled packages that need numpy."""
    found: set[str] = set()
    for dist in importlib.metadata.distributions(path=[str(site)]):
        if canonical(dist.metadata["Name"] or "") != "numpy" and _needs_numpy(dist):
            found |= _modules(dist)
    return sorted(found)


def built_for_numpy_1(python: Path, site: Path) -> list[str]:
    """The modules in `site` that fail to import with NumPy's binary-interface error when run by
    `python` (the layer's, which sees the layers and .venv below it)."""
    modules = compiled_numpy_users(site)
    if not modules:
        return []
    try:
        result = subprocess.run([str(python), "-c", IMPORT_ALL, *modules], capture_output=True,
                                text=True, timeout=CHECK_TIMEOUT_S)
        failed = json.loads(result.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return []  # no verdict: the layer is kept as pip built it
    if not ABI_ERROR.search(result.stderr) and not any(map(ABI_ERROR.search, failed.values())):
        return []
    return sorted(name for name, error in failed.items() if ABI_ERROR.search(error)) or \
        sorted(failed)


def with_numpy_1(requirements: list[str]) -> list[str]:
    """The requirements with numpy<2 in place of any line that names numpy (and a constraint
    of every install step after the first, steps.py)."""
    kept = [line for line in requirements if name_of(line) != "numpy"]
    return steps.constrained(kept, NUMPY_1) if steps.has_steps(kept) else [*kept, NUMPY_1]
