"""The front's accept loop (mlops/endpoints/front_listen.py) when the process runs out of
descriptors or memory, with a stand-in socket whose accept() fails as the kernel's does: the
failure is logged, idle connections are closed, accepting backs off and then goes on."""

from __future__ import annotations

import asyncio
import errno
import socket

import pytest

from mlops.endpoints import front_listen


class Starved:
    """A listening socket's stand-in: accept() fails with `errors` first, then hands out
    connections (real sockets, so the loop can watch the descriptor)."""

    def __init__(self, errors: list[int]):
        self.real = socket.socket()
        self.real.bind(("127.0.0.1", 0))
        self.real.listen()
        self.errors = errors
        self.ready = socket.create_connection(self.real.getsockname())  # readable from now on
        self.handed = 0

    def fileno(self) -> int:
        return self.real.fileno()

    def accept(self):
        if self.errors:
            code = self.errors.pop(0)
            raise OSError(code, f"fake {errno.errorcode[code]}")
        if self.handed:
            raise BlockingIOError
        self.handed += 1
        return self.real.accept()

    def close(self) -> None:
        self.ready.close()
        self.real.close()


async def until_taken(listener, taken: list, tries: int) -> None:
    """Up to `tries` looks 10 ms apart for a connection the listener handed over; then drained."""
    for _ in range(tries):
        if taken:
            break
        await asyncio.sleep(0.01)
    listener.drain()


def ran(run, sock, taken: list) -> None:
    """`run` to its end, then every socket it left open closed."""
    asyncio.run(run())
    for conn in taken:
        conn.close()
    sock.close()


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM])
def test_accept_survives_running_out_and_says_so(code, capsys, monkeypatch):
    monkeypatch.setattr(front_listen, "BACKOFF_S", (0.01, 0.04))
    sock, taken, evicted = Starved([code] * 4), [], []

    async def run() -> None:
        listener = front_listen.Listener(sock, taken.append, held=lambda: 3, limit=100,
                                         evict=lambda n: evicted.append(n) or 0)
        listener.start()
        await until_taken(listener, taken, 500)

    ran(run, sock, taken)
    assert len(taken) == 1  # it went on accepting
    assert len(evicted) == 4  # each failure closed idle connections first
    err = capsys.readouterr().err
    assert err.count("accept failed") == 1 and errno.errorcode[code] in err  # said once


def test_at_capacity_idle_connections_make_room_or_accepting_waits():
    sock, taken = Starved([]), []
    held, evicted = [5], []

    def evict(count: int) -> int:
        evicted.append(count)
        return 0  # none waits: every connection is busy

    async def run() -> front_listen.Listener:
        listener = front_listen.Listener(sock, taken.append, held=lambda: held[0], limit=5,
                                         evict=evict)
        listener.start()
        await asyncio.sleep(0.05)
        assert not taken and not listener.reading  # paused, nothing accepted
        held[0] = 4
        listener.closed_one()  # one closed: room again
        for _ in range(100):
            if taken:
                break
            await asyncio.sleep(0.01)
        listener.drain()
        return listener

    asyncio.run(run())
    for conn in taken:
        conn.close()
    sock.close()
    assert evicted == [1] and len(taken) == 1


def test_at_capacity_a_connection_still_opening_makes_room_once_it_is_held():
    sock, taken = Starved([]), []
    opening, waiting = [5], [0]  # accepted and not yet held; held and waiting for a request

    def evict(count: int) -> int:  # closes connections that wait for a request
        closed = min(count, waiting[0])
        waiting[0] -= closed
        return closed

    async def run() -> None:
        listener = front_listen.Listener(sock, taken.append, limit=5, evict=evict,
                                         held=lambda: opening[0] + waiting[0] + len(taken))
        listener.start()
        await asyncio.sleep(0.05)
        assert not taken and not listener.reading  # all five still opening: none to close
        opening[0], waiting[0] = 0, 5
        listener.settled()  # they are held now: one can be closed to make room
        await until_taken(listener, taken, 100)

    ran(run, sock, taken)
    assert len(taken) == 1 and waiting[0] < 5
