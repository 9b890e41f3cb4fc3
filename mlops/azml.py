"""`azml`: az ml's verbs on this machine, in any repository (`azml job create -f spec.yml`).

    azml job create -f jobs/train.yml --set inputs.epochs=1 --stream
    azml job show -n <name> --query status -o tsv
    azml model list

The command lives in mlops/cli (its verbs, az's output formats) over mlops.api.Session;
docs/azml.md maps every az ml verb to its local twin.
"""

from __future__ import annotations

from mlops import exit_with
from mlops.cli import run


def main(argv: list[str] | None = None) -> int:
    return run(argv)


def entry() -> None:
    """The console script's entry point (`azml`)."""
    exit_with(main)


if __name__ == "__main__":
    exit_with(main)
