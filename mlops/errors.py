"""The one error type of local runs: the message names the spec, the key and the fix."""


class LocalRunError(Exception):
    """A spec cannot run locally (or Azure would refuse it); nothing has started yet."""
