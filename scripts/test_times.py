"""What each test costs, from the lines `MLOPS_TEST_TIMES=<file> make test` appends (tests/
conftest.py: test id, CPU seconds, wall seconds): totals, each module's sum and the costliest
tests, as markdown tables.

    python scripts/test_times.py <file> [--top 10]
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Cost:
    test: str
    cpu: float
    wall: float


def read(path: Path) -> list[Cost]:
    """Each well-formed line of the file; a line a killed worker cut short is left out."""
    costs = []
    with open(path, newline="") as handle:
        for row in csv.reader(handle, delimiter="\t"):
            try:
                costs.append(Cost(row[0], float(row[1]), float(row[2])))
            except (IndexError, ValueError):
                continue
    return costs


def by_module(costs: list[Cost]) -> list[tuple[str, int, float, float]]:
    """(module, tests, CPU, wall) for each module, costliest CPU first."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for cost in costs:
        entry = sums[cost.test.split("::")[0]]
        entry[0] += 1
        entry[1] += cost.cpu
        entry[2] += cost.wall
    return sorted(((m, int(n), c, w) for m, (n, c, w) in sums.items()), key=lambda r: -r[2])


def report(costs: list[Cost], top: int) -> str:
    lines = [f"{len(costs)} tests, {sum(c.cpu for c in costs):.0f} CPU s, "
             f"{sum(c.wall for c in costs):.0f} wall s summed over workers", "",
             "| module | tests | CPU s | wall s |", "|---|---|---|---|"]
    lines += [f"| {m} | {n} | {c:.1f} | {w:.1f} |" for m, n, c, w in by_module(costs)[:top]]
    lines += ["", "| test | CPU s | wall s |", "|---|---|---|"]
    lines += [f"| {c.test} | {c.cpu:.1f} | {c.wall:.1f} |"
              for c in sorted(costs, key=lambda c: -c.cpu)[:top]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args(argv)
    try:
        costs = read(args.file)
    except OSError as err:
        parser.exit(2, f"error: cannot read {args.file}: {err.strerror}\n")
    print(report(costs, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
