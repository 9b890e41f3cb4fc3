"""What a rerun asks for (local conveniences: Azure has no such flags): `--force-rerun`,
`--explain`, and part of a pipeline: `--from <step>` runs that step and every step downstream
of it, taking the other steps' outputs from their last run; `--only <step>[,<step>]` runs just
those, their inputs from the last run, and leaves out what is downstream of them. Steps are
named as DEBUG= names them: a step by its name, a nested one by its path (`outer/train`); a
pipeline node names every step in it. mlops/orchestrators/subset.py plans a pipeline's steps.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from enum import StrEnum

from mlops.errors import LocalRunError

Address = tuple[str, ...]


class Choice(StrEnum):
    """What a selection makes of one step."""

    RUN = "run"  # named, or downstream of a named step (--from): runs whatever its key
    TAKE = "take"  # left out: its outputs from its last run
    SKIP = "skip"  # left out, downstream of a step that runs (--only), or never run: not run


@dataclass(kw_only=True)
class Selection:
    """--from or --only, and (once planned) what it makes of each step."""

    flag: str  # "--from" or "--only"
    paths: tuple[Address, ...]
    choices: dict[Address, Choice] = field(default_factory=dict)

    @classmethod
    def parse(cls, start: str | None, only: str | None) -> Selection | None:
        if (start or "").strip() and (only or "").strip():
            raise LocalRunError("--from and --only (FROM= and ONLY=) together: give one")
        text = (start or only or "").strip()
        if not text:
            return None
        paths = tuple(tuple(name for name in part.strip().split("/") if name)
                      for part in text.split(",") if part.strip("/ "))
        return cls(flag="--from" if (start or "").strip() else "--only", paths=paths)

    @property
    def label(self) -> str:
        return f"{self.flag} {','.join('/'.join(path) for path in self.paths)}"

    def check(self, addresses: list[Address]) -> None:
        """Refuse, before anything runs, a path that names no step or pipeline node."""
        unknown = [path for path in self.paths if path not in addresses]
        if unknown or not self.paths:
            names = ", ".join("/".join(a) for a in addresses) or "none"
            raise LocalRunError(f"{self.flag} {','.join('/'.join(p) for p in unknown)}: no such "
                                f"step in this pipeline; its steps: {names}")

    def names(self, address: Address) -> bool:
        """Whether a named path is this step, or a pipeline node above it."""
        return any(address[:len(path)] == path for path in self.paths)

    def choice(self, address: Address) -> Choice | None:
        return self.choices.get(address)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--force-rerun, --explain, --from and --only, the same on every front door that runs
    pipelines."""
    parser.add_argument("--force-rerun", action="store_true",
                        help="run every pipeline step, even where an earlier one can be reused")
    parser.add_argument("--explain", action="store_true",
                        help="print each step's whole reuse-key difference from its nearest "
                             "earlier run")
    parser.add_argument("--from", dest="from_step", metavar="STEP",
                        help="rerun a pipeline from this step (and what is downstream of it), "
                             "the others' outputs from their last run (local only)")
    parser.add_argument("--only", dest="only_steps", metavar="STEP[,STEP]",
                        help="rerun just these pipeline steps, their inputs from the last run "
                             "(local only)")
