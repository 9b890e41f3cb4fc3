"""HTTP/1.1 rules of the local endpoint's front (front_inbound.py reads clients' requests
with llhttp; front_upstream.py reads deployments' answers with it): what nginx refuses, the
request as a deployment's server gets it, the answer as the endpoint gives it, and the body's
spool. No sockets here: every rule is a function of bytes, tested with bytes alone.

Refused as nginx refuses them (nginx 1.25's ngx_http_parse.c and ngx_http_request.c):
  - a field line that starts with a space or tab (obsolete line folding): 400;
  - a second Host, Content-Length, Transfer-Encoding, Authorization or Expect (nginx's unique
    fields), or a second azureml-model-deployment (two routes for one request): 400;
  - a Host that is empty, or holds a space, a control byte, `/` or `..`: 400;
  - a request line of 8 KiB or more: 414; a field line over 8 KiB: 400;
  - a Content-Length that is not digits alone (`+5`, `6_685`, `5, 5`): 400;
  - Transfer-Encoding in an HTTP/1.0 request, or beside Content-Length: 400; any coding but
    `chunked` alone: 501;
  - a method of anything but capitals, `_` and `-`: 400; TRACE or CONNECT: 405; an HTTP
    version other than 1.x: 505; an HTTP/1.1 request without Host: 400.
Every refusal of a request's head or body closes the connection (the front's own answers
to a request read whole, 429, 408 and 502, keep it, as nginx's 429, 502 and 504 do).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

HEAD_S = float(os.environ.get("FRONT_HEAD_TIMEOUT_S", "10"))
BODY_S = float(os.environ.get("FRONT_BODY_TIMEOUT_S", "60"))
IDLE_S = float(os.environ.get("FRONT_IDLE_TIMEOUT_S", "5"))
MAX_HEAD = 64 * 1024
SPOOL_MEMORY = 1 << 20  # a longer body waits in a temporary file, not in memory
REASONS = {200: b"OK", 400: b"Bad Request", 401: b"Unauthorized", 404: b"Not Found",
           405: b"Not Allowed",
           408: b"Request Timeout", 413: b"Payload Too Large", 414: b"URI Too Long",
           424: b"Failed Dependency",
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
HEX = re.compile(rb"[0-9A-Fa-f]+")
FOLDED = re.compile(rb"\n[ \t]")
BARE_LF = re.compile(rb"(?<!\r)\n")
BAD_HOST = re.compile(rb"[\x00-\x20\x7f/]|\.\.")
HOSTS: dict[bytes, bool] = {}  # Host values found good
MAX_LINE = 8 * 1024  # nginx's large_client_header_buffers 4 8k: a request or field line


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
    line); None when nothing is. Read where llhttp refused the head, to answer as nginx."""
    line, _, rest = head.partition(b"\n")
    method, _, rest_of_line = line.rstrip(b"\r").partition(b" ")
    version = rest_of_line.rpartition(b" ")[2]
    if not METHOD.fullmatch(method):
        return Refused(400, "invalid method")
    refused = line_refusal(method, version)
    if refused is not None:
        return refused
    fields = b"\n" + rest.lower()  # each field line starts after a LF
    if FOLDED.search(fields):
        return Refused(400, "obsolete line folding (a field line that starts with a space)")
    values = {name: [v.strip(b" \t\r") for v in pattern.findall(fields)]
              for name, pattern in UNIQUE_FIELDS.items()}
    twice = [name.decode() for name in UNIQUE_FIELDS if len(values[name]) > 1]
    if twice:
        return Refused(400, f"duplicate {twice[0]} field")
    length = values[b"content-length"]
    if length and not DIGITS.fullmatch(length[0]):
        return Refused(400, "invalid Content-Length")
    return field_refusal(version, {name: found[0] for name, found in values.items() if found},
                         host_needed=False)


