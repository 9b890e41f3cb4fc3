"""A change in one built environment reaches no other and not uv's cache, and the damaged one is
built again whole (mlops/environments/integrity.py): two layers of kilobyte packages from PyPI
(six, pyjokes), built from an empty uv cache in a temporary folder."""

from __future__ import annotations

import pytest

from mlops.environments import integrity
from mlops.environments.closures import build_closure_layer

pytestmark = pytest.mark.network  # an empty cache: the packages come from the registry


def six_of(layer):
    return next(layer.glob("lib/python*/site-packages/six.py"))


@pytest.mark.proof
def test_one_environment_changed_changes_no_other_and_is_repaired(tmp_path, monkeypatch,
                                                                 capsys):
    monkeypatch.setenv("LOCAL_ENVS_DIR", str(tmp_path / "envs"))
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv"))
    one = build_closure_layer(["six==1.16.0"], "3.11", "one")
    other = build_closure_layer(["six==1.16.0", "pyjokes==0.6.0"], "3.11", "other")
    cached = [p for p in (tmp_path / "uv").rglob("six.py") if p.is_file()]
    assert cached and six_of(one).stat().st_nlink == 1  # a copy, not a link into the cache
    original = six_of(other).read_bytes()

    with open(six_of(one), "r+b") as handle:  # one file changed in one environment
        handle.write(b"raise SystemExit('damaged')  #")
    assert six_of(other).read_bytes() == original
    assert all(p.read_bytes() == original for p in cached)

    integrity.CHECKED.clear()  # the next run, a new process, checks before its first use
    assert build_closure_layer(["six==1.16.0"], "3.11", "one") == one
    assert six_of(one).read_bytes() == original  # built again, from an undamaged cache
    assert "is damaged (lib/python3.11/site-packages/six.py changed)" in capsys.readouterr().err
