"""Validate Azure ML specs offline, before anything is uploaded (make validate).

    python -m mlops.validate [spec.yml ...]     (no arguments: every spec of the repo)

Each problem prints as `file:line: key: problem. Fix: ...`; the layers are in
mlops/checks/validation.py. Errors are what Azure would refuse (exit 1); warnings never block.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from mlops import exit_with
from mlops.checks.validation import validate
from mlops.specs import discover


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Validate Azure ML YAML specs offline.")
    parser.add_argument("specs", nargs="*", help="spec files (default: every spec of the repo); "
                        "a file without $schema is typed as a job by its type:, as az ml job "
                        "create types it")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    paths = [Path(p) for p in args.specs] or discover()
    findings = validate(paths)
    for finding in findings:
        print(finding)
    errors = sum(f.is_error for f in findings)
    warnings = len(findings) - errors
    seconds = time.perf_counter() - started
    status = (f"{errors} error(s), {warnings} warning(s)" if findings else "all valid")
    print(f"validated {len(paths)} spec(s) in {seconds:.1f}s: {status}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    exit_with(main)
