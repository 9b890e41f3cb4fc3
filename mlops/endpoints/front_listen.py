"""The front's listening socket: accepts connections while it has descriptors to hold them, and
survives running out.

At most capacity() connections are held (the process's open-file limit, less a reserve for
the deployments' connections, spooled bodies and the state file). Past it, the connections that
wait for a request (idle keep-alive ones first, then those that have sent nothing) are closed to
make room, as nginx reuses its idle connections; when none waits, accepting pauses until one
closes. When accept() fails for want of resources (EMFILE, ENFILE, ENOBUFS, ENOMEM) the failure
is logged (at most once every SAY_EVERY_S seconds, with how many failed since), idle
connections are closed, and accepting pauses with a backoff (0.05 s, doubling to 2 s while it
fails) instead of ending the front.
"""

from __future__ import annotations

import asyncio
import errno
import os
import resource
import socket
import sys
from collections.abc import Callable

STARVED = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
GONE = {errno.ECONNABORTED, errno.EPROTO, errno.EPERM}  # that client left before accept
RESERVE = 192  # descriptors kept for the deployments' connections, spooled bodies, files
BACKOFF_S = (0.05, 2.0)
SAY_EVERY_S = 10.0
BURST = 64  # accepts per wake-up, so a flood cannot starve the connections already held


def capacity() -> int:
    """How many client connections this process can hold with its open-file limit (or as
    FRONT_MAX_CONNECTIONS says, as nginx's worker_connections does)."""
    if os.environ.get("FRONT_MAX_CONNECTIONS"):
        return int(os.environ["FRONT_MAX_CONNECTIONS"])
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = soft if soft != resource.RLIM_INFINITY else 1 << 16
    return max(limit // 4, limit - RESERVE)


def say(line: str) -> None:
    print(f"front: {line}", file=sys.stderr, flush=True)


class Listener:
    """Accepts on `sock` and hands each connection to `take`; `evict(n)` closes up to n
    waiting connections and says how many it closed; `held()` counts those open."""

    def __init__(self, sock: socket.socket, take: Callable[[socket.socket], None], *,
                 evict: Callable[[int], int], held: Callable[[], int], limit: int):
        self.sock, self.take, self.evict, self.held, self.limit = sock, take, evict, held, limit
        self.reading = False
        self.delay = BACKOFF_S[0]
        self.failures = 0  # accept failures not yet logged
        self.said = -SAY_EVERY_S  # when the last was logged (the loop's clock)
        self.retry: asyncio.TimerHandle | None = None

    def start(self) -> None:
        if not self.reading and self.sock.fileno() >= 0:
            asyncio.get_running_loop().add_reader(self.sock, self._ready)
            self.reading = True

    def pause(self) -> None:
        if self.reading:
            asyncio.get_running_loop().remove_reader(self.sock)
            self.reading = False

    def closed_one(self) -> None:
        """A connection closed: room to accept again."""
        if not self.reading and self.retry is None and self.held() < self.limit:
            self.start()

    def settled(self) -> None:
        """A connection accepted before is held now, so it may be closed to make room (while
        it opened, nothing could be): try accepting again."""
        if not self.reading and self.retry is None:
            self.start()

    def _room(self) -> bool:
        over = self.held() + 1 - self.limit
        if over > 0 and self.evict(over) < over:
            self.pause()  # every connection is busy: wait for one to close
            return False
        return True

    def _ready(self) -> None:
        for _ in range(BURST):
            if not self._room():
                return
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:
                if err.errno in GONE:
                    continue
                if err.errno not in STARVED:
                    raise
                self._starved(err)
                return
            self.delay = BACKOFF_S[0]
            self.take(conn)

    def _starved(self, err: OSError) -> None:
        loop = asyncio.get_running_loop()
        self.failures += 1
        freed = self.evict(max(1, self.held() // 10))
        if loop.time() - self.said >= SAY_EVERY_S:
            say(f"accept failed: {errno.errorcode.get(err.errno, err.errno)} ({err.strerror})"
                f" with {self.held()} connections open ({self.failures} failure(s) since the "
                f"last note); closed {freed} idle one(s); retrying in {self.delay:.2f} s, "
                "backing off while it fails")
            self.said, self.failures = loop.time(), 0
        self.pause()
        self.retry = loop.call_later(self.delay, self._resume)
        self.delay = min(self.delay * 2, BACKOFF_S[1])

    def _resume(self) -> None:
        self.retry = None
        self.start()

    def drain(self) -> None:
        """Take what the kernel accepted before the stop (its clients sent their requests to a
        listening front), then close the socket."""
        self.pause()
        if self.retry is not None:
            self.retry.cancel()
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                break
            self.take(conn)
        self.sock.close()
