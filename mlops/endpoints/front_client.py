"""One client connection of the endpoint's front (front.py): its requests, read in order by llhttp
with nginx's refusals on top (front_inbound.py), and their answers. Deadlines: a request's head
must arrive within FRONT_HEAD_TIMEOUT_S of its first byte, its body within FRONT_BODY_TIMEOUT_S
(else 408); a connection idle between requests closes after FRONT_IDLE_TIMEOUT_S. A refusal of
a head or a body is answered and the connection closed, after reading and dropping at most
LINGER_BYTES (or LINGER_S) more of what the client sends: closing on unread bytes resets the
connection, which can lose the answer; an endless body is never drained. The front's own answer
to a request read whole (429, or 408 and 502 for the deployment's failure) keeps the connection.
An answer spooled to a file (past wire.SPOOL_MEMORY) is written a piece at a time as the client
reads it; a client that reads nothing of its answers for FRONT_BODY_TIMEOUT_S is cut off.
"""

from __future__ import annotations

import asyncio
import socket

if __package__:
    from mlops.endpoints import front_wire as wire
    from mlops.endpoints.front_inbound import END, NEED_DATA, PAUSED, REQUEST, Inbound
    from mlops.endpoints.front_rules import Route
    from mlops.endpoints.front_upstream import Answer
else:  # started by its path (front.py): this folder is first on sys.path
    import front_wire as wire  # type: ignore[no-redef]
    from front_inbound import END, NEED_DATA, PAUSED, REQUEST, Inbound  # type: ignore[no-redef]
    from front_rules import Route  # type: ignore[no-redef]
    from front_upstream import Answer  # type: ignore[no-redef]

LINGER_S, LINGER_BYTES = 1.0, 256 * 1024  # what a refused client may still send: then closed
STOP_GRACE_S = 1.0  # how long a connection accepted before a stop may take to send a request
INF = float("inf")
EARLY_S = 0.0005  # a timer that fires this early (the loop's clock is in ms) is on time