def check_lines(head: bytes) -> None:
    """nginx's limits on a head's lines (large_client_header_buffers 4 8k): a request line of
    MAX_LINE bytes or more is a 414, a field line that long a 400 (nginx's 494, sent as 400
    "Request Header Or Cookie Too Large")."""
    lines = head.split(b"\n")
    if len(lines[0]) >= MAX_LINE:
        raise Refused(414, f"request line over {MAX_LINE} bytes")
    if max(map(len, lines)) > MAX_LINE:
        raise Refused(400, f"a field line over {MAX_LINE} bytes")


def line_refusal(method: bytes, version: bytes) -> Refused | None:
    """nginx's refusals of a request line's method and version (each a token already)."""
    if method == b"TRACE" or method == b"CONNECT":
        return Refused(405, f"{method.decode()} is not allowed")
    if version.startswith(b"HTTP/") and not version.startswith(b"HTTP/1."):
        return Refused(505, f"HTTP version {version.decode('latin-1')} is not supported")
    return None


def target_refusal(target: bytes) -> Refused | None:
    """nginx's refusals of a request target (read only for one that is not a plain path: not
    starting with `/`, or holding `/.` or `%`): `*` or any other that is neither a path nor
    absolute (`http://host/path`), and a path whose `..` segments, once %-decoded, climb above
    the root (`/../x`, `/%2e%2e/x`): 400, as ngx_http_parse_complex_uri refuses them."""
    if target[:1] != b"/":
        scheme, found, rest = target.partition(b"://")
        if not (found and scheme.isalpha()):
            return Refused(400, "invalid request target (neither a path nor an absolute URI)")
        target = b"/" + rest.partition(b"/")[2]
    depth = 0
    for segment in unquote_to_bytes(target.partition(b"?")[0]).split(b"/"):
        if segment == b"..":
            depth -= 1
            if depth < 0:
                return Refused(400, "invalid request target (a path above the root)")
        elif segment not in (b"", b"."):
            depth += 1
    return None


def keeps(version: bytes, connection: bytes) -> bool:
    """Whether a request with this Connection field keeps the connection: HTTP/1.1 unless it
    says `close`; HTTP/1.0 only when it says `keep-alive` (RFC 9112 9.3), as nginx keeps it."""
    tokens = {token.strip().lower() for token in connection.split(b",")}
    return b"close" not in tokens and (version == b"HTTP/1.1" or b"keep-alive" in tokens)


def field_refusal(version: bytes, fields: dict[bytes, bytes], *,
                  host_needed: bool = True) -> Refused | None:
    """nginx's refusals of a request's framing fields (`fields`: by lower-case name, each
    once), and of an HTTP/1.1 request without Host."""
    coding = fields.get(b"transfer-encoding")
    if coding is not None:
        if version == b"HTTP/1.0":
            return Refused(400, "Transfer-Encoding in an HTTP/1.0 request")
        if coding.strip(b" \t").lower() != b"chunked":
            return Refused(501, f"unknown Transfer-Encoding {coding.decode('latin-1')!r}")
        if b"content-length" in fields:
            return Refused(400, "both Content-Length and Transfer-Encoding")
    host = fields.get(b"host")
    if host is None:
        if host_needed and version == b"HTTP/1.1":
            return Refused(400, "an HTTP/1.1 request without a Host field")
    elif not (HOSTS.get(host) or good_host(host)):  # (clients send one Host again and again)
        return Refused(400, f"invalid Host {host.decode('latin-1')!r}")
    return None


def good_host(host: bytes) -> bool:
    """nginx's check of a Host field (ngx_http_validate_host; RFC 9112 3.2 refuses an invalid
    one with a 400): no space, control byte or `/`, no `..`, and a name before its port. The
    good ones are kept in HOSTS (a few hundred at most)."""
    value = host.rstrip(b" \t")
    good = BAD_HOST.search(value) is None and value.partition(b":")[0].rstrip(b".") != b""
    if good:
        if len(HOSTS) >= 256:
            HOSTS.clear()
        HOSTS[host] = True
    return good


