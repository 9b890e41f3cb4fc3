"""Clients' requests as the local endpoint's front reads them: llhttp (Node.js's parser, as
httptools binds it for uvicorn) parses every byte, strict, with nginx's refusals on top
(front_wire.py). No sockets here (front_client.py holds them): every rule is a function of
bytes, tested with bytes alone.

llhttp parses all it is fed, so it is fed one request at a time, never a byte of the next:
a head once its blank line is here (its bytes as they came are what nginx's rules read where
llhttp refuses them), then at most the Content-Length's bytes, or a chunked body up to each
CR LF CR LF (the only place where its last chunk can end). What comes after a request waits,
unparsed and bounded by its reader, until that request is answered (pipelining). What llhttp
lets through and nginx refuses is checked on the fields it read: a second Host,
Content-Length, Transfer-Encoding, Authorization, Expect or azureml-model-deployment (400), no
Host in HTTP/1.1 (400), Transfer-Encoding in HTTP/1.0 (400) or other than `chunked` (501),
TRACE or CONNECT (405), an HTTP version other than 1.x (505), a target that is neither
a path nor absolute (`OPTIONS *`) or climbs above the root (`/../x`, `/%2e%2e/x`) (400).
A head whose lines end in LF alone (nginx reads it; llhttp does not) or whose method llhttp
does not know (nginx passes it on) is read again with CR LF and a known method, once nginx's
rules found nothing wrong in it as it came.
"""

from __future__ import annotations

import re

import httptools

if __package__:
    from mlops.endpoints import front_wire as wire
else:  # started by its path (front.py): this folder is first on sys.path
    import front_wire as wire  # type: ignore[no-redef]

# what next_event() returns besides a piece of body (bytes)
REQUEST, END, NEED_DATA, PAUSED, CLOSED = "request", "end", "need-data", "paused", "closed"
HEAD, BODY, DONE = 0, 1, 2  # where the request being read is
UNIQUE = frozenset({b"host", b"content-length", b"transfer-encoding", b"authorization",
                    b"expect", b"azureml-model-deployment"})
HEAD_END = re.compile(rb"\n\r?\n")
LAST_CHUNK_END = b"\r\n\r\n"
FOUND = (httptools.HttpParserError,)


