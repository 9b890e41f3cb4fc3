"""The README's picture is drawn by a kept script, and the committed file is what it draws."""

import re
from pathlib import Path

import draw_runtime  # scripts/ is on the path (conftest)
import pytest

from mlops.runtime import engine

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


def test_the_engine_docstring_lists_the_stages_and_run_folder_the_picture_shows():
    # The picture and the engine's module docstring describe the same stages and folder.
    draw = draw_runtime
    for entry in ("wd/", "inputs/<name>", "outputs/<name>", "log.txt", "status.json"):
        assert any(row[1] == entry for row in draw.TREE)
        assert entry in engine.__doc__
    for stage in draw.STAGES:
        assert f"    {stage.name} " in engine.__doc__
        function = stage.modules.split(":")[0].split(",")[0]
        assert callable(getattr(engine, function)), f"engine.{function} is not a stage"


PAGES = sorted((ROOT / "docs").glob("*.md"))


def table_cells(text: str) -> list[str]:
    """Every cell of every Markdown table (a `|` inside backticks is not a border)."""
    cells = []
    for line in text.splitlines():
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cell, code = "", False
        for char in line.strip()[1:-1]:
            code = not code if char == "`" else code
            if char == "|" and not code:
                cells.append(cell.strip())
                cell = ""
            else:
                cell += char
        cells.append(cell.strip())
    return cells


def test_the_readme_first_screen_has_the_two_commands_and_the_picture():
    screen = "\n".join((ROOT / "README.md").read_text().splitlines()[:80])
    assert "make train-local" in screen and "make test " in screen
    assert "](docs/runtime.svg)" in screen


@pytest.mark.parametrize("page", [ROOT / "README.md", *PAGES], ids=lambda p: p.name)
def test_no_table_cell_runs_past_200_characters(page):
    long = [cell[:60] for cell in table_cells(page.read_text()) if len(cell) > 200]
    assert not long, f"{page.name}: move these to prose or a list: {long}"


def test_every_docs_page_is_linked_from_the_readme_and_every_link_resolves():
    readme = (ROOT / "README.md").read_text()
    assert {p.name for p in PAGES} <= set(re.findall(r"\(docs/([\w-]+\.md)\)", readme))
    for page in [ROOT / "README.md", *PAGES]:
        for target in re.findall(r"\]\(([^)#:]+)\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to {target}"
