"""What a case's run means against what Azure would do with the same spec.

- passed: the outcome Azure has (it completes, and here it completed);
- refused with a named reason: it needs a live service, and the runtime stopped with a line
  that names it (the manifest's `match`);
- fails as Azure fails: Azure fails it, and the run failed for that reason (`match`);
- project defect: anything else: a failure where Azure completes, another failure than Azure's,
  a completion where Azure fails, a run past its timeout, a case whose earlier case failed;
- not run: in the corpus, not runnable here (`skip`), or left out of this run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from corpus.manifest import Case

LINE_ORDER = (re.compile(r"^([A-Za-z_][\w.]*)?(Error|Exception|Exit|Interrupt)\b.*:"),
              re.compile(r"^(error|Error|ERROR)\b"),
              re.compile(r"(Error|Exception|error:|refuse|cannot|can't|not found|No such|Killed)"),
              re.compile(r"[Ff]ailed"))
MAX_REASON = 240
# the runtime's closing lines, which say where things are, not what went wrong
TRAILER = re.compile(r"^(summary|outputs|steps|trials|MLflow run|log tail|log)( \(.*\))?: |"
                     r"^\S+: (Failed|Completed|Canceled) \(")


class Verdict(StrEnum):
    PASSED = "passed"
    REFUSED = "refused with a named reason"
    AZURE = "fails as Azure fails"
    DEFECT = "project defect"
    NOT_RUN = "not run"


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What happened when the case ran."""

    code: int | None = None  # the failing command's exit code (0: every command succeeded)
    stopped: str = ""  # "timeout", "log limit"
    step: str = ""  # the command that failed: setup <spec>, run, start, invoke, batch
    output: str = ""  # the log's tail
    seconds: float = 0.0
    blocked_by: str = ""  # an earlier case that did not complete
    blocked_as_azure: bool = False  # ... and failed as it fails on Azure
    not_run: str = ""  # why it did not run at all (skip, a repository that could not be had)

    @property
    def completed(self) -> bool:
        return self.code == 0 and not self.stopped and not self.blocked_by and not self.not_run


def got(outcome: Outcome) -> str:
    """The run's outcome in a few words, for the matrix."""
    if outcome.not_run:
        return "not run"
    if outcome.blocked_by:
        return f"blocked ({outcome.blocked_by})"
    if outcome.stopped == "timeout":
        return f"timed out ({outcome.seconds:.0f} s)"
    if outcome.stopped:
        return f"stopped ({outcome.stopped})"
    if outcome.code == 0:
        return "completed"
    where = f"{outcome.step}, " if outcome.step not in ("", "run") else ""
    return f"failed ({where}exit {outcome.code})"


def classify(case: Case, outcome: Outcome) -> tuple[Verdict, str]:
    """The verdict and its one-line reason."""
    expect = case.expect
    if outcome.not_run:
        return Verdict.NOT_RUN, outcome.not_run
    if outcome.blocked_by and outcome.blocked_as_azure and expect.outcome == "fails":
        return Verdict.AZURE, expect.reason
    if outcome.blocked_by:
        return Verdict.DEFECT, f"blocked: {outcome.blocked_by} did not complete"
    if outcome.stopped:
        return Verdict.DEFECT, f"{got(outcome)}: {error_line(outcome.output)}"
    if outcome.completed:
        if expect.outcome != "completes":
            return Verdict.DEFECT, f"completed, where Azure would not: {expect.reason}"
        if expect.match and not re.search(expect.match, outcome.output, re.MULTILINE):
            return Verdict.DEFECT, f"completed, but its output lacks {expect.match}: " \
                f"{error_line(outcome.output)}"  # a scorer that answers its own error with 200
        return Verdict.PASSED, expect.reason
    line = error_line(outcome.output)
    if expect.outcome == "completes":
        return Verdict.DEFECT, line
    if not re.search(expect.match, outcome.output, re.MULTILINE):
        return Verdict.DEFECT, f"failed, but not as expected ({expect.match}): {line}"
    if expect.outcome == "fails":
        return Verdict.AZURE, expect.reason
    return Verdict.REFUSED, expect.reason


def error_line(output: str) -> str:
    """The line of the output that best says what went wrong, short: the last Python exception,
    else the last `error:` line, else the last line that sounds like a failure, else the last."""
    lines = [clean(line) for line in output.splitlines()]
    lines = [line for line in lines if line and not line.startswith(("$ ", "File ", "^"))
             and not TRAILER.match(line)]
    for pattern in LINE_ORDER:
        for line in reversed(lines):
            if pattern.search(line):
                return shorten(line)
    return shorten(lines[-1]) if lines else "(no output)"


def clean(line: str) -> str:
    """A log line without the runtime's prefixes ("[step] ", "  | ")."""
    line = re.sub(r"^(\s*\|\s*)+", "", line.strip())
    return re.sub(r"^\[[^\]]{1,80}\]\s*", "", line).strip()


def shorten(line: str) -> str:
    line = re.sub(r"\s+", " ", line)
    return line if len(line) <= MAX_REASON else line[:MAX_REASON - 1] + "…"


PYTHON_SEEN = re.compile(r"(?:on|for) Python (3\.\d+)(?:\.\d+)?")


def python_seen(log_head: str) -> str:
    """The Python the run's environment was built for, as the runtime's log says (else "")."""
    found = PYTHON_SEEN.search(log_head)
    return found.group(1) if found else ""