class Inbound:
    """One client connection's requests, read one at a time, and the answers written for them.
    The parser's callbacks (on_*) queue what next_event() hands out."""

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.buf = bytearray()  # what came and is not parsed yet
        self.events: list = []
        self.at = 0  # the next of `events` to hand out
        self.stage = HEAD
        self.scanned = 0  # bytes of `buf` searched for a head's end
        self.eof = False  # the client closed its side
        self.left = 0  # a Content-Length body's bytes still to come
        self.tail = b""  # the last bytes of a chunked body fed to the parser
        self.cap = -1  # the body's limit, set once its route is known (-1: none)
        self.announced: wire.Announced | None = None  # a chunked body's sizes, summed
        self.replied = False
        self._request()

    def _request(self) -> None:
        """Empty fields for the next request's head."""
        self.method, self.target, self.version = b"", b"", b""
        self.items: list[tuple[bytes, bytes]] = []
        self.fields: dict[bytes, bytes] = {}
        self.chunked = self.keep = self.expects_continue = False

    # ---- the parser's callbacks ----

    def on_url(self, url: bytes) -> None:
        self.target += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.items.append((name, value))

    def on_headers_complete(self) -> None:
        self.events.append(REQUEST)

    def on_body(self, data: bytes) -> None:
        self.events.append(data)

    def on_message_complete(self) -> None:
        self.events.append(END)
        self.stage = DONE

    # ---- reading ----

    def feed(self, data: bytes) -> None:
        """Bytes from the client (b"": it closed its side)."""
        if data:
            self.buf += data
        else:
            self.eof = True

    def next_event(self):
        """The next thing read: REQUEST (its head in method, target, items, fields), a piece
        of its body (bytes), END, NEED_DATA, PAUSED (the next request waits for this one's
        answer) or CLOSED (the client closed its side between requests); Refused for what
        llhttp or nginx's rules refuse."""
        if self.at < len(self.events):
            self.at += 1
            return self.events[self.at - 1]
        if self.at:
            self.events.clear()
            self.at = 0
        if self.stage == DONE:
            return PAUSED
        if self.stage == HEAD:
            self._read_head()
        else:
            self._read_body()
        if self.events:
            return self.next_event()
        if self.eof:
            if self.stage == HEAD and not self.buf:
                return CLOSED
            raise wire.Refused(400, "the client closed its side before its request was whole")
        return NEED_DATA

    def _read_head(self) -> None:
        buf = self.buf
        if buf[:1] in (b"\r", b"\n"):  # nginx skips empty lines before a request line
            del buf[:len(buf) - len(buf.lstrip(b"\r\n"))]
        found = HEAD_END.search(buf, max(0, self.scanned - 2))
        if found is None or found.end() > wire.MAX_HEAD:
            if len(buf) > wire.MAX_HEAD:
                raise wire.Refused(431, f"request head over {wire.MAX_HEAD} bytes")
            self.scanned = len(buf)
            return
        head = bytes(buf[:found.end()])
        del buf[:found.end()]
        self.scanned = 0
        try:
            self.parser.feed_data(head)
        except FOUND as err:
            self._read_again(head, err)
        except httptools.HttpParserUpgrade:
            self._without_upgrade(head)
        self._check(head)
        if self.stage == HEAD:
            self.stage = BODY
            if not self.chunked and self.left <= len(buf):  # the whole body is here
                self._read_body()

    def _read_again(self, head: bytes, err: Exception) -> None:
        """A head llhttp refused: nginx's answer where its rules refuse it as it came; else
        read again where it is one nginx reads (LF-only lines, a method llhttp does not
        know), else 400."""
        refused = wire.nginx_refusal(head)
        if refused is not None:
            raise refused
        fixed = wire.BARE_LF.sub(b"\r\n", head)
        method = head[:head.find(b" ")]
        if isinstance(err, httptools.HttpParserInvalidMethodError):
            fixed = b"GET" + fixed[len(method):]
        if fixed == head:
            raise wire.Refused(400, f"invalid request: {err}")
        self.parser, self.events, self.at = httptools.HttpRequestParser(self), [], 0
        self._request()
        try:
            self.parser.feed_data(fixed)
        except FOUND as again:
            raise wire.Refused(400, f"invalid request: {again}") from None
        except httptools.HttpParserUpgrade:
            self._without_upgrade(fixed)

    def _without_upgrade(self, head: bytes) -> None:
        """A head that asks to switch protocols, read as nginx reads it: an HTTP request like
        any other (CONNECT: 405). llhttp ends such a request at its head and would leave its
        body to be read as the next request, so the head is read again without its Upgrade
        field (a hop-by-hop field, never passed on)."""
        line = head[:head.find(b"\n")].rstrip(b"\r")
        refused = wire.line_refusal(line[:line.find(b" ")], line[line.rfind(b" ") + 1:])
        if refused is not None:
            raise refused
        plain = [field for field in self.items if field[0].lower() != b"upgrade"]
        self.parser, self.events, self.at = httptools.HttpRequestParser(self), [], 0
        self._request()
        self.stage = HEAD  # (its end, which llhttp called at the head, is still to come)
        self.parser.feed_data(b"\r\n".join([line, *map(b": ".join, plain), b"", b""]))

    def _check(self, head: bytes) -> None:
        """nginx's rules that llhttp does not apply, on the fields it read."""
        if len(head) > wire.MAX_LINE:  # (a shorter head has no line over the limit)
            wire.check_lines(head)
        line = head[:head.find(b"\n")].rstrip(b"\r")
        self.method = line[:line.find(b" ")]
        self.version = version = line[line.rfind(b" ") + 1:]
        if version != b"HTTP/1.1" or self.method in (b"TRACE", b"CONNECT"):
            refused = wire.line_refusal(self.method, version)
            if refused is not None:
                raise refused
        target = self.target
        if target[:1] != b"/" or b"/." in target or b"%" in target:
            refused = wire.target_refusal(target)
            if refused is not None:
                raise refused
        fields = self.fields
        for name, value in self.items:
            low = name.lower()
            if low in fields:
                if low in UNIQUE:
                    raise wire.Refused(400, f"duplicate {low.decode()} field")
                if low == b"connection":  # a list field: each one's tokens count
                    value = fields[low] + b"," + value
            fields[low] = value
        refused = wire.field_refusal(version, fields)
        if refused is not None:
            raise refused
        self.chunked = b"transfer-encoding" in fields
        if self.chunked:
            self.announced = wire.Announced()
        self.left = int(fields.get(b"content-length", 0))
        connection = fields.get(b"connection")
        self.keep = version == b"HTTP/1.1" if connection is None else wire.keeps(
            version, connection)
        self.expects_continue = version == b"HTTP/1.1" and not self.buf and (
            self.chunked or self.left > 0) and \
            fields.get(b"expect", b"").strip().lower() == b"100-continue"

    def _read_body(self) -> None:
        """Feed the body at hand: a chunked one up to each CR LF CR LF in turn (one inside a
        chunk's data ends no request: the parser reads on to the next), until the request
        ends or the bytes at hand do."""
        buf = self.buf
        while buf and self.stage == BODY:
            if self.chunked:  # up to where its last chunk may end: never into the next one
                end = (self.tail + buf).find(LAST_CHUNK_END)
                size = len(buf) if end < 0 else end + len(LAST_CHUNK_END) - len(self.tail)
            else:
                size = min(self.left, len(buf))
                self.left -= size
            piece = bytes(buf[:size])
            del buf[:size]
            self.tail = (self.tail + piece)[-3:] if self.chunked else b""
            try:
                self.parser.feed_data(piece)
            except FOUND as err:
                raise wire.Refused(400, f"invalid request body: {err}") from None
            if self.chunked and self.announced.add(piece) > self.cap >= 0:
                raise wire.too_large(self.cap)  # announced: refused before its data comes

    # ---- answering ----

    def reply(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes, *,
              reason: bytes) -> bytes:
        """The answer to the request read whole, its length among `headers` (b"" when it
        was answered already); Connection: close where the request does not keep the
        connection."""
        if self.replied or self.stage != DONE:
            return b""
        self.replied = True
        lines = [b"HTTP/1.1 %d %s" % (status, reason or wire.REASONS.get(status, b""))]
        lines += map(b": ".join, headers)
        if (not self.keep or self.version != b"HTTP/1.1") and not any(
                name.lower() == b"connection" for name, _ in headers):
            lines.append(b"Connection: keep-alive" if self.keep else b"Connection: close")
        lines += (b"", body)
        return b"\r\n".join(lines)

    def refuse(self, refused: wire.Refused) -> bytes:
        """The refusal's bytes; the connection closes after it (b"" when answered already)."""
        if self.replied:
            return b""
        self.replied = True
        kind, body = refused.body()
        return b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\nconnection: close\r\n" \
               b"content-length: %d\r\n\r\n%s" % (
                   refused.status, wire.REASONS.get(refused.status, b""), kind, len(body), body)

    def next_cycle(self) -> bool:
        """Ready for the connection's next request (False: it closes now)."""
        if not (self.replied and self.keep and self.stage == DONE):
            return False
        self.stage, self.replied, self.tail = HEAD, False, b""
        self._request()
        return True
