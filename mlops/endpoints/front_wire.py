"""HTTP/1.1 as the local endpoint's front reads and writes it: h11 (the sans-I/O HTTP/1.1 library
under uvicorn and httpx) parses every byte a client sends, and this module adds what nginx
refuses and h11 lets through; the answer to a whole request is written here (Inbound.reply),
as h11 writes it, from fields a parser checked; refusals are h11's. No sockets here (front.py
holds them): every rule is a function of bytes, tested with bytes alone.

Refused as nginx refuses them, read from the head as it came (h11 joins folded lines and merges
equal Content-Length values before anyone sees them):
  - a field line that starts with a space or tab (obsolete line folding): 400;
  - a second Host, Content-Length, Transfer-Encoding, Authorization or Expect (nginx's unique
    fields), or a second azureml-model-deployment (two routes for one request): 400;
  - a Content-Length that is not digits alone (`+5`, `6_685`, `5, 5`): 400;
  - Transfer-Encoding in an HTTP/1.0 request, or beside Content-Length: 400; any coding but
    `chunked` alone: 501;
  - a method of anything but capitals, `_` and `-`: 400; TRACE or CONNECT: 405; an HTTP
    version other than 1.x: 505;
  - a chunk line or trailer ended by a bare LF (h11 would wait for a CR LF): 400.
Empty lines before a request line are skipped, as nginx skips them. Every refusal closes the
connection.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import h11

HEAD_S = float(os.environ.get("FRONT_HEAD_TIMEOUT_S", "10"))
BODY_S = float(os.environ.get("FRONT_BODY_TIMEOUT_S", "60"))
IDLE_S = float(os.environ.get("FRONT_IDLE_TIMEOUT_S", "5"))
MAX_HEAD = 64 * 1024
SPOOL_MEMORY = 1 << 20  # a longer body waits in a temporary file, not in memory
REASONS = {200: b"OK", 400: b"Bad Request", 401: b"Unauthorized", 404: b"Not Found",
           405: b"Not Allowed",
           408: b"Request Timeout", 413: b"Payload Too Large", 424: b"Failed Dependency",
           429: b"Too Many Requests", 431: b"Request Header Fields Too Large",
           501: b"Not Implemented", 502: b"Bad Gateway", 503: b"Service Unavailable",
           505: b"HTTP Version Not Supported"}
UNIQUE_FIELDS = {name: re.compile(rb"\n" + name + rb":([^\n]*)") for name in (
    b"host", b"content-length", b"transfer-encoding", b"authorization", b"expect",
    b"azureml-model-deployment")}
# Hop-by-hop fields: the connection's own, never passed on (RFC 9110 7.6.1); the length is
# set anew for the bytes that are passed on.
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer",
                        b"transfer-encoding", b"upgrade", b"content-length", b"expect",
                        b"proxy-authenticate", b"proxy-authorization"})
METHOD = re.compile(rb"[A-Z_-]+")
DIGITS = re.compile(rb"[0-9]+")
HEAD_END = re.compile(rb"\n\r?\n")  # where h11 ends a head
FOLDED = re.compile(rb"\n[ \t]")
BARE_LF = re.compile(rb"(?<!\r)\n")


class Refused(Exception):
    """An answer the front gives itself; the connection closes after it."""

    def __init__(self, status: int, message: str, *, text: bool = False):
        super().__init__(message)
        self.status, self.message, self.text = status, message, text

    def body(self) -> tuple[bytes, bytes]:
        """The answer's content type and body: Azure's plain text 401s, JSON otherwise."""
        if self.text:
            return b"text/plain", self.message.encode()
        return b"application/json", json.dumps({"message": self.message}).encode()


def too_large(limit: int) -> Refused:
    return Refused(413, f"request body over this deployment's limit of {limit} bytes")


def nginx_refusal(head: bytes) -> Refused | None:
    """What nginx refuses in a request's head (`head`: its bytes as they came, to the blank
    line) that h11 lets through; None when nothing is."""
    line, _, rest = head.partition(b"\n")
    method, _, rest_of_line = line.rstrip(b"\r").partition(b" ")
    version = rest_of_line.rpartition(b" ")[2]
    if not METHOD.fullmatch(method):
        return Refused(400, "invalid method")
    if method in (b"TRACE", b"CONNECT"):
        return Refused(405, f"{method.decode()} is not allowed")
    if version.startswith(b"HTTP/") and not version.startswith(b"HTTP/1."):
        return Refused(505, f"HTTP version {version.decode('latin-1')} is not supported")
    fields = b"\n" + rest.lower()  # each field line starts after a LF
    if FOLDED.search(fields):
        return Refused(400, "obsolete line folding (a field line that starts with a space)")
    values = {name: [v.strip(b" \t\r") for v in pattern.findall(fields)]
              for name, pattern in UNIQUE_FIELDS.items()}
    twice = [name.decode() for name in UNIQUE_FIELDS if len(values[name]) > 1]
    if twice:
        return Refused(400, f"duplicate {twice[0]} field")
    length, coding = values[b"content-length"], values[b"transfer-encoding"]
    if length and not DIGITS.fullmatch(length[0]):
        return Refused(400, "invalid Content-Length")
    if coding and version == b"HTTP/1.0":
        return Refused(400, "Transfer-Encoding in an HTTP/1.0 request")
    if coding and coding[0] != b"chunked":
        return Refused(501, f"unknown Transfer-Encoding {coding[0].decode('latin-1')!r}")
    if coding and length:
        return Refused(400, "both Content-Length and Transfer-Encoding")
    return None


class Inbound:
    """One client connection's requests, as h11 reads them with nginx's refusals on top, and
    the answers written for them."""

    def __init__(self) -> None:
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        self.head = bytearray()  # the request's bytes as they came, until its head is read
        self.reading_head = True
        self.chunked = False
        self.keep = False  # the request lets the connection serve the next one (h11's rule)
        self.replied = False  # answered by reply(), not through h11

    def feed(self, data: bytes) -> None:
        """Bytes from the client (b"": it closed its side)."""
        if self.reading_head and data:
            if not self.head and self.conn.their_state is h11.IDLE:
                data = data.lstrip(b"\r\n")  # nginx skips empty lines before a request line
                if not data:
                    return
            if len(self.head) <= MAX_HEAD:
                self.head += data
        self.conn.receive_data(data)

    def next_event(self):
        """The next thing h11 read: a Request (checked), Data, EndOfMessage, NEED_DATA,
        PAUSED or ConnectionClosed; Refused for what h11 or nginx's rules refuse."""
        try:
            event = self.conn.next_event()
        except h11.RemoteProtocolError as err:
            raise self._refusal(err) from None
        if type(event) is h11.Request:
            self._check(event)
        elif event is h11.NEED_DATA and self.chunked and \
                self.conn.their_state is h11.SEND_BODY and \
                BARE_LF.search(self.conn.trailing_data[0]):
            raise Refused(400, "a chunk line ended by LF alone, not CR LF")
        return event

    def body_for(self, fields: dict[bytes, bytes], limit: int) -> Body:
        """Where the request's body goes (`fields`: its fields by lower-case name); 413 at once
        when its announced length is over `limit` (a chunked body's cap applies to its bytes
        as they come)."""
        if int(fields.get(b"content-length", 0)) > limit:
            raise too_large(limit)
        return Body(limit)

    def _head_bytes(self) -> bytes | None:
        end = HEAD_END.search(self.head)
        return bytes(self.head[:end.end()]) if end else None

    def _check(self, request: h11.Request) -> None:
        head = self._head_bytes()
        self.reading_head = False
        self.head = bytearray()
        if head is None or len(head) > MAX_HEAD:  # h11 bounds only a head still incomplete
            raise Refused(431, f"request head over {MAX_HEAD} bytes")
        refused = nginx_refusal(head)
        if refused is not None:
            raise refused
        self.chunked = any(name == b"transfer-encoding" for name, _ in request.headers)
        self.keep = request.http_version == b"1.1" and b"close" not in {
            token.strip().lower() for name, value in request.headers if name == b"connection"
            for token in value.split(b",")}

    def _refusal(self, err: h11.RemoteProtocolError) -> Refused:
        head = self._head_bytes() if self.reading_head else None
        return (head and nginx_refusal(head)) or Refused(err.error_status_hint, str(err))

    def respond(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes, *,
                reason: bytes = b"") -> bytes:
        """The answer's bytes (b"" when the connection can no longer answer)."""
        try:
            out = self.conn.send(h11.Response(status_code=status, headers=headers,
                                              reason=reason or REASONS.get(status, b"")))
            if body:
                out += self.conn.send(h11.Data(data=body))
            return out + self.conn.send(h11.EndOfMessage())
        except h11.LocalProtocolError:
            return b""

    def reply(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes, *,
              reason: bytes) -> bytes:
        """The answer to a request read whole, its length among `headers` (b"" when the
        connection cannot answer): written here, not through h11, from fields a parser
        already checked (llhttp's, of the deployment's answer) and the front's own, as h11
        writes them: Connection: close where the request does not keep the connection."""
        if self.replied or self.conn.our_state is not h11.SEND_RESPONSE or \
                self.conn.their_state not in (h11.DONE, h11.MUST_CLOSE):
            return b""
        self.replied = True
        if not self.keep and not any(name.lower() == b"connection" for name, _ in headers):
            headers = [*headers, (b"Connection", b"close")]
        lines = [b"HTTP/1.1 %d %s\r\n" % (status, reason or REASONS.get(status, b""))]
        lines += [b"%s: %s\r\n" % field for field in headers]
        lines += [b"\r\n", body]
        return b"".join(lines)

    def refuse(self, refused: Refused) -> bytes:
        kind, body = refused.body()
        return self.respond(refused.status, [(b"content-type", kind), (b"connection", b"close"),
                                             (b"content-length", b"%d" % len(body))], body)

    def next_cycle(self) -> bool:
        """Ready for the connection's next request (False: it closes now)."""
        pending, _ = self.conn.trailing_data
        if self.replied and self.keep:  # h11 did not see the answer: a new h11 for the next
            self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
            if pending:  # (b"" would tell h11 the client closed)
                self.conn.receive_data(pending)
        elif self.conn.our_state is not h11.DONE or self.conn.their_state is not h11.DONE:
            return False
        else:
            self.conn.start_next_cycle()
        self.head, self.reading_head, self.chunked = bytearray(), True, False
        self.keep = self.replied = False
        if pending:  # pipelined: the next request is already here
            self.head += pending[:MAX_HEAD + 1]
        return True


