"""HTTP/1.1 as the local endpoint's front reads and writes it: a request's head within a
deadline, its body into a spool that holds at most SPOOL_MEMORY bytes in memory and refuses a
body past the deployment's limit as it arrives (413, Content-Length or chunked), and the
deployment server's answer. Standard library only (the front starts by its path).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
from dataclasses import dataclass, field

HEAD_S = float(os.environ.get("FRONT_HEAD_TIMEOUT_S", "10"))
BODY_S = float(os.environ.get("FRONT_BODY_TIMEOUT_S", "60"))
IDLE_S = float(os.environ.get("FRONT_IDLE_TIMEOUT_S", "5"))
MAX_HEAD = 64 * 1024
SPOOL_MEMORY = 1 << 20  # a longer body waits in a temporary file, not in memory
HOP_BY_HOP = (b"connection:", b"keep-alive:", b"expect:", b"transfer-encoding:",
              b"content-length:", b"te:", b"upgrade:", b"proxy-")
REASONS = {400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 408: "Request Timeout",
           413: "Payload Too Large", 424: "Failed Dependency", 429: "Too Many Requests",
           431: "Request Header Fields Too Large", 502: "Bad Gateway",
           503: "Service Unavailable"}


class Refused(Exception):
    """An answer the front gives itself; the connection closes after it."""

    def __init__(self, status: int, message: str, *, text: bool = False):
        super().__init__(message)
        self.status, self.message, self.text = status, message, text

    def answer(self) -> bytes:
        body = self.message.encode() if self.text else json.dumps(
            {"message": self.message}).encode()
        kind = "text/plain" if self.text else "application/json"
        return (f"HTTP/1.1 {self.status} {REASONS.get(self.status, '')}\r\nContent-Type: "
                f"{kind}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                ).encode() + body


@dataclass
class Head:
    raw: bytes
    fields: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: bytes) -> Head:
        lines = raw.decode("latin-1").split("\r\n")[1:]
        return cls(raw, {k.strip().lower(): v.strip() for k, _, v in
                         (line.partition(":") for line in lines if ":" in line)})

    @property
    def request_line(self) -> bytes:
        return self.raw.split(b"\r\n", 1)[0]

    @property
    def chunked(self) -> bool:
        return "chunked" in self.fields.get("transfer-encoding", "").lower()

    @property
    def closes(self) -> bool:
        return self.fields.get("connection", "").lower() == "close" or \
            self.request_line.endswith(b"HTTP/1.0")

    def upstream(self, length: int) -> bytes:
        """The head the deployment's server gets: no hop-by-hop fields, the body's length."""
        kept = [line for line in self.raw.split(b"\r\n")[1:] if line and
                not line.lower().startswith(HOP_BY_HOP)]
        return b"\r\n".join([self.request_line, *kept,
                             b"Content-Length: %d" % length, b"Connection: close", b"", b""])


async def first_byte(reader: asyncio.StreamReader, stopping: asyncio.Event) -> bytes:
    """The next request's first byte; b"" when the client closed or sat idle, or when the front
    stops and nothing more arrives within a moment."""
    read = asyncio.ensure_future(reader.read(1))
    stop = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait({read, stop}, timeout=IDLE_S, return_when=asyncio.FIRST_COMPLETED)
        if not read.done() and stopping.is_set():  # a request sent just as the stop came
            await asyncio.wait({read}, timeout=1.0)
        return read.result() if read.done() else b""
    finally:
        stop.cancel()
        read.cancel()


async def read_head(reader: asyncio.StreamReader, stopping: asyncio.Event) -> Head | None:
    """A request's head; None when the client closed (or sat idle) between requests."""
    first = await first_byte(reader, stopping)
    if not first:
        return None
    try:
        rest = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_S)
    except TimeoutError:
        raise Refused(408, "the request's head did not arrive in time") from None
    except asyncio.LimitOverrunError:
        raise Refused(431, f"request head over {MAX_HEAD} bytes") from None
    except asyncio.IncompleteReadError:
        return None
    return Head.parse(first + rest)


