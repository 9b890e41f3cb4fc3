"""Draw docs/runtime.svg: the local runtime's five stages and the run folder they fill.

    python scripts/draw_runtime.py            # rewrite docs/runtime.svg
    python scripts/draw_runtime.py --check    # exit 1 if the committed picture is stale

Plain SVG text, no plotting library, so the picture is reviewable in a diff and redrawn by
`make docs`; tests/unit/test_docs.py fails when the committed file differs from what this draws.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from html import escape
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "docs" / "runtime.svg"
WIDTH, BOX_W, BOX_H, GAP, TOP = 1150, 196, 128, 32, 58


@dataclass(frozen=True, kw_only=True)
class Stage:
    name: str
    colour: str
    modules: str  # where it lives: engine.py's stage function and the modules it calls
    lines: tuple[str, ...]


STAGES = (
    Stage(name="resolve", colour="#dbeafe", modules="resolve: binding values placement",
          lines=("inputs and outputs bound", "under the task's folder;", "the command rendered;",
           "ranks placed, debug picked")),
    Stage(name="snapshot", colour="#dcfce7", modules="take_snapshot: snapshot.py",
          lines=("code: copied to wd/,", "minus .amlignore/.gitignore;", "content hash for step",
           "reuse; source never written")),
    Stage(name="environment", colour="#fef9c3", modules="environment: environments/",
          lines=("the spec's packages as", "layers over .venv, cached", "in .cache/envs/; a fresh",
           "top layer per task")),
    Stage(name="launch", colour="#fde2e4", modules="launch_processes: launch environ",
          lines=("the MLflow run; the command", "once per process, RANK,", "MLFLOW_*, AZUREML_*;",
           "status.json, a watchdog")),
    Stage(name="collect", colour="#ede9fe", modules="collect, finish: records",
          lines=("outputs/ flow downstream;", "artifacts and logs to", "MLflow; the outcome into",
           "the run and status.json")),
)
USERS = ("used alike by command jobs, sweep trials, pipeline steps (run_step: reuse), Spark jobs, "
         "parallel nodes, batch runs and the local endpoint (start_service)")

# (indent, entry, what it holds, the stage that writes it)
TREE = (
    (0, "runs/<display name>-<timestamp>/", "one run folder (RUN_DIR= picks it)", None),
    (1, "command.sh", "the command exactly as rendered", "launch"),
    (1, "inputs/<name>", "each data input under a short path, read-only", "resolve"),
    (1, "wd/", "the working directory: a private copy of code:", "snapshot"),
    (2, "outputs/  logs/", "created as on Azure, logged to the MLflow run", "collect"),
    (1, "log.txt", "stdout and stderr of every process", "launch"),
    (1, "status.json", "Running (run id, pid), then the outcome, atomically", "collect"),
    (1, "outputs/<name>", "each output, unless a pipeline binds it elsewhere", "collect"),
    (1, "trials/trial_NNN/", "a sweep's trials: each a folder like this one", "launch"),
    (1, "steps/<node>/", "a pipeline's steps, likewise (reused ones link)", "launch"),
    (0, "mlflow.db", "the local tracking store: trials and steps are child runs", "collect"),
)


def text(x: float, y: float, s: str, *, size: int = 12, weight: str = "normal",
         anchor: str = "start", family: str = "sans-serif") -> str:
    return (f'<text x="{x:g}" y="{y:g}" font-family="{family}" font-size="{size}" '
            f'font-weight="{weight}" text-anchor="{anchor}">{escape(s)}</text>')


def stage_row() -> list[str]:
    left = (WIDTH - 5 * BOX_W - 4 * GAP) / 2
    parts = [text(WIDTH / 2, 30, "mlops/runtime/engine.py: how a spec runs on this machine",
                  size=16, weight="bold", anchor="middle")]
    for i, stage in enumerate(STAGES):
        x = left + i * (BOX_W + GAP)
        parts.append(f'<rect x="{x:g}" y="{TOP}" width="{BOX_W}" height="{BOX_H}" rx="8" '
                     f'fill="{stage.colour}" stroke="#475569"/>')
        parts.append(text(x + BOX_W / 2, TOP + 22, f"{i + 1}. {stage.name}", size=14, weight="bold",
                          anchor="middle"))
        parts.append(text(x + BOX_W / 2, TOP + 40, stage.modules, size=10, weight="normal",
                          anchor="middle", family="monospace"))
        parts += [text(x + 10, TOP + 60 + 17 * j, line, size=11)
                  for j, line in enumerate(stage.lines)]
        if i:
            parts.append(f'<line x1="{x - GAP + 3:g}" y1="{TOP + BOX_H / 2}" x2="{x - 4:g}" '
                         f'y2="{TOP + BOX_H / 2}" stroke="#334155" stroke-width="2" '
                         'marker-end="url(#arrow)"/>')
    parts.append(text(WIDTH / 2, TOP + BOX_H + 26, USERS, size=12, weight="normal",
                      anchor="middle"))
    return parts


def run_folder(top: float) -> list[str]:
    colour = {stage.name: stage.colour for stage in STAGES}
    parts = [f'<rect x="20" y="{top:g}" width="{WIDTH - 40}" height="{28 + 22 * len(TREE)}" '
             'rx="8" fill="#f8fafc" stroke="#94a3b8"/>']
    for row, (indent, entry, what, stage) in enumerate(TREE):
        y = top + 26 + 22 * row
        if stage:
            parts.append(f'<rect x="{40 + 24 * indent}" y="{y - 14:g}" '
                         f'width="{8 * len(entry) + 8}" height="19" rx="4" '
                         f'fill="{colour[stage]}"/>')
        parts.append(text(44 + 24 * indent, y, entry, size=13, weight="bold", family="monospace"))
        parts.append(text(440, y, what, size=12))
        if stage:
            parts.append(text(WIDTH - 40, y, stage, size=11, weight="normal", anchor="end"))
    return parts


def render() -> str:
    top = TOP + BOX_H + 50
    height = top + 28 + 22 * len(TREE) + 20
    body = stage_row() + run_folder(top)
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:g}" '
            f'viewBox="0 0 {WIDTH} {height:g}">\n'
            '<defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="7" refY="4" '
            'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#334155"/></marker></defs>\n'
            f'<rect width="{WIDTH}" height="{height:g}" fill="white"/>\n')
    return head + "\n".join(body) + "\n</svg>\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if docs/runtime.svg is stale")
    args = parser.parse_args(argv)
    drawn = render()
    if args.check:
        if not OUT.is_file() or OUT.read_text() != drawn:
            print(f"{OUT} is stale: run make docs", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(drawn)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
