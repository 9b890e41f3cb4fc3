"""A layer whose compiled packages were built for NumPy 1 gets numpy<2, as Azure's conda build
pairs them (mlops/environments/abi.py, mlops/environments/layers.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mlops.environments import abi

ABI_MESSAGE = "numpy.dtype size changed, may indicate binary incompatibility. Expected 96, got 88"


def installed(site: Path, name: str, requires: list[str], files: dict[str, str]) -> None:
    """A distribution in `site`, as pip leaves one: its modules, METADATA and RECORD."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    lines = [f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0"]
    lines += [f"Requires-Dist: {line}" for line in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    for path, text in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)
    (info / "RECORD").write_text("".join(f"{path},,\n" for path in files))


@pytest.fixture
def site(tmp_path, monkeypatch) -> Path:
    """Compiled numpy users that break (stale), import (fresh) or need no numpy (plain)."""
    site = tmp_path / "site-packages"
    installed(site, "stale", ["numpy>=1.17.3"],
              {"stale/__init__.py": f"raise ValueError({ABI_MESSAGE!r})", "stale/_c.so": ""})
    installed(site, "fresh", ["numpy>=1.19; python_version >= '3.8'"],
              {"fresh/__init__.py": "", "fresh/_c.so": ""})
    installed(site, "plain", ["six"], {"plain/__init__.py": "raise ValueError('x')",
                                       "plain/_c.so": ""})
    installed(site, "purepy", ["numpy"], {"purepy.py": "raise ValueError('x')"})
    monkeypatch.setenv("PYTHONPATH", str(site))  # the checking python sees it, as a layer's does
    return site


def test_a_module_failing_with_numpys_binary_interface_error_is_named(site):
    assert abi.built_for_numpy_1(Path(sys.executable), site) == ["stale"]


def test_other_import_failures_are_not_taken_for_numpy_1(site):
    (site / "stale/__init__.py").write_text("raise ImportError('libfoo.so.1: cannot open')")
    assert abi.built_for_numpy_1(Path(sys.executable), site) == []
