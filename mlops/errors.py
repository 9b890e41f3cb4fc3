"""The one error family of the local tooling, and its two kinds.

- `LocalRunError` (and its kinds, such as `mlops.specs.SpecError`): **the input is wrong**: a spec
  Azure would refuse, a flag, a path, a name, a run folder in use. Nothing has run; the message
  says what to change; every front door prints it and exits INPUT_ERROR (2).
- `MachineError`: **the machine stopped it**: the network, a cache, a compiler, the disk, an
  interpreter that cannot be found or fetched. The input may be fine; the message says what to
  do about the machine; every front door prints it and exits MACHINE_ERROR (1).

A job, step, batch run or server that started and then failed is neither: its front door exits
with its status (1, or the job's own code).
"""

INPUT_ERROR = 2
MACHINE_ERROR = 1
NOT_FOUND = 3  # az's exit code for a resource that does not exist


class LocalError(Exception):
    """The family: every error the tooling raises on purpose is one of its two kinds."""

    exit_code = INPUT_ERROR


class LocalRunError(LocalError):
    """The input cannot run locally (or Azure would refuse it); the message names the spec, the
    key and the fix."""

    exit_code = INPUT_ERROR


class MachineError(LocalError):
    """This machine stopped the work (network, cache, compiler, disk, interpreter); the message
    says what to do about it."""

    exit_code = MACHINE_ERROR


class NotFound(LocalRunError):
    """What the input names does not exist (a job, an endpoint, an asset): `az`'s exit 3."""

    exit_code = NOT_FOUND
