"""A layer whose compiled packages were built for NumPy 1 gets numpy<2, as Azure's conda build
pairs them (mlops/environments/abi.py, mlops/environments/layers.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support import abi_site

from mlops.environments import abi


@pytest.fixture
def site(tmp_path, monkeypatch) -> Path:
    return abi_site(tmp_path, monkeypatch)


@pytest.mark.proof
def test_a_module_failing_with_numpys_binary_interface_error_is_named(site):
    assert abi.built_for_numpy_1(Path(sys.executable), site) == ["stale"]


@pytest.mark.proof
def test_other_import_failures_are_not_taken_for_numpy_1(site):
    (site / "stale/__init__.py").write_text("raise ImportError('libfoo.so.1: cannot open')")
    assert abi.built_for_numpy_1(Path(sys.executable), site) == []
