"""The front's connections to each deployment's server: kept alive and reused (no connect per
request), h11 on the client side, one request at a time on each.

A connection goes back to its deployment's pool once both sides are done with an exchange; one
that sat idle longer than KEEP_S (below gunicorn's 2 s keep-alive, so the server never closes it
under a request) or that the server closed is dropped. A request sent on a reused connection
that the server closed before answering a byte is sent once more on a new one. The answer is
read whole (at most MAX_ANSWER bytes) within the deployment's request_timeout_ms.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from dataclasses import dataclass

import h11

if __package__:
    from mlops.endpoints import front_wire as wire
else:  # started by its path (front.py): this folder is first on sys.path
    import front_wire as wire  # type: ignore[no-redef]

HOST = "127.0.0.1"
KEEP_S = 1.0
MAX_IDLE = 64  # idle connections kept per deployment
MAX_ANSWER = int(os.environ.get("FRONT_MAX_ANSWER_BYTES", str(256 * 2**20)))


class Broken(ConnectionError):
    """The server closed or broke the connection before its answer was whole."""

    def __init__(self, message: str, *, silent: bool = False):
        super().__init__(message)
        self.silent = silent  # not one byte of an answer came


@dataclass(frozen=True, kw_only=True)
class Answer:
    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes


class Upstream(asyncio.Protocol):
    """One keep-alive connection to a deployment's server."""

    def __init__(self) -> None:
        self.conn = h11.Connection(h11.CLIENT)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future | None = None
        self.writable: asyncio.Future | None = None  # set while the kernel's buffer is full
        self.response: h11.Response | None = None
        self.parts: list[bytes] = []
        self.size = 0
        self.heard = False  # a byte came back for the request in flight
        self.lost = False
        self.idle_since = 0.0

    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:  # nothing was asked: a server that talks out of turn
            self.transport.abort()
            return
        self.heard = True
        self.conn.receive_data(data)
        self._read()

    def eof_received(self) -> bool:
        self.conn.receive_data(b"")
        self._read()
        return False

    def connection_lost(self, exc) -> None:
        self.lost = True
        self._fail(Broken(f"the server closed the connection ({exc or 'EOF'})",
                          silent=not self.heard))
        if self.writable is not None and not self.writable.done():
            self.writable.set_result(None)

    def pause_writing(self) -> None:
        self.writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self.writable is not None and not self.writable.done():
            self.writable.set_result(None)
        self.writable = None

    def _fail(self, error: BaseException) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(error)

    def _read(self) -> None:
        while self.waiter is not None and not self.waiter.done():
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError as err:
                self._fail(Broken(f"the server's answer is not HTTP/1.1 ({err})"))
                self.transport.abort()
                return
            kind = type(event)
            if event is h11.NEED_DATA:
                return
            if kind is h11.Response:
                self.response = event
            elif kind is h11.Data:
                self.size += len(event.data)
                if self.size > MAX_ANSWER:
                    self._fail(Broken(f"the server's answer is over {MAX_ANSWER} bytes"))
                    self.transport.abort()
                    return
                self.parts.append(event.data)
            elif kind is h11.EndOfMessage:
                self.waiter.set_result(Answer(
                    status=self.response.status_code, reason=self.response.reason,
                    headers=self.response.headers.raw_items(), body=b"".join(self.parts)))
            elif kind is h11.ConnectionClosed:
                self._fail(Broken("the server closed the connection", silent=not self.heard))

    def _timed_out(self) -> None:
        self._fail(TimeoutError())
        self.transport.abort()

    async def exchange(self, request: h11.Request, body: wire.Body,
                       deadline: float | None) -> Answer:
        """Send the request and its body; the server's whole answer (TimeoutError once the
        loop's clock passes `deadline`)."""
        if self.lost:
            raise Broken("the server closed the connection", silent=True)
        loop = asyncio.get_running_loop()
        self.waiter = loop.create_future()
        self.response, self.parts, self.size, self.heard = None, [], 0, False
        timer = None if deadline is None else loop.call_at(deadline, self._timed_out)
        try:
            await self._send(request, body)
            return await self.waiter
        finally:
            self.waiter = None
            if timer is not None:
                timer.cancel()

    async def _send(self, request: h11.Request, body: wire.Body) -> None:
        pending = self.conn.send(request)  # sent with the body's first piece: one segment
        for piece in body.chunks():
            if self.waiter.done():  # answered (or failed) before the body was all sent
                return
            self.transport.write(pending + self.conn.send(h11.Data(data=piece)))
            pending = b""
            if self.writable is not None:
                await self.writable
        if not self.waiter.done() and not self.lost:
            self.transport.write(pending + self.conn.send(h11.EndOfMessage()))

    def reusable(self) -> bool:
        """Whether it can take the next request (and is made ready for it)."""
        if self.lost or self.conn.our_state is not h11.DONE or \
                self.conn.their_state is not h11.DONE:
            return False
        self.conn.start_next_cycle()
        self.idle_since = time.monotonic()
        return True

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class Pool:
    """The kept-alive connections to one server (127.0.0.1:port)."""

    def __init__(self, port: int):
        self.port = port
        self.idle: list[Upstream] = []

    def _reuse(self) -> Upstream | None:
        now = time.monotonic()
        while self.idle:
            upstream = self.idle.pop()
            if not upstream.lost and now - upstream.idle_since < KEEP_S:
                return upstream
            upstream.close()
        return None

    async def _connect(self, deadline: float | None) -> Upstream:
        loop = asyncio.get_running_loop()
        connecting = loop.create_connection(Upstream, HOST, self.port)
        left = None if deadline is None else max(0.0, deadline - loop.time())
        _, upstream = await asyncio.wait_for(connecting, left)
        return upstream

    async def _once(self, upstream: Upstream, request: h11.Request, body: wire.Body,
                    deadline: float | None) -> Answer:
        try:
            answer = await upstream.exchange(request, body, deadline)
        except BaseException:
            upstream.close()
            raise
        if upstream.reusable() and len(self.idle) < MAX_IDLE:
            self.idle.append(upstream)
        else:
            upstream.close()
        return answer

    async def exchange(self, request: h11.Request, body: wire.Body,
                       timeout: float | None) -> Answer:
        """The server's answer within `timeout` seconds (None: no limit); TimeoutError past
        it, Broken or OSError when the server cannot answer."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        upstream = self._reuse()
        if upstream is not None:
            try:
                return await self._once(upstream, request, body, deadline)
            except Broken as err:
                if not err.silent:
                    raise
        return await self._once(await self._connect(deadline), request, body, deadline)

    def close(self) -> None:
        for upstream in self.idle:
            upstream.close()
        self.idle.clear()
