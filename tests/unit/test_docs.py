"""The README's picture is drawn by a kept script, and the committed file is what it draws."""

from pathlib import Path

import draw_runtime  # scripts/ is on the path (conftest)

import mlops.runtime

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_runtime_picture_is_what_the_script_draws():
    draw = draw_runtime
    assert draw.main(["--check"]) == 0, "docs/runtime.svg is stale: run make docs"
    assert "docs/runtime.svg" in (ROOT / "README.md").read_text()


def test_every_run_folder_entry_names_a_stage_of_the_runtime():
    draw = draw_runtime
    stages = {stage.name for stage in draw.STAGES}
    assert [s.name for s in draw.STAGES] == ["resolve", "snapshot", "environment", "launch",
                                             "collect"]
    assert {row[3] for row in draw.TREE if row[3]} <= stages
    svg = draw.render()
    assert svg.startswith("<svg") and svg.count("<rect") >= len(draw.STAGES) + len(draw.TREE)


def test_the_runtime_docstring_lists_the_run_folder_the_picture_shows():
    # The picture and mlops/runtime's module docstring describe the same folder.
    draw = draw_runtime
    for entry in ("wd/", "inputs/<name>", "outputs/<name>", "log.txt", "status.json"):
        assert any(row[1] == entry for row in draw.TREE)
        assert entry in mlops.runtime.__doc__