def too_large(limit: int) -> Refused:
    return Refused(413, f"request body over this deployment's limit of {limit} bytes")


async def _copy(reader: asyncio.StreamReader, spool, count: int) -> None:
    while count:
        chunk = await reader.read(min(count, 1 << 16))
        if not chunk:
            raise asyncio.IncompleteReadError(b"", count)
        spool.write(chunk)
        count -= len(chunk)


async def _sized(reader: asyncio.StreamReader, spool, head: Head, limit: int) -> int:
    length = int(head.fields.get("content-length", "0") or 0)
    if length > limit:
        raise too_large(limit)
    if length < 0:
        raise ValueError(length)
    await _copy(reader, spool, length)
    return length


async def _chunked(reader: asyncio.StreamReader, spool, limit: int) -> int:
    total = 0
    while size := int((await reader.readuntil(b"\r\n")).split(b";")[0].strip() or b"0", 16):
        total += size
        if total > limit:
            raise too_large(limit)
        await _copy(reader, spool, size)
        await reader.readexactly(2)
    while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
        pass
    return total


async def read_body(reader: asyncio.StreamReader, head: Head, limit: int):
    """The body in a spool (a file object at offset 0) and its length; 413 past `limit`."""
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)  # noqa: SIM115 - returned
    fill = _chunked(reader, spool, limit) if head.chunked else _sized(reader, spool, head, limit)
    try:
        length = await asyncio.wait_for(fill, BODY_S)
    except BaseException as err:
        spool.close()
        if isinstance(err, TimeoutError):
            raise Refused(408, "the request's body did not arrive in time") from None
        if isinstance(err, (ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError)):
            raise Refused(400, "malformed request body framing") from None
        raise
    spool.seek(0)
    return spool, length


async def read_all(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes, even when it resets the connection."""
    chunks = []
    with contextlib.suppress(ConnectionError):
        while chunk := await reader.read(1 << 16):
            chunks.append(chunk)
    return b"".join(chunks)


async def exchange(port: int, head: bytes, spool) -> bytes:
    """Send a request to 127.0.0.1:port, the body streamed from its spool; the whole answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answering = asyncio.ensure_future(read_all(reader))  # read while sending: the server may
    try:  # answer (413) and close before it has read the whole body, and its answer counts
        with contextlib.suppress(ConnectionError):
            writer.write(head)
            spool.seek(0)
            while chunk := spool.read(1 << 16):
                writer.write(chunk)
                await writer.drain()
            await writer.drain()
        return await answering
    finally:
        answering.cancel()
        writer.close()


def relabel(answer: bytes, *, closing: bool, deployment: str) -> bytes:
    """The server's answer as the endpoint sends it: a status other than 200 becomes 424 with
    the server's status and reason in ms-azureml-model-error-* (Azure's rule; the body is the
    server's), the deployment named, the client's connection header."""
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    parts = status.split(b" ", 2)
    kept = [line for line in lines if not line.lower().startswith(b"connection:")]
    kept.append(b"azureml-model-deployment: " + deployment.encode())
    if parts[1:2] != [b"200"]:
        reason = parts[2] if len(parts) > 2 else b""
        kept += [b"ms-azureml-model-error-statuscode: " + parts[1],
                 b"ms-azureml-model-error-reason: " + reason]
        status = b"HTTP/1.1 424 Failed Dependency"
    kept.append(b"Connection: " + (b"close" if closing else b"keep-alive"))
    return b"\r\n".join([status, *kept]) + b"\r\n\r\n" + body


def framed(answer: bytes) -> bool:
    """Whether the answer says where it ends (else only closing the connection does)."""
    fields = Head.parse(answer.partition(b"\r\n\r\n")[0]).fields
    return "content-length" in fields or "chunked" in fields.get("transfer-encoding", "")
