"""A bare byte relay on the front's event loop, for bench-endpoint's floor only (never serves).

    python scripts/bench/relay.py <port> <upstream port>

Each client connection gets one kept-alive connection to the upstream server, and bytes pass
both ways as they come: no parsing, no rules, no timers, no log. What it adds to a request is
the least any front written in Python on uvloop can add (two loopback hops and two wake-ups
of one process), so bench-endpoint shows the front's own cost beside it.
"""

from __future__ import annotations

import asyncio
import socket
import sys

HOST = "127.0.0.1"


def _nodelay(transport: asyncio.Transport) -> None:
    transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Upstream(asyncio.Protocol):
    def __init__(self, client: Client) -> None:
        self.client = client

    def connection_made(self, transport) -> None:
        _nodelay(transport)

    def data_received(self, data: bytes) -> None:
        self.client.transport.write(data)

    def connection_lost(self, exc) -> None:
        self.client.transport.close()


class Client(asyncio.Protocol):
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.upstream: asyncio.Transport | None = None
        self.waiting: list[bytes] = []
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        _nodelay(transport)
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        self.upstream, _ = await loop.create_connection(lambda: Upstream(self), HOST,
                                                        self.upstream_port)
        for data in self.waiting:
            self.upstream.write(data)

    def data_received(self, data: bytes) -> None:
        if self.upstream is None:
            self.waiting.append(data)
        else:
            self.upstream.write(data)

    def connection_lost(self, exc) -> None:
        if self.upstream is not None:
            self.upstream.close()


async def serve(port: int, upstream_port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Client(upstream_port), HOST, port)
    await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    port, upstream_port = map(int, (sys.argv[1:] if argv is None else argv))
    try:
        from uvloop import run
    except ImportError:  # the front's own fallback
        from asyncio import run
    run(serve(port, upstream_port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