@dataclass(slots=True)
class Forward:
    """A request as the deployment's server gets it."""

    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]

    def head(self, host: bytes) -> bytes:
        """Its head's bytes, written from fields llhttp already checked (`host`: the Host
        field when the client, in HTTP/1.0, sent none)."""
        lines = [b"%s %s HTTP/1.1" % (self.method, self.target)]
        for name, _ in self.headers:
            if name.lower() == b"host":
                break
        else:
            lines.append(b"Host: " + host)
        lines += map(b": ".join, self.headers)
        lines += (b"", b"")
        return b"\r\n".join(lines)


def upstream_request(method: bytes, target: bytes, items: list[tuple[bytes, bytes]], *,
                     length: int, connection: bytes = b"") -> Forward:
    """The request as the deployment's server gets it (`items`: its fields as they came;
    `connection`: its Connection field): the connection's own fields dropped (and those its
    Connection field names), the body's length."""
    hop = HOP_BY_HOP
    if connection:
        hop = hop | {token.strip().lower() for token in connection.split(b",")}
    headers = [field for field in items if field[0].lower() not in hop]
    headers.append((b"Content-Length", b"%d" % length))
    return Forward(method, target, headers)


def relabeled(status: int, reason: bytes, headers, *, deployment: str
              ) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    """The deployment's answer as the endpoint gives it (Azure's rule): a status other than
    200 becomes 424 with the server's status and reason in ms-azureml-model-error-*, and
    azureml-model-deployment names who answered. The length is set by the caller."""
    kept = [field for field in headers if field[0].lower() not in HOP_BY_HOP]
    kept.append((b"azureml-model-deployment", deployment.encode()))
    if status != 200:
        kept += [(b"ms-azureml-model-error-statuscode", b"%d" % status),
                 (b"ms-azureml-model-error-reason", reason)]
        status, reason = 424, REASONS[424]
    return status, reason, kept


class Announced:
    """The sizes a chunked body announces, summed as their lines arrive, so that one announced
    past the cap is refused before its data comes, as nginx refuses it ("client intended to
    send too large chunked body"). It reads bytes llhttp has already checked (each size line
    is hex digits, then extensions, then CR LF) and skips each chunk's data by its size: work
    per chunk, not per byte."""

    __slots__ = ("total", "left", "line", "ended")

    def __init__(self) -> None:
        self.total = 0  # the sizes announced so far
        self.left = 0  # bytes of the current chunk's data and its CR LF still to come
        self.line = b""  # the start of a size line split across reads
        self.ended = False  # the last chunk came: trailers follow

    def add(self, piece: bytes) -> int:
        """The body's next bytes (as fed to llhttp); the total announced so far."""
        at, end = 0, len(piece)
        while at < end and not self.ended:
            if self.left:
                step = min(self.left, end - at)
                self.left -= step
                at += step
                continue
            stop = piece.find(b"\n", at)
            if stop < 0:  # (the size is in its first 17 bytes: extensions are not kept)
                self.line = (self.line + piece[at:])[:64]
                break
            found = HEX.match(self.line + piece[at:stop])
            size = int(found[0], 16) if found else 0  # (llhttp refuses a line without one)
            self.line, at = b"", stop + 1
            self.total += size
            self.left, self.ended = size + 2, size == 0
        return self.total


class Body:
    """A request's body as it arrives (or a deployment's answer past SPOOL_MEMORY bytes:
    `spill`, in the file from the start): in memory up to SPOOL_MEMORY bytes, then in a
    temporary file; 413 as soon as it passes `limit`."""

    def __init__(self, limit: int, *, spill: bool = False):
        self.limit, self.size = limit, 0
        self.parts: list[bytes] = []
        self.file = tempfile.TemporaryFile() if spill else None  # noqa: SIM115 - close()

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

    def whole(self) -> bytes | None:
        """The body as one piece while it is held in memory (None: it is in a file)."""
        if self.file is not None:
            return None
        if len(self.parts) != 1:
            self.parts = [b"".join(self.parts)]
        return self.parts[0]

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

    def __len__(self) -> int:
        return self.size
