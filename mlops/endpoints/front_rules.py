"""Azure's endpoint rules as the front applies them to one request, in Azure's order: auth,
which deployment (header, else traffic; a copy to the mirror), how many at once. The state they
read is endpoint.json, re-read whenever it changes; a damaged or wrongly typed one is refused
and the last good state kept (said once in the front's log).
"""

from __future__ import annotations

import os
import random
import secrets
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

if __package__:
    from mlops.endpoints import front_wire as wire
    from mlops.endpoints.endpoint_state import (
        STATE_FILE,
        AuthMode,
        DamagedState,
        EndpointState,
        Slot,
    )
else:  # started by its path (front.py): this folder is first on sys.path
    import front_wire as wire  # type: ignore[no-redef]
    from endpoint_state import (  # type: ignore[no-redef]
        STATE_FILE,
        AuthMode,
        DamagedState,
        EndpointState,
        Slot,
    )

# Azure's 401 bodies for key auth, as clients see them (a missing or malformed header, a wrong
# key); Azure documents no body for the token modes, so theirs read the same way locally.
UNAUTHORIZED = {AuthMode.KEY: ("key_auth_bad_header_forbidden", "key_auth_access_denied"),
                AuthMode.AML_TOKEN: ("aml_token_auth_bad_header_forbidden",
                                     "aml_token_auth_access_denied"),
                AuthMode.AAD_TOKEN: ("aad_token_auth_bad_header_forbidden",
                                     "aad_token_auth_access_denied")}


@dataclass(frozen=True)
class Route:
    slot: Slot
    mirror: Slot | None = None


@dataclass(frozen=True, kw_only=True)
class Draws:
    """What a request's rules read, worked out once per state, not per request: the
    deployments with a positive weight, their weights, the mirrors and their percentages, a
    route to each deployment, and the keys as bytes (key auth)."""

    names: list[str]
    weights: list[int]
    mirrors: list[tuple[Slot, int]]
    routes: dict[str, Route]
    keys: tuple[bytes, ...]

    @classmethod
    def of(cls, state: EndpointState) -> Draws:
        live = [(n, p) for n, p in state.traffic.items() if p > 0 and n in state.deployments]
        return cls(names=[n for n, _ in live], weights=[p for _, p in live],
                   mirrors=[(state.deployments[n], p) for n, p in state.mirror_traffic.items()
                            if n in state.deployments],
                   routes={n: Route(slot) for n, slot in state.deployments.items()},
                   keys=tuple(key.encode() for key in state.keys.values() if key.isascii()))


def say(line: str) -> None:
    print(f"front: {line}", file=sys.stderr, flush=True)


class Router:
    """The endpoint's state as endpoint.json says it now, and the requests in flight."""

    def __init__(self, folder: Path, state: EndpointState):
        self.file = folder / STATE_FILE
        self.path = str(self.file)
        self.state = state
        self.seen = self._stamp()
        self.pending: dict[str, int] = {}
        self.draws = Draws.of(state)

    @classmethod
    def open(cls, folder: Path) -> Router:
        """The front's router, from the state the endpoint starts with (DamagedState when it
        is damaged, FileNotFoundError when there is none)."""
        state = EndpointState.read(folder)
        if state is None:
            raise FileNotFoundError(folder / STATE_FILE)
        return cls(folder, state)

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_ino, stat.st_size

    def current(self) -> EndpointState:
        """The newest good state (the last good one, while the file is damaged or gone):
        endpoint.json is stat'ed for every request, and read again when it changed."""
        try:
            stat = os.stat(self.path)
            stamp = stat.st_mtime_ns, stat.st_ino, stat.st_size
        except OSError:
            stamp = None
        if stamp == self.seen:
            return self.state
        self.seen = stamp
        if stamp is None:
            say(f"{self.file} is gone; keeping the last good state")
            return self.state
        try:
            state = EndpointState.read(self.file.parent)
        except (DamagedState, OSError) as err:
            say(f"{err}; keeping the last good state")
            return self.state
        if state is not None:
            self.state, self.draws = state, Draws.of(state)
        return self.state

    def reread(self) -> None:
        """Read endpoint.json at the next request, changed or not (SIGHUP)."""
        self.seen = (-1, -1, -1)

    def authorize(self, fields: dict[bytes, bytes], state: EndpointState | None = None) -> None:
        """401 unless the request's Authorization opens the endpoint (`state`: as read for
        this request; the current one by default)."""
        state = state or self.current()
        if state.auth_mode == AuthMode.NONE:
            return
        missing, wrong = UNAUTHORIZED[state.auth_mode]
        value = fields.get(b"authorization", b"")
        if value.isascii():  # read as bytes (llhttp lets no other space through): sooner
            scheme, _, token = value.partition(b" ")
            token = token.strip()
            if scheme.lower() != b"bearer" or not token:
                raise wire.Refused(401, missing, text=True)
            if state.auth_mode == AuthMode.KEY:
                for key in (self.draws if state is self.state else Draws.of(state)).keys:
                    if secrets.compare_digest(token, key):
                        return
                raise wire.Refused(401, wrong, text=True)
            bearer = token.decode()
        else:
            scheme, _, bearer = value.decode("latin-1").partition(" ")
            bearer = bearer.strip(" \t")  # HTTP's own spaces: a no-break space is the token's
            if scheme.lower() != "bearer" or not bearer:
                raise wire.Refused(401, missing, text=True)
        if not state.accepts(bearer):
            raise wire.Refused(401, wrong, text=True)

    def route(self, fields: dict[bytes, bytes], state: EndpointState | None = None) -> Route:
        state = state or self.current()
        named = fields.get(b"azureml-model-deployment")
        if named is not None:
            named = named.decode("latin-1").strip(" \t")
        if named:  # straight to it, whatever the weights; never mirrored
            if named not in state.deployments:
                raise wire.Refused(404, f"endpoint {state.name} has no deployment {named!r}")
            return Route(state.deployments[named])
        draws = self.draws if state is self.state else Draws.of(state)
        if not draws.names:
            raise wire.Refused(404, f"endpoint {state.name} doesn't have any valid deployment "
                                    "with positive weight")
        name = draws.names[0] if len(draws.names) == 1 else \
            random.choices(draws.names, draws.weights)[0]
        if draws.mirrors:
            mirror = next((slot for slot, p in draws.mirrors if random.random() * 100 < p),
                          None)
            if mirror is not None:
                return Route(state.deployments[name], mirror)
        return draws.routes[name]

    def enter(self, slot: Slot) -> None:
        """One more of the deployment's pending requests (429 when it has its most)."""
        pending = self.pending.get(slot.name, 0)
        if pending >= slot.max_pending:
            raise wire.Refused(429, f"too many pending requests for {slot.name}: at most "
                                    f"{slot.max_pending} at once (2 * max_concurrent_requests_"
                                    "per_instance * instance_count)")
        self.pending[slot.name] = pending + 1

    def leave(self, slot: Slot) -> None:
        self.pending[slot.name] -= 1

    @contextmanager
    def admitted(self, slot: Slot) -> Iterator[None]:
        """`with router.admitted(slot):` one of the deployment's pending requests."""
        self.enter(slot)
        try:
            yield
        finally:
            self.leave(slot)
