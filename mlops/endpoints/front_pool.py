"""The front's connections to each deployment's server: kept alive and reused (no connect per
request), one request at a time on each. The server's answers are read by httptools (llhttp,
Node.js's parser, as uvicorn binds it); the request's head is written from the fields llhttp
already checked on the client's side (front_inbound.py).

A connection goes back to its deployment's pool once both sides are done with an exchange; one
that sat idle longer than KEEP_S (below gunicorn's 2 s keep-alive, so the server never closes it
under a request) or that the server closed is dropped. A request sent on a reused connection
that the server closed before answering a byte is sent once more on a new one. The answer is
read whole (at most MAX_ANSWER bytes) within the deployment's request_timeout_ms. Reused only
when the exchange ended cleanly: the whole request sent, the answer whole and framed by its
length or chunks (not by a close), keep-alive by HTTP's rules, the request not HEAD (the parser
cannot be told an answer to HEAD has no body, so its connection is dropped after the head).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from dataclasses import dataclass, field

import httptools

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
    """One keep-alive connection to a deployment's server; httptools reads its answers (the
    on_* methods are the parser's callbacks)."""

    def __init__(self, port: int) -> None:
        self.host = b"%s:%d" % (HOST.encode(), port)  # the Host field when the client sent none
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future | None = None
        self.writable: asyncio.Future | None = None  # set while the kernel's buffer is full
        self.reading = Reading()
        self.lost = False
        self.idle_since = 0.0

    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self.waiter is None or self.reading.whole:  # a server that talks out of turn
            self.reading.clean = False
            self.transport.abort()
            return
        self.reading.heard = True
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as err:
            self._fail(Broken(f"the server's answer is not HTTP/1.1 ({err})"))
            self.transport.abort()

    def eof_received(self) -> bool:
        if self.reading.until_close and not self.reading.whole:  # its end is the close
            self._answered()
        return False

    def connection_lost(self, exc) -> None:
        self.lost = True
        self._fail(Broken(f"the server closed the connection ({exc or 'EOF'})",
                          silent=not self.reading.heard))
        if self.writable is not None and not self.writable.done():
            self.writable.set_result(None)

    def pause_writing(self) -> None:
        self.writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self.writable is not None and not self.writable.done():
            self.writable.set_result(None)
        self.writable = None

    def _fail(self, error: BaseException) -> None:
        self.reading.clean = False
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(error)

    # ---- the parser's callbacks ----

    def on_message_begin(self) -> None:
        if self.reading.whole:  # a second answer to one request: the connection is spoiled
            self.reading.clean = False

    def on_status(self, reason: bytes) -> None:
        self.reading.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self.reading.headers.append((name, value))

    def on_headers_complete(self) -> None:
        reading, status = self.reading, self.parser.get_status_code()
        if 100 <= status < 200 and status != 101:  # interim (100 Continue): the final follows
            reading.reason, reading.headers, reading.interim = b"", [], True
            return
        reading.status, reading.interim = status, False
        if reading.head_only:  # an answer to HEAD: whole at its head, whatever it announces
            reading.clean = False
            self._answered()
        elif status not in (204, 304) and not any(
                name.lower() in (b"content-length", b"transfer-encoding")
                for name, _ in reading.headers):
            reading.until_close = True  # framed by the close: never reused

    def on_body(self, data: bytes) -> None:
        reading = self.reading
        if reading.whole:
            return
        reading.size += len(data)
        if reading.size > MAX_ANSWER:
            self._fail(Broken(f"the server's answer is over {MAX_ANSWER} bytes"))
            self.transport.abort()
            raise Broken("too long")  # stops the parser
        reading.parts.append(data)

    def on_message_complete(self) -> None:
        if not self.reading.interim and not self.reading.whole:
            self.reading.kept = self.parser.should_keep_alive()  # not known after this call
            self._answered()

    def _answered(self) -> None:
        reading = self.reading
        reading.whole = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(Answer(status=reading.status, reason=reading.reason,
                                          headers=reading.headers,
                                          body=b"".join(reading.parts)))

    def _timed_out(self) -> None:
        self._fail(TimeoutError())
        self.transport.abort()

    async def exchange(self, request: wire.Forward, body: wire.Body,
                       deadline: float | None) -> Answer:
        """Send the request and its body; the server's whole answer (TimeoutError once the
        loop's clock passes `deadline`)."""
        if self.lost:
            raise Broken("the server closed the connection", silent=True)
        loop = asyncio.get_running_loop()
        self.waiter = loop.create_future()
        self.reading = Reading(head_only=request.method == b"HEAD")
        timer = None if deadline is None else loop.call_at(deadline, self._timed_out)
        try:
            await self._send(request, body)
            return await self.waiter
        finally:
            self.waiter = None
            if timer is not None:
                timer.cancel()

    async def _send(self, request: wire.Forward, body: wire.Body) -> None:
        pending = request.head(self.host)  # sent with the body's first piece: one segment
        for piece in body.chunks():
            if self.waiter.done():  # answered (or failed) before the body was all sent
                self.reading.clean = False
                return
            self.transport.write(pending + piece if pending else piece)
            pending = b""
            if self.writable is not None:
                await self.writable
        if self.waiter.done() or self.lost:
            self.reading.clean = False
        elif pending:
            self.transport.write(pending)

    def reusable(self) -> bool:
        """Whether it can take the next request (and is made ready for it)."""
        reading = self.reading
        if self.lost or not (reading.whole and reading.clean and reading.kept):
            return False
        self.idle_since = time.monotonic()
        return True

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


@dataclass(kw_only=True)
class Reading:
    """What has come of the server's answer to the request in flight."""

    head_only: bool = False  # the request was HEAD
    status: int = 0
    reason: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    parts: list[bytes] = field(default_factory=list)
    size: int = 0
    heard: bool = False  # a byte came back
    interim: bool = False  # the head read is a 1xx answer's
    until_close: bool = False  # no length, no chunks: the answer ends when the server closes
    whole: bool = False
    kept: bool = False  # the answer, read whole by its length or chunks, keeps the connection
    clean: bool = True  # the request was sent whole and nothing went wrong


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
        connecting = loop.create_connection(lambda: Upstream(self.port), HOST, self.port)
        left = None if deadline is None else max(0.0, deadline - loop.time())
        _, upstream = await asyncio.wait_for(connecting, left)
        return upstream

    async def _once(self, upstream: Upstream, request: wire.Forward, body: wire.Body,
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

    async def exchange(self, request: wire.Forward, body: wire.Body,
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
