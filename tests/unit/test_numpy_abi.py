"""A layer whose compiled packages were built for NumPy 1 gets numpy<2, as Azure's conda build
pairs them (mlops/environments/abi.py, mlops/environments/closures.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import abi_site

from mlops.environments import abi, closures, resolve
from mlops.errors import LocalRunError


@pytest.fixture
def site(tmp_path, monkeypatch) -> Path:
    return abi_site(tmp_path, monkeypatch)


def test_the_compiled_packages_that_need_numpy_are_the_ones_checked(site):
    assert abi.compiled_numpy_users(site) == ["fresh", "stale"]


def test_numpy_lines_give_way_to_numpy_1():
    assert abi.with_numpy_1(["scikit-learn==1.2.2", "numpy==2.2.6", "pandas"]) == \
        ["scikit-learn==1.2.2", "pandas", "numpy<2"]


def paired(monkeypatch, stale: list[str], numpy_1_installs: bool = True):
    """closures._paired with the resolver, the install and the import check stood in for: the
    requirement lines each build was resolved from, and the build kept."""
    calls = []

    def built(folder, lines, python, label, adds):
        calls.append(lines)
        if abi.NUMPY_1 in lines and not numpy_1_installs:
            raise LocalRunError("no set with numpy<2")
        return closures.Built(resolve.Moved({}, {}), {"scikit-learn": "1.2.2"}, Path("below"))

    monkeypatch.setattr(closures, "_built", built)
    monkeypatch.setattr(abi, "built_for_numpy_1", lambda python, site: stale)
    kept = closures._paired(Path("layer"), ["scikit-learn==1.2.2"], python="3.11", label="env",
                            adds=())
    return calls, kept


def test_a_layer_built_for_numpy_1_is_resolved_again_with_numpy_1(monkeypatch, capsys):
    calls, kept = paired(monkeypatch, ["sklearn"])
    assert calls == [["scikit-learn==1.2.2"], ["scikit-learn==1.2.2", "numpy<2"]]
    assert kept.moved.lines == ["numpy -> numpy<2: sklearn fail(s) under NumPy 2"]
    assert "resolving again with numpy<2" in capsys.readouterr().out


def test_a_layer_that_imports_is_kept_and_numpy_1_that_cannot_install_keeps_numpy_2(
        monkeypatch, capsys):
    assert paired(monkeypatch, [])[0] == [["scikit-learn==1.2.2"]]
    calls, kept = paired(monkeypatch, ["sklearn"], numpy_1_installs=False)
    assert calls[-1] == ["scikit-learn==1.2.2"] and kept.moved.lines == []
    assert "does not install with the rest" in capsys.readouterr().out
