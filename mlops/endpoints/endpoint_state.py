"""A local online endpoint's state, `endpoint.json` in its folder: what Azure keeps for an
endpoint (auth mode, keys, tokens, traffic, mirror traffic) and, for each deployment, the server
that runs it. The commands (local_endpoint.py) write it under the endpoint's lock; the front
(front.py) reads it whenever it changes. Standard library only: the front imports it by path.

Written whole to a temporary file and renamed over the old one, readable by this user alone
(it holds the keys), so a reader sees the old state or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import stat
import time
import typing
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from enum import StrEnum
from pathlib import Path

STATE_FILE = "endpoint.json"
TOKEN_TTL_S = float(os.environ.get("LOCAL_TOKEN_TTL_S", str(24 * 3600)))
MAX_STATE = 16 * 2**20  # bytes: a longer endpoint.json is not one this code wrote


class DamagedState(ValueError):
    """endpoint.json that cannot be read as an endpoint's state."""


class AuthMode(StrEnum):
    """An online endpoint's auth_mode (Azure's default: key), and NONE for AUTH=none."""

    KEY = "key"
    AML_TOKEN = "aml_token"
    AAD_TOKEN = "aad_token"
    NONE = "none"

    @classmethod
    def of_spec(cls, value: str) -> AuthMode:
        """auth_mode as az ml's loader reads it: camel case to snake case, then lower case
        (Key, KEY, AMLToken, amlToken and aml_token all load), else ValueError."""
        snake = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", value)
        return cls(re.sub("([a-z0-9])([A-Z])", r"\1_\2", snake).lower())


@dataclass(kw_only=True)
class Token:
    """An aml_token (or the local stand-in for a Microsoft Entra token), as get-credentials
    shows one: times in seconds since the epoch, UTC."""

    accessToken: str  # noqa: N815 - get-credentials' JSON field names
    expiryTimeUtc: float  # noqa: N815
    refreshAfterTimeUtc: float  # noqa: N815
    tokenType: str = "Bearer"  # noqa: N815

    @classmethod
    def issue(cls, now: float | None = None, ttl: float = TOKEN_TTL_S) -> Token:
        now = time.time() if now is None else now
        return cls(accessToken=secrets.token_urlsafe(48), expiryTimeUtc=now + ttl,
                   refreshAfterTimeUtc=now + ttl / 2)


@dataclass(kw_only=True)
class Slot:
    """One deployment of the endpoint: its server, and the request rules the front applies."""

    name: str
    port: int  # its server's, on 127.0.0.1 (the front's port is the endpoint's)
    pid: int  # the server's process group
    folder: str  # its run folder: snapshot, environment layer, log.txt
    spec: str  # the deployment spec it was started from
    model: str  # what it serves, for `show`
    environment: str  # the environment it runs in, as the log names it
    max_body: int  # bytes; a longer body is answered 413 before it is read
    timeout_ms: int  # request_settings.request_timeout_ms (0: none, while debugged)
    max_pending: int  # 2 * max_concurrent_requests_per_instance * instance_count
    sets: list[str] = field(default_factory=list)  # az's --set over `spec` (name, endpoint)

    @property
    def log(self) -> Path:
        return Path(self.folder) / "log.txt"


