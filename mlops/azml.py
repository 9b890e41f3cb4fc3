"""`azml`: az ml's verbs on this machine, in any repository (`azml job create -f spec.yml`).

    azml job create -f jobs/train.yml --set inputs.epochs=1 --stream
    azml job show -n <name> --query status -o tsv
    azml model list

The command lives in mlops/cli (its verbs, az's output formats) over mlops.api.Session;
docs/azml.md maps every az ml verb to its local twin.
"""

from __future__ import annotations

import sys

from mlops import exit_with


def main(argv: list[str] | None = None) -> int:
    from mlops.cli import run  # its imports (most of a second) inside entry()'s Ctrl-C handling

    return run(argv)


def entry() -> None:
    """The console script's entry point (`azml`): Ctrl-C at any moment, its imports included,
    ends it with 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM) and no traceback,
    as a shell reports an interrupted command."""
    try:
        exit_with(main)
    except KeyboardInterrupt as err:
        sys.exit(128 + getattr(err, "signum", 2))


if __name__ == "__main__":
    exit_with(main)