class Client(asyncio.Protocol):
    """One client connection: its requests, read by llhttp in order, and their answers."""

    def __init__(self, front):  # front.Front: its router, pools, log and connections
        self.front, self.wire = front, Inbound()
        self.transport: asyncio.Transport | None = None
        self.phase = "idle"  # idle (no byte of a request yet), head, body, busy, closing
        self.loop: asyncio.AbstractEventLoop | None = None
        self.timer: asyncio.TimerHandle | None = None  # the connection's one timer
        self.timer_at = INF  # when it fires
        self.due = INF  # when the phase in `timed` must be over
        self.timed = ""  # the phase the deadline was set for
        self.dropped = 0
        self.paused = False  # reading paused: enough waits unparsed
        self.blocked = False  # the answers written wait for the client to read them
        self.deferred = False  # a pipelined request is to be read at the loop's next turn
        self.ended = False  # the client closed its side
        self.request: wire.Forward | None = None  # the one in flight
        self.route: Route | None = None
        self.body: wire.Body | None = None
        self.started = 0.0  # when the one in flight was passed on (the loop's clock)
        self.spooled: wire.Body | None = None  # a long answer being written from its file
        self.streaming = None  # its pieces still to write

    def connection_made(self, transport) -> None:
        self.transport, self.loop = transport, asyncio.get_running_loop()
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.front.clients[self] = None
        self.wait_next()

    def connection_lost(self, exc) -> None:
        self._arm("closing", None)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.phase != "busy" and self.body is not None:
            self.body.close()
        if self.spooled is not None:
            self.spooled.close()
            self.spooled = self.streaming = None
        self.phase = "closing"
        self.front.closed(self)

    def data_received(self, data: bytes) -> None:
        if self.phase == "closing":
            self.dropped += len(data)
            if self.dropped > LINGER_BYTES:
                self.transport.close()
            return
        if self.phase == "idle":
            self.phase = "head"
        self.wire.feed(data)
        if self.phase != "busy" and not (self.blocked or self.deferred):
            self._advance()
        elif not self.paused and len(self.wire.buf) > wire.MAX_HEAD:  # pipelined while a
            self.paused = True  # request is answered: what waits unparsed is bounded
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        if self.phase in ("closing", "idle"):
            return False
        self.ended = True
        self.wire.feed(b"")
        if self.phase != "busy":
            self._advance()
        return True  # still open for the answer

    def _arm(self, phase: str, seconds: float | None) -> None:
        """`phase` must be over within `seconds` (None: no limit). The timer is set again
        only when this deadline is nearer than it: one that fires early sets itself again."""
        self.timed = phase
        if seconds is None:
            self.due = INF
            return
        self.due = due = self.loop.time() + seconds
        if self.timer_at > due or self.timer is None:
            if self.timer is not None:
                self.timer.cancel()
            self.timer, self.timer_at = self.loop.call_at(due, self._tick), due

    def _tick(self) -> None:
        self.timer = None
        if self.due == INF:
            return
        if self.due - self.loop.time() > EARLY_S:
            self.timer, self.timer_at = self.loop.call_at(self.due, self._tick), self.due
        elif self.timed in ("head", "body"):
            self._late()
        elif self.blocked:  # answers the client has not read for BODY_S: cut off
            self.transport.abort()
        else:  # idle between requests, lingering after a refusal
            self.transport.close()  # (what was written is still sent)

    def _deadline(self) -> None:
        """A head or a body must arrive in time: armed when one is still to come after the
        bytes at hand (a request whole in one read arms none)."""
        if self.phase == self.timed or self.phase in ("idle", "closing") or \
                self.timed == "sending":  # (an answer waits for the client to read it)
            return
        if self.phase == "busy":
            self._arm("busy", None)
        else:
            self._arm(self.phase, wire.HEAD_S if self.phase == "head" else wire.BODY_S)

    def wait_next(self) -> None:
        """Wait for the next request: idle connections close quietly in time."""
        self.phase = "idle"
        self._arm("idle", STOP_GRACE_S if self.front.stopping else wire.IDLE_S)

    def _late(self) -> None:
        late = "head" if self.phase == "head" else "body"
        self.refuse(wire.Refused(408, f"the request's {late} did not arrive in time"))

    def _advance(self) -> None:
        inbound = self.wire
        try:
            while True:
                event = inbound.next_event()
                if type(event) is bytes:
                    self.body.add(event)
                elif event is REQUEST:
                    self._begin()
                elif event is END:
                    self._dispatch()
                    return
                elif event is NEED_DATA:
                    if self.paused:  # (what waited is read: more may come)
                        self._read_on()
                    return
                elif event is PAUSED:
                    return
                else:  # the client closed its side between requests
                    self.transport.close()
                    return
        except wire.Refused as refused:
            self.refuse(refused)
        finally:
            self._deadline()

    def _begin(self) -> None:
        """A request's head is in: Azure's rules that need no body, then the body's limit."""
        self.phase = "body"
        inbound, router = self.wire, self.front.router
        state = router.current()
        router.authorize(inbound.fields, state)
        route = router.route(inbound.fields, state)
        inbound.cap = route.slot.max_body
        if inbound.left > inbound.cap:
            raise wire.too_large(inbound.cap)
        self.body, self.route = wire.Body(route.slot.max_body), route
        if inbound.expects_continue:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _dispatch(self) -> None:
        self.phase = "busy"
        inbound = self.wire
        self.request = sent = wire.upstream_request(
            inbound.method, inbound.target, inbound.items, length=self.body.size,
            connection=inbound.fields.get(b"connection", b""))
        self.front.answer(self, sent, self.route, self.body)

    def answered(self, result: Answer | wire.Refused) -> None:
        """The deployment's answer to the request in flight, or the refusal that stands for
        its failure: to the client while it waits; then the front's passed() (with what was
        in flight: replying may start a pipelined request)."""
        request, route, body, started = self.request, self.route, self.body, self.started
        if self.phase == "busy":
            if type(result) is Answer:
                self.reply(result, route.slot.name)
            else:
                self.reply_own(result)
        elif type(result) is Answer and type(result.body) is not bytes:
            result.body.close()  # (the client is gone)
        self.front.passed(request, route, body, result, started=started)

    def reply(self, answer: Answer, deployment: str) -> None:
        status, reason, headers = wire.relabeled(answer.status, answer.reason, answer.headers,
                                                 deployment=deployment)
        length = len(answer.body)
        if self.request.method == b"HEAD":
            length = int(next((value for name, value in answer.headers
                               if name.lower() == b"content-length"), b"0"))
        headers.append((b"content-length", b"%d" % length))
        self._send(status, headers, answer.body, reason)

    def reply_own(self, refused: wire.Refused) -> None:
        """The front's own answer to a request it read whole (429 past the deployment's
        pending requests; 408 or 502 when its server failed to answer): the connection is
        kept as it would be after any answer, as nginx keeps it after a 429, 502 or 504 (it
        closes after 400, 413, 414 and 501, as every refusal of a head does here)."""
        kind, body = refused.body()
        headers = [(b"content-type", kind), (b"content-length", b"%d" % len(body))]
        self.front.log(f"{self.request.target.decode('latin-1')} refused {refused.status}: "
                       f"{refused.message}")
        self._send(refused.status, headers, b"" if self.request.method == b"HEAD" else body,
                   wire.REASONS.get(refused.status, b""))

    def _send(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes,
              reason: bytes) -> None:
        """An answer to the request in flight, then the connection's next request (or its
        close, where the request or a stop ends it)."""
        if self.front.stopping:
            headers.append((b"connection", b"close"))
        spooled = None
        if type(body) is not bytes:  # a long answer, in a file: written as the client reads
            spooled, body = body, b""
        out = self.wire.reply(status, headers, body, reason=reason)
        self.request = self.route = self.body = None
        if not out:  # answered already: the connection cannot go on
            self.phase = "closing"
            self.transport.abort()
            if spooled is not None:
                spooled.close()
            return
        self.transport.write(out)
        if spooled is not None:
            self.spooled, self.streaming = spooled, spooled.chunks()
            self._stream_on()
        else:
            self._next()

    def _stream_on(self) -> None:
        """Write the spooled answer on while the client reads it (a piece at a time, so the
        front holds no more of it than the transport's mark); one that stops reading for
        BODY_S is cut off. Then the connection's next request."""
        for piece in self.streaming:
            self.transport.write(piece)
            if self.blocked:
                self._arm("sending", wire.BODY_S)
                return
        self.spooled.close()
        self.spooled = self.streaming = None
        self._next()

    def _next(self) -> None:
        """After an answer: the connection's next request, or its close (where the request
        or a stop ends it)."""
        if not self.wire.next_cycle() or self.front.stopping or (
                self.ended and not self.wire.buf):  # (what it sent before its close is read)
            self.phase = "closing"
            self.transport.close()
            if self.blocked:  # closed once the client reads it, or cut off in BODY_S
                self._arm("sending", wire.BODY_S)
            return
        if self.paused:
            self._read_on()
        if self.blocked:  # the answer waits for the client to read it: nothing more is read
            self.phase = "idle"
            self._arm("sending", wire.BODY_S)
        else:
            self.wait_next()
            if self.wire.buf:  # pipelined: the next request is here already; read once this
                self.phase, self.deferred = "head", True  # answer's call returns (answers
                self.loop.call_soon(self._pipelined)  # given at once, as 429s are, would
                # otherwise nest a call deep for each request the client pipelines)

    def _pipelined(self) -> None:
        self.deferred = False
        if self.phase == "head" and not self.blocked:
            self._advance()

    def _read_on(self) -> None:
        """Read again once what waits unparsed is under the bound (at most one head's worth:
        a client that pipelines without end is read as fast as it is answered) and the client
        reads its answers."""
        if self.paused and not self.blocked and len(self.wire.buf) <= wire.MAX_HEAD:
            self.paused = False
            self.transport.resume_reading()

    def pause_writing(self) -> None:
        """The client reads its answers slower than they come: its next request waits until
        it has read them (as nginx reads a pipelined request once the answer before it is
        sent), so a client that never reads cannot fill the front's memory with answers; one
        that has not caught up in BODY_S is closed, as an idle one is."""
        self.blocked = True

    def resume_writing(self) -> None:
        self.blocked = False
        if self.streaming is not None:
            self._stream_on()
            return
        if self.timed != "sending" or self.phase not in ("head", "idle"):
            return
        self._read_on()
        self.wait_next()
        if self.wire.buf:
            self.phase = "head"
            self._advance()

    def refuse(self, refused: wire.Refused) -> None:
        """Answer with the refusal and close: what the client still sends is read and dropped
        for at most LINGER_S seconds or LINGER_BYTES bytes (closing on unread bytes resets the
        connection, which can lose the answer), never drained."""
        self.phase = "closing"
        self.transport.write(self.wire.refuse(refused))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        if self.paused:
            self.paused = False
            self.transport.resume_reading()
        self._arm("closing", LINGER_S)
        target = (self.wire.target or b"-").decode("latin-1")
        self.front.log(f"{target} refused {refused.status}: {refused.message}")