def fields_of(message) -> tuple[list[tuple[bytes, bytes]], dict[bytes, bytes]]:
    """A request's or answer's fields as they came, and by lower-case name."""
    items = message.headers.raw_items()
    return items, {name.lower(): value for name, value in items}


@dataclass(frozen=True)
class Forward:
    """A request as the deployment's server gets it."""

    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]

    def head(self, host: bytes) -> bytes:
        """Its head's bytes, written from fields h11 already checked (`host`: the Host field
        when the client, in HTTP/1.0, sent none)."""
        lines = [b"%s %s HTTP/1.1\r\n" % (self.method, self.target)]
        if not any(name.lower() == b"host" for name, _ in self.headers):
            lines.append(b"Host: %s\r\n" % host)
        lines += [b"%s: %s\r\n" % field for field in self.headers]
        lines.append(b"\r\n")
        return b"".join(lines)


def upstream_request(request: h11.Request, items: list[tuple[bytes, bytes]],
                     length: int) -> Forward:
    """The request as the deployment's server gets it (`items`: its fields as they came): the
    connection's own fields dropped (and those its Connection field names), the body's
    length."""
    hop = HOP_BY_HOP
    for name, value in items:
        if name.lower() == b"connection":
            hop = hop | {token.strip().lower() for token in value.split(b",")}
    headers = [(name, value) for name, value in items if name.lower() not in hop]
    headers.append((b"Content-Length", b"%d" % length))
    return Forward(request.method, request.target, headers)


