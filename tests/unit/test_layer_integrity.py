"""A cached environment records what it holds and is checked before its first use in each run: a
damaged one is named and built again (mlops/environments/layers.py)."""

from __future__ import annotations

import json
from pathlib import Path

from mlops.environments import layers
from mlops.environments.layers import MANIFEST, cached_layer, damage


def builder(calls: list[Path]):
    def build(folder: Path) -> None:
        calls.append(folder)
        site = folder / "lib" / "site-packages" / "pkg"
        site.mkdir(parents=True)
        (site / "__init__.py").write_text("x = 1\n")
        (site / "data.bin").write_bytes(b"abc")
        (folder / "layer.json").write_text(json.dumps({"label": "test"}))

    return build


def test_a_layer_that_lost_a_file_is_named_and_built_again(tmp_path, capsys):
    calls: list[Path] = []
    layer = cached_layer(tmp_path / "layer", builder(calls))
    assert (layer / MANIFEST).is_file() and len(calls) == 1
    (layer / "lib/site-packages/pkg/__pycache__").mkdir()  # what its users write: not damage
    (layer / "lib/site-packages/pkg/__pycache__/x.pyc").write_bytes(b"0")
    (layer / "used_by.txt").write_text("job.yml\n")
    assert cached_layer(layer, builder(calls)) == layer and len(calls) == 1
    (layer / "lib/site-packages/pkg/__init__.py").unlink()
    (layer / "lib/site-packages/pkg/data.bin").write_bytes(b"abcd")
    assert damage(layer) == ["lib/site-packages/pkg/__init__.py missing",
                             "lib/site-packages/pkg/data.bin changed"]
    assert cached_layer(layer, builder(calls)) == layer and len(calls) == 1  # checked once
    layers.CHECKED.clear()  # the next run (a new process) checks it before its first use
    cached_layer(layer, builder(calls))
    err = capsys.readouterr().err
    assert f"warning: the cached environment {layer} is damaged (lib/site-packages/pkg/" \
           "__init__.py missing, lib/site-packages/pkg/data.bin changed); building it again" in err
    assert len(calls) == 2 and (layer / "lib/site-packages/pkg/__init__.py").is_file()
    assert damage(layer) == []


def test_a_layer_built_before_manifests_gets_one_and_is_trusted(tmp_path):
    layer = tmp_path / "old"
    (layer / "lib").mkdir(parents=True)
    (layer / "lib" / "m.py").write_text("")
    (layer / "layer.json").write_text("{}")
    assert damage(layer) == [] and (layer / MANIFEST).is_file()
    assert json.loads((layer / MANIFEST).read_text()) == {"lib/m.py": 0}
