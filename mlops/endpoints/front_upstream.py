"""One kept-alive connection from the front to a deployment's server (front_pool.py keeps
them), one exchange at a time. The server's answers are read by httptools (llhttp, Node.js's
parser, as uvicorn binds it); the request's head is written from the fields llhttp already
checked on the client's side (front_inbound.py).

An exchange is driven by callbacks, not a task: send() writes the request (head and a body held
in memory in one write; a spooled body piece by piece as the kernel takes it) and calls its
`done` once, with the whole answer (at most MAX_ANSWER bytes; past wire.SPOOL_MEMORY in a
temporary file, so a client that reads it slowly holds none of it in memory) or the error, as
soon as the parser is through with the bytes at hand (a head over MAX_HEAD bytes is an error,
as nginx's "upstream sent too big header": headers without end would otherwise fill the front's
memory until the deadline). Its deadline is the deployment's request_timeout_ms:
the connection keeps one timer, set again only when an exchange's deadline is nearer than it.
Reused only when the exchange ended cleanly: the whole request sent, the answer whole and
framed by its length or chunks (not by a close), keep-alive by HTTP's rules, the request not
HEAD (the parser cannot be told an answer to HEAD has no body, so its connection is dropped
after the head).
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

import httptools

if __package__:
    from mlops.endpoints import front_wire as wire
else:  # started by its path (front.py): this folder is first on sys.path
    import front_wire as wire  # type: ignore[no-redef]

HOST = "127.0.0.1"
FRAMING = (b"content-length", b"transfer-encoding")
INF = float("inf")
EARLY_S = 0.0005  # a timer that fires this early (the loop's clock is in ms) is on time
MAX_ANSWER = int(os.environ.get("FRONT_MAX_ANSWER_BYTES", str(256 * 2**20)))
MAX_HEAD = 64 * 1024  # an answer's head (its interim ones included), as a request's is bounded


class Broken(ConnectionError):
    """The server closed or broke the connection before its answer was whole."""

    def __init__(self, message: str, *, silent: bool = False):
        super().__init__(message)
        self.silent = silent  # not one byte of an answer came


@dataclass(kw_only=True, slots=True)
class Answer:
    """A server's whole answer: its body in memory (bytes), or past wire.SPOOL_MEMORY bytes in
    a temporary file (a wire.Body, closed by whoever hands it on)."""

    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes | wire.Body


class Upstream(asyncio.Protocol):
    """One keep-alive connection to a deployment's server, one exchange at a time: send()
    writes a request and calls its `done` once, with the whole answer or the error, after
    the parser is through with the bytes at hand. httptools reads the answers (the on_*
    methods are the parser's callbacks). One timer per connection, armed again only when an
    exchange's deadline is nearer than the timer."""

    def __init__(self, port: int) -> None:
        self.host = b"%s:%d" % (HOST.encode(), port)  # the Host field when the client sent none
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.done: Callable[[Answer | BaseException], None] | None = None  # the exchange's
        self.result: Answer | BaseException | None = None  # known, not handed on yet
        self.writable: asyncio.Future | None = None  # set while the kernel's buffer is full
        self.streaming: asyncio.Task | None = None  # writing a spooled body
        self.reading = Reading()
        self.lost = False
        self.idle_since = 0.0
        self.due = INF  # the exchange's deadline on the loop's clock
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = INF

    def connection_made(self, transport) -> None:
        self.transport, self.loop = transport, asyncio.get_running_loop()
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self.done is None or self.reading.whole:  # a server that talks out of turn
            self.reading.clean = False
            self.transport.abort()
            return
        reading = self.reading
        reading.heard += len(data)
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as err:
            self._settle(Broken(f"the server's answer is not HTTP/1.1 ({err})"))
            self.transport.abort()
        if reading.status == 0 and reading.heard > MAX_HEAD and self.result is None:
            self._settle(Broken(f"the server's answer's head is over {MAX_HEAD} bytes"))
            self.transport.abort()  # (nginx: "upstream sent too big header", a 502)
        if self.result is not None:
            self._hand_on()

    def eof_received(self) -> bool:
        if self.reading.until_close():  # its end is the close
            self._answered()
            self._hand_on()
        return False

    def connection_lost(self, exc) -> None:
        self.lost = True
        self._settle(Broken(f"the server closed the connection ({exc or 'EOF'})",
                            silent=not self.reading.heard))
        self._hand_on()
        if self.writable is not None and not self.writable.done():
            self.writable.set_result(None)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def pause_writing(self) -> None:
        self.writable = self.loop.create_future()

    def resume_writing(self) -> None:
        if self.writable is not None and not self.writable.done():
            self.writable.set_result(None)
        self.writable = None

    def _settle(self, result: Answer | BaseException) -> None:
        """The exchange's outcome, the first one known (handed on by _hand_on)."""
        if isinstance(result, BaseException):
            self.reading.clean = False
        if self.done is not None and self.result is None:
            self.result = result

    def _hand_on(self) -> None:
        done, result = self.done, self.result
        if done is None or result is None or self.streaming is not None:
            return  # (a body still being sent: handed on when it ends, by _streamed)
        self.done = self.result = None
        self.due = INF
        done(result)

    # ---- the parser's callbacks ----

    def on_message_begin(self) -> None:
        if self.reading.whole:  # a second answer to one request: the connection is spoiled
            self.reading.clean = False
            raise Broken("a second answer to one request")  # stops the parser: none of it
            # reaches the first answer's fields

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

    def on_body(self, data: bytes) -> None:
        reading = self.reading
        if reading.whole:
            return
        reading.size += len(data)
        if reading.size > MAX_ANSWER:
            self._settle(Broken(f"the server's answer is over {MAX_ANSWER} bytes"))
            self.transport.abort()
            raise Broken("too long")  # stops the parser
        if reading.spool is None and reading.size <= wire.SPOOL_MEMORY:
            reading.parts.append(data)
        else:  # a longer answer waits in a temporary file: the client may read it slowly
            reading.spill(data)

    def on_message_complete(self) -> None:
        if not self.reading.interim and not self.reading.whole:
            self.reading.kept = self.parser.should_keep_alive()  # not known after this call
            self._answered()

    def _answered(self) -> None:
        reading = self.reading
        reading.whole = True
        parts = reading.parts
        self._settle(Answer(status=reading.status, reason=reading.reason,
                            headers=reading.headers, body=reading.spool if reading.spool
                            is not None else parts[0] if len(parts) == 1 else b"".join(parts)))

    # ---- an exchange ----

    def send(self, request: wire.Forward, body: wire.Body, deadline: float | None,
             done: Callable[[Answer | BaseException], None]) -> None:
        """Send the request and its body; done(the server's whole answer, or the error:
        TimeoutError once the loop's clock passes `deadline`), called once."""
        if self.lost or self.transport.is_closing():
            done(Broken("the server closed the connection", silent=True))
            return
        self.done, self.result = done, None
        self.reading = Reading(head_only=request.method == b"HEAD")
        if deadline is not None:
            self._arm(deadline)
        whole = body.whole()
        if whole is not None:  # head and body in one segment
            self.transport.write(request.head(self.host) + whole)
        else:
            self.streaming = self.loop.create_task(self._stream(request.head(self.host), body))
            self.streaming.add_done_callback(self._streamed)

    def _streamed(self, _task: asyncio.Task) -> None:
        """A spooled body was sent (or given up): no one else reads its file from now."""
        self.streaming = None
        self._hand_on()

    async def exchange(self, request: wire.Forward, body: wire.Body,
                       deadline: float | None) -> Answer:
        """send() as a coroutine: the answer, or its error raised."""
        future = asyncio.get_running_loop().create_future()
        self.send(request, body, deadline, lambda result: future.set_exception(result)
                  if isinstance(result, BaseException) else future.set_result(result))
        return await future

    def _arm(self, deadline: float) -> None:
        self.due = deadline
        if self.timer is None or self.timer_at > deadline:
            if self.timer is not None:
                self.timer.cancel()
            self.timer, self.timer_at = self.loop.call_at(deadline, self._tick), deadline

    def _tick(self) -> None:
        self.timer = None
        if self.done is None or self.due == INF:
            return
        if self.due - self.loop.time() > EARLY_S:  # a later exchange's deadline
            self._arm(self.due)
            return
        self._settle(TimeoutError())
        self.transport.abort()
        self._hand_on()

    async def _stream(self, head: bytes, body: wire.Body) -> None:
        """A spooled body, piece by piece as the kernel takes it (the head with the first)."""
        try:
            for piece in body.chunks():
                if self.result is not None or self.done is None:  # answered (or failed)
                    self.reading.clean = False
                    return
                self.transport.write(head + piece if head else piece)
                head = b""
                if self.writable is not None:
                    await self.writable
            if self.result is not None or self.done is None or self.lost:
                self.reading.clean = False
            elif head:
                self.transport.write(head)
        except (OSError, ValueError) as err:  # the spool could not be read
            self._settle(err)
            self.transport.abort()
            self._hand_on()

    def reusable(self) -> bool:
        """Whether it can take the next request (and is made ready for it)."""
        reading = self.reading
        if self.lost or not (reading.whole and reading.clean and reading.kept):
            return False
        self.idle_since = self.loop.time()
        return True

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


@dataclass(kw_only=True, slots=True)
class Reading:
    """What has come of the server's answer to the request in flight."""

    head_only: bool = False  # the request was HEAD
    status: int = 0
    reason: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    parts: list[bytes] = field(default_factory=list)
    spool: wire.Body | None = None  # the body past wire.SPOOL_MEMORY bytes, in a file
    size: int = 0
    heard: int = 0  # bytes that came back
    interim: bool = False  # the head read is a 1xx answer's
    whole: bool = False
    kept: bool = False  # the answer, read whole by its length or chunks, keeps the connection
    clean: bool = True  # the request was sent whole and nothing went wrong

    def spill(self, data: bytes) -> None:
        """The body's next bytes, into its temporary file (made with what came before)."""
        if self.spool is None:
            self.spool = wire.Body(MAX_ANSWER, spill=True)
            for part in self.parts:
                self.spool.add(part)
            self.parts = []
        self.spool.add(data)

    def until_close(self) -> bool:
        """Whether the final answer's head is in and its end is the server's close: no length,
        no chunks (never reused: `kept` stays False). Asked at the close only: llhttp ends
        every other answer itself (a 204's or 304's at its head)."""
        return self.status != 0 and not self.interim and not self.whole and not any(
            name.lower() in FRAMING for name, _ in self.headers)
