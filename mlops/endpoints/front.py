"""The local endpoint's front, as Azure's proxy fronts a deployment's server: it holds the
clients, so slow or stalled ones never tie up the scoring threads.

    python mlops/endpoints/front.py <listen port> <server port> -- <server command ...>

It starts the server (gunicorn) as its child on the second port and answers on the first. Per
connection: a request's head must arrive within HEAD_S seconds of its first byte and its body
within BODY_S (else 408, and the connection closes); an idle keep-alive connection closes after
IDLE_S. A complete request goes to the server on a connection of its own; pipelined requests
are answered in order, each of them. Standard library only: it runs in the deployment's
environment, as the server does, and starts by its file's path.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys

HEAD_S = float(os.environ.get("FRONT_HEAD_TIMEOUT_S", "10"))
BODY_S = float(os.environ.get("FRONT_BODY_TIMEOUT_S", "60"))
IDLE_S = float(os.environ.get("FRONT_IDLE_TIMEOUT_S", "5"))
MAX_HEAD = 64 * 1024
HOST = "127.0.0.1"


class Refused(Exception):
    def __init__(self, status: str):
        super().__init__(status)
        self.status = status


def headers_of(head: bytes) -> dict[str, str]:
    lines = head.decode("latin-1").split("\r\n")[1:]
    return {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines
                                                         if ":" in line)}


async def read_head(reader: asyncio.StreamReader) -> bytes | None:
    """A request's head; None when the client closed (or sat idle) between requests."""
    try:
        first = await asyncio.wait_for(reader.read(1), IDLE_S)
    except TimeoutError:
        return None
    if not first:
        return None
    try:
        rest = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_S)
    except TimeoutError:
        raise Refused("408 Request Timeout") from None
    except asyncio.LimitOverrunError:
        raise Refused("431 Request Header Fields Too Large") from None
    except asyncio.IncompleteReadError:
        return None
    return first + rest


async def read_body(reader: asyncio.StreamReader, fields: dict[str, str]) -> bytes:
    async def body() -> bytes:
        if "chunked" in fields.get("transfer-encoding", "").lower():
            parts = []
            while True:
                line = await reader.readuntil(b"\r\n")
                parts.append(line)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (trailer := await reader.readuntil(b"\r\n")) != b"\r\n":
                        parts.append(trailer)
                    return b"".join(parts) + b"\r\n"
                parts.append(await reader.readexactly(size + 2))
        return await reader.readexactly(int(fields.get("content-length", "0") or 0))

    try:
        return await asyncio.wait_for(body(), BODY_S)
    except TimeoutError:
        raise Refused("408 Request Timeout") from None
    except (ValueError, asyncio.IncompleteReadError):
        raise Refused("400 Bad Request") from None


async def read_all(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes, even when it resets the connection."""
    chunks = []
    while True:
        try:
            chunk = await reader.read(1 << 16)
        except ConnectionError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


async def forward(head: bytes, body: bytes, upstream: int) -> tuple[bytes, bool]:
    """The server's answer, and whether the client's connection may stay open after it."""
    request_line, _, rest = head.partition(b"\r\n")
    kept = [line for line in rest.split(b"\r\n") if line and
            not line.lower().startswith((b"connection:", b"keep-alive:", b"expect:"))]
    head = b"\r\n".join([request_line, *kept, b"Connection: close", b"", b""])
    reader, writer = await asyncio.open_connection(HOST, upstream)
    answering = asyncio.create_task(read_all(reader))  # read while sending: the server may
    try:  # answer (413) and close before it read the whole body, and its answer still counts
        with contextlib.suppress(ConnectionError):
            writer.write(head + body)
            await writer.drain()
        answer = await answering
    finally:
        writer.close()
    if not answer:
        raise Refused("502 Bad Gateway")
    answer_head, _, _ = answer.partition(b"\r\n\r\n")
    fields = headers_of(answer_head)
    framed = "content-length" in fields or "chunked" in fields.get("transfer-encoding", "")
    return answer, framed


def relabel(answer: bytes, closing: bool) -> bytes:
    """The server's answer with the client's connection header, not the server's."""
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    kept = [line for line in lines if not line.lower().startswith(b"connection:")]
    state = b"close" if closing else b"keep-alive"
    return b"\r\n".join([status, *kept, b"Connection: " + state]) + b"\r\n\r\n" + body


async def serve(reader, writer, upstream: int) -> None:
    try:
        while (head := await read_head(reader)) is not None:
            fields = headers_of(head)
            if fields.get("expect", "").lower() == "100-continue":
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                await writer.drain()
            body = await read_body(reader, fields)
            answer, framed = await forward(head, body, upstream)
            closing = fields.get("connection", "").lower() == "close" or not framed or \
                head.split(b"\r\n", 1)[0].endswith(b"HTTP/1.0")
            writer.write(relabel(answer, closing))
            await writer.drain()
            if closing:
                break
    except Refused as refused:
        writer.write(f"HTTP/1.1 {refused.status}\r\nContent-Length: 0\r\n"
                     "Connection: close\r\n\r\n".encode())
    except (ConnectionError, asyncio.IncompleteReadError, OSError):
        pass
    finally:
        writer.close()


async def run(port: int, upstream: int, server: subprocess.Popen) -> int:
    listener = await asyncio.start_server(lambda r, w: serve(r, w, upstream), HOST, port,
                                          limit=MAX_HEAD, backlog=1024)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with listener:
        while not stop.is_set() and server.poll() is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
    if server.poll() is None:
        server.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=10)
    return server.returncode or 0


def main(argv: list[str]) -> int:
    port, upstream, command = int(argv[0]), int(argv[1]), argv[argv.index("--") + 1:]
    server = subprocess.Popen(command)  # the same process group: stopped with this one
    return asyncio.run(run(port, upstream, server))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
