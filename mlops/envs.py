"""Cached local environments (layers on .venv): list them, or remove them.

    python -m mlops.envs list | clean        (make envs / make clean-envs)

How a job's environment is built: mlops/environments/activation.py.
"""

from __future__ import annotations

import argparse

from mlops import exit_with
from mlops.environments import cache


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Cached local environments (layers on .venv).")
    parser.add_argument("action", choices=["list", "clean"])
    args = parser.parse_args(argv)
    if args.action == "list":
        print("\n".join(cache.describe()))
    else:
        print(f"removed {cache.clean()}")
    return 0


if __name__ == "__main__":
    exit_with(main)
