"""The one error family of the local tooling, and its exit-code rule.

A `LocalRunError` (and its kind `mlops.specs.SpecError`) means the input is wrong: a spec Azure
would refuse, a flag, a path, a run folder in use. Nothing has run; every front door prints the
message and exits INPUT_ERROR. A job, step, batch run or server that started and then failed is
not an error of this family: its front door exits with its status (1, or the job's own code).
"""

INPUT_ERROR = 2


class LocalRunError(Exception):
    """The input cannot run locally (or Azure would refuse it); the message names the spec, the
    key and the fix."""