def relabeled(status: int, reason: bytes, headers, *, deployment: str
              ) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    """The deployment's answer as the endpoint gives it (Azure's rule): a status other than
    200 becomes 424 with the server's status and reason in ms-azureml-model-error-*, and
    azureml-model-deployment names who answered. The length is set by the caller."""
    kept = [(name, value) for name, value in headers if name.lower() not in HOP_BY_HOP]
    kept.append((b"azureml-model-deployment", deployment.encode()))
    if status != 200:
        kept += [(b"ms-azureml-model-error-statuscode", b"%d" % status),
                 (b"ms-azureml-model-error-reason", reason)]
        status, reason = 424, REASONS[424]
    return status, reason, kept


class Body:
    """A request's body as it arrives: in memory up to SPOOL_MEMORY bytes, then in a temporary
    file; 413 as soon as it passes `limit`."""

    def __init__(self, limit: int):
        self.limit, self.size = limit, 0
        self.parts: list[bytes] = []
        self.file = None

    def add(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise too_large(self.limit)
        if self.file is None and self.size > SPOOL_MEMORY:
            self.file = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
            self.file.writelines(self.parts)
            self.parts = []
        if self.file is not None:
            self.file.write(data)
        else:
            self.parts.append(data)

    def chunks(self) -> Iterator[bytes]:
        """The body in pieces, from its start (again at each call)."""
        if self.file is None:
            if len(self.parts) > 1:
                self.parts = [b"".join(self.parts)]
            yield from self.parts
            return
        self.file.seek(0)
        while piece := self.file.read(1 << 16):
            yield piece

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