@dataclass(kw_only=True)
class EndpointState:
    name: str
    auth_mode: AuthMode = AuthMode.KEY
    port: int = 0
    spec: str = ""  # the endpoint spec, when one was found
    front_pid: int = 0
    keys: dict[str, str] = field(default_factory=dict)  # primaryKey, secondaryKey
    tokens: list[Token] = field(default_factory=list)  # the valid ones, newest last
    traffic: dict[str, int] = field(default_factory=dict)
    mirror_traffic: dict[str, int] = field(default_factory=dict)
    deployments: dict[str, Slot] = field(default_factory=dict)

    @classmethod
    def read(cls, folder: Path) -> EndpointState | None:
        """The state in `folder` (None when it has none); DamagedState when the file is not
        an endpoint's state: not JSON, a field missing, of the wrong type or out of range."""
        try:
            data = json.loads(_read(folder / STATE_FILE))
            state = typed(cls, data, "")
            state.check()
            return state
        except FileNotFoundError:
            return None
        except (ValueError, TypeError, KeyError, RecursionError) as err:
            raise DamagedState(f"{folder / STATE_FILE} is damaged ({err}); `make stop-local "
                               f"ENDPOINT={folder.name}` stops the servers its folder records "
                               "and sets it aside") from None

    def check(self) -> None:
        """ValueError for what a well-typed state cannot hold."""
        ports = [self.port, *(s.port for s in self.deployments.values())]
        if any(not 0 <= port <= 65535 for port in ports):
            raise ValueError(f"a port out of range: {ports}")
        for name, slot in self.deployments.items():
            if name != slot.name or min(slot.pid, slot.max_body, slot.timeout_ms) < 0 or \
                    slot.max_pending < 1:
                raise ValueError(f"deployment {name!r}: {slot}")
        weights = [*self.traffic.values(), *self.mirror_traffic.values()]
        if any(not 0 <= weight <= 100 for weight in weights):
            raise ValueError(f"a weight out of 0-100: {weights}")

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        data = asdict(self)
        data["auth_mode"] = self.auth_mode.value
        tmp = folder / f".{STATE_FILE}.{os.getpid()}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                json.dump(data, out, indent=1)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, folder / STATE_FILE)
        except OSError as err:  # a full disk, a protected file: no half-written copy is left,
            with contextlib.suppress(OSError):  # and the error names the state it was for
                tmp.unlink()
            raise OSError(err.errno, err.strerror, str(folder / STATE_FILE)) from err

    def ensure_credentials(self, now: float | None = None) -> None:
        """Keys for key auth, kept for the endpoint's life (as Azure keeps them until they are
        regenerated); a fresh token once the newest is past its refresh time."""
        now = time.time() if now is None else now
        if not self.keys:
            self.keys = {"primaryKey": secrets.token_urlsafe(24),
                         "secondaryKey": secrets.token_urlsafe(24)}
        self.tokens = [t for t in self.tokens if t.expiryTimeUtc > now]
        if not self.tokens or self.tokens[-1].refreshAfterTimeUtc <= now:
            self.tokens.append(Token.issue(now))

    def accepts(self, bearer: str, now: float | None = None) -> bool:
        """Whether `bearer` (the Authorization header's token) opens the endpoint."""
        if self.auth_mode == AuthMode.NONE:
            return True
        if not bearer.isascii():  # no key or token is (compare_digest refuses such text)
            return False
        if self.auth_mode == AuthMode.KEY:
            return any(secrets.compare_digest(bearer, key) for key in self.keys.values())
        now = time.time() if now is None else now
        return any(secrets.compare_digest(bearer, t.accessToken) for t in self.tokens
                   if t.expiryTimeUtc > now)

    def credential(self) -> str:
        """What `make invoke-local` sends: the primary key, or the newest token."""
        if self.auth_mode == AuthMode.KEY:
            return self.keys.get("primaryKey", "")
        return self.tokens[-1].accessToken if self.tokens else ""


def _read(path: Path) -> bytes:
    """The file's bytes; ValueError for what is not a regular file (a FIFO would block the
    reader, a device never end; a folder, a socket, a symbolic link that loops) or is longer
    than any state written here."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            raise ValueError(f"not a regular file: {err.strerror}") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # (before fdopen, which refuses a folder)
        os.close(fd)
        raise ValueError("not a regular file")
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_STATE + 1)
    if len(data) > MAX_STATE:
        raise ValueError(f"over {MAX_STATE} bytes")
    return data


def typed(hint, value, where: str):
    """`value` (from JSON) as the type `hint` names: dataclasses from objects (each field
    typed; keys it does not know, from a newer tool, ignored), enums from their values;
    TypeError or ValueError otherwise."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if is_dataclass(hint):
        if not isinstance(value, dict):
            raise TypeError(f"{where or 'the state'}: {type(value).__name__}, not an object")
        hints = typing.get_type_hints(hint)
        known = {f.name for f in fields(hint)}
        return hint(**{k: typed(hints[k], v, f"{where}.{k}".lstrip(".")) for k, v in
                       value.items() if k in known})
    if origin is dict and isinstance(value, dict):
        return {typed(args[0], k, where): typed(args[1], v, f"{where}[{k!r}]")
                for k, v in value.items()}
    if origin is list and isinstance(value, list):
        return [typed(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(hint, type) and issubclass(hint, StrEnum) and isinstance(value, str):
        return hint(value)
    exact = {int: (int,), float: (int, float), str: (str,)}.get(hint, ())
    if isinstance(value, exact) and not isinstance(value, bool):
        return value
    wanted = getattr(hint, "__name__", hint)
    raise TypeError(f"{where}: {type(value).__name__} {value!r:.40}, not {wanted}")
