"""Benchmark pipeline step reuse: `make pipeline-local` run three times, side by side.

    python scripts/bench_reuse.py [--epochs 5]

1. first: every step runs (fresh runs folder, so nothing can be reused);
2. again: the same pipeline, unchanged: every step is reused;
3. changed: only the register step's threshold (inputs.min_val_acc) differs: only it reruns.
Target (issue 18): the unchanged rerun takes at most 10% of the first run's time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pipeline(run_dir: Path, epochs: int, *sets: str) -> tuple[float, dict[str, str]]:
    started = time.perf_counter()
    subprocess.run(["make", "--no-print-directory", "pipeline-local", f"RUN_DIR={run_dir}",
                    f"EPOCHS={epochs}", f"SET={' '.join(sets)}"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    steps = {p.parent.name: json.loads(p.read_text())["status"]
             for p in sorted((run_dir / "steps").glob("*/status.json"))}
    return seconds, steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-reuse-") as tmp:
        runs = Path(tmp) / "runs"
        first = pipeline(runs / "first", args.epochs)
        again = pipeline(runs / "again", args.epochs)
        changed = pipeline(runs / "changed", args.epochs, "inputs.min_val_acc=0.4")
    for name, (seconds, steps) in (("first", first), ("again", again), ("changed", changed)):
        print(f"{name:<8}{seconds:8.1f} s   " + ", ".join(f"{k} {v}" for k, v in steps.items()))
    ratio = again[0] / first[0]
    print(f"\nunchanged rerun / first run: {ratio:.3f}   target <= 0.10: "
          f"{'met' if ratio <= 0.10 else 'not met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
