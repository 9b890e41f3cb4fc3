"""Repo policy for GitHub workflows, beside actionlint and zizmor (make lint-workflows).

    python -m mlops.workflow_lint .github/workflows/*.yml

The rules: mlops/checks/workflows.py. Exit 1 when any workflow breaks one.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mlops import exit_with
from mlops.checks.workflows import check


def main(argv: list[str] | None = None) -> int:
    paths = [Path(p) for p in (argv if argv is not None else sys.argv[1:])]
    problems = [p for path in paths for p in check(path)]
    for problem in problems:
        print(problem)
    print(f"workflow policy: {len(paths)} file(s), {len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    exit_with(main)
