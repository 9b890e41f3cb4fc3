"""The local endpoint's front: what Azure's endpoint does before a request reaches a deployment.

    python mlops/endpoints/front.py <endpoint folder>

It listens on the endpoint's port (endpoint.json, re-read whenever it changes) and, for each
request, in Azure's order:
  1. auth: `Authorization: Bearer <key or token>` (401 without it or with a wrong one);
  2. a deployment: the one the `azureml-model-deployment` header names, or one drawn by the
     endpoint's traffic weights (404 when no deployment has weight); a drawn request is copied
     to the mirror deployment at its mirror percentage, and that answer is dropped;
  3. at most 2 * max_concurrent_requests_per_instance * instance_count requests at once for the
     deployment (429 past it);
  4. the body, refused (413) past the deployment's limit as it arrives, held in a spool;
  5. the deployment's answer within request_timeout_ms (408 past it); a status other than 200
     becomes 424 with ms-azureml-model-error-statuscode/-reason; `azureml-model-deployment`
     names who answered.
It holds slow clients (head and body deadlines, answered 408), so a stalled client never holds
one of a server's threads. SIGTERM: it stops accepting, answers every request it accepted, then
exits. Standard library only: it starts by its path, in any environment's Python.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __package__:
    from mlops.endpoints import front_wire as wire
    from mlops.endpoints.endpoint_state import STATE_FILE, AuthMode, EndpointState, Slot
else:  # started by its path: this folder is first on sys.path
    import front_wire as wire  # type: ignore[no-redef]
    from endpoint_state import STATE_FILE, AuthMode, EndpointState, Slot  # type: ignore

HOST = "127.0.0.1"
LINGER_S = 2.0  # how long a refused client may go on sending
# Azure's 401 bodies for key auth, as clients see them (a missing or malformed header, a wrong
# key); Azure documents no body for the token modes, so theirs read the same way locally.
UNAUTHORIZED = {AuthMode.KEY: ("key_auth_bad_header_forbidden", "key_auth_access_denied"),
                AuthMode.AML_TOKEN: ("aml_token_auth_bad_header_forbidden",
                                     "aml_token_auth_access_denied"),
                AuthMode.AAD_TOKEN: ("aad_token_auth_bad_header_forbidden",
                                     "aad_token_auth_access_denied")}


@dataclass
class Route:
    slot: Slot
    mirror: Slot | None = None


class Router:
    """The endpoint's state as endpoint.json says it now, and the requests in flight."""

    def __init__(self, folder: Path):
        self.file = folder / STATE_FILE
        self.seen: tuple[int, int] = (0, 0)
        self.state = EndpointState(name="?")
        self.pending: dict[str, int] = {}
        self.current()

    def current(self) -> EndpointState:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):  # keep the last good
            stat = self.file.stat()
            if (stat.st_mtime_ns, stat.st_ino) != self.seen:
                self.state = EndpointState.read(self.file.parent) or self.state
                self.seen = (stat.st_mtime_ns, stat.st_ino)
        return self.state

    def authorize(self, head: wire.Head) -> None:
        state = self.current()
        if state.auth_mode == AuthMode.NONE:
            return
        missing, wrong = UNAUTHORIZED[state.auth_mode]
        scheme, _, bearer = head.fields.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not bearer.strip():
            raise wire.Refused(401, missing, text=True)
        if not state.accepts(bearer.strip()):
            raise wire.Refused(401, wrong, text=True)

    def route(self, head: wire.Head) -> Route:
        state = self.current()
        named = head.fields.get("azureml-model-deployment")
        if named:  # straight to it, whatever the weights; never mirrored
            if named not in state.deployments:
                raise wire.Refused(404, f"endpoint {state.name} has no deployment {named!r}")
            return Route(state.deployments[named])
        live = [(n, p) for n, p in state.traffic.items() if p > 0 and n in state.deployments]
        if not live:
            raise wire.Refused(404, f"endpoint {state.name} doesn't have any valid deployment "
                                    "with positive weight")
        name = random.choices([n for n, _ in live], [p for _, p in live])[0]
        mirror = next((state.deployments[n] for n, p in state.mirror_traffic.items()
                       if n in state.deployments and random.random() * 100 < p), None)
        return Route(state.deployments[name], mirror)

    @contextlib.contextmanager
    def admitted(self, slot: Slot):
        if self.pending.get(slot.name, 0) >= slot.max_pending:
            raise wire.Refused(429, f"too many pending requests for {slot.name}: at most "
                                    f"{slot.max_pending} at once (2 * max_concurrent_requests_"
                                    "per_instance * instance_count)")
        self.pending[slot.name] = self.pending.get(slot.name, 0) + 1
        try:
            yield
        finally:
            self.pending[slot.name] -= 1


async def answer(router: Router, slot: Slot, head: wire.Head, body) -> bytes:
    spool, length = body
    upstream = head.upstream(length)
    timeout = slot.timeout_ms / 1000 or None
    with router.admitted(slot):
        try:
            raw = await asyncio.wait_for(wire.exchange(slot.port, upstream, spool), timeout)
        except TimeoutError:
            raise wire.Refused(408, f"{slot.name} took longer than its request_timeout_ms "
                                    f"({slot.timeout_ms})") from None
        except OSError:
            raw = b""
    if not raw:
        raise wire.Refused(502, f"deployment {slot.name} closed the connection unanswered")
    return raw


async def mirrored(router: Router, slot: Slot, head: wire.Head, body) -> None:
    """A copy for the mirror deployment; its answer (or failure) is dropped, as Azure drops it."""
    try:
        with contextlib.suppress(wire.Refused, OSError):
            await answer(router, slot, head, body)
            print(f"mirror -> {slot.name}", flush=True)
    finally:
        body[0].close()


async def linger(reader) -> None:
    """Read and drop what the client still sends after a refusal until it closes: closing on
    unread data resets the connection, and a reset can discard the answer before it is read."""
    while await reader.read(1 << 16):
        pass


class Front:
    def __init__(self, folder: Path):
        self.router = Router(folder)
        self.stopping = asyncio.Event()
        self.connections: set[asyncio.Task] = set()
        self.background: set[asyncio.Task] = set()

    async def one(self, reader, writer, head: wire.Head) -> bool:
        """Answer one request; whether the connection stays open."""
        self.router.authorize(head)
        route = self.router.route(head)
        if head.fields.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = await wire.read_body(reader, head, route.slot.max_body)
        started = time.monotonic()
        try:
            raw = await answer(self.router, route.slot, head, body)
        finally:
            if route.mirror is None:
                body[0].close()
            else:
                task = asyncio.ensure_future(mirrored(self.router, route.mirror, head, body))
                self.background.add(task)
                task.add_done_callback(self.background.discard)
        closing = head.closes or not wire.framed(raw) or self.stopping.is_set()
        writer.write(wire.relabel(raw, closing=closing, deployment=route.slot.name))
        await writer.drain()
        print(f"{head.request_line.decode('latin-1')} -> {route.slot.name} "
              f"{raw[9:12].decode('latin-1')} {1000 * (time.monotonic() - started):.0f} ms",
              flush=True)
        return not closing

    async def serve(self, reader, writer) -> None:
        try:
            while (head := await wire.read_head(reader, self.stopping)) is not None:
                if not await self.one(reader, writer, head):
                    break
        except wire.Refused as refused:
            writer.write(refused.answer())
            with contextlib.suppress(ConnectionError, TimeoutError, OSError):
                await writer.drain()
                writer.write_eof()
                await asyncio.wait_for(linger(reader), LINGER_S)
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            pass
        finally:
            writer.close()

    def take(self, conn: socket.socket) -> None:
        async def handle() -> None:
            reader, writer = await asyncio.open_connection(sock=conn, limit=wire.MAX_HEAD)
            await self.serve(reader, writer)

        task = asyncio.ensure_future(handle())
        self.connections.add(task)
        task.add_done_callback(self.connections.discard)

    async def run(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.ensure_future(self.stopping.wait())
        while not self.stopping.is_set():
            accept = asyncio.ensure_future(loop.sock_accept(listener))
            await asyncio.wait({accept, stop}, return_when=asyncio.FIRST_COMPLETED)
            if accept.done() and not accept.cancelled():
                self.take(accept.result()[0])
            else:
                accept.cancel()
        with contextlib.suppress(BlockingIOError, InterruptedError):  # accepted by the kernel
            while True:  # before the stop: they are served too
                self.take(listener.accept()[0])
        listener.close()
        while self.connections or self.background:
            await asyncio.wait(self.connections | self.background)


def listen(port: int) -> socket.socket:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((HOST, port))
    listener.listen(1024)
    listener.setblocking(False)
    return listener


async def main_async(folder: Path) -> int:
    front = Front(folder)
    listener = listen(front.router.current().port)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, front.stopping.set)
    print(f"front: endpoint {front.router.state.name} on http://{HOST}:"
          f"{front.router.state.port}", flush=True)
    await front.run(listener)
    print("front: stopped; every accepted request was answered", flush=True)
    return 0


def main(argv: list[str]) -> int:
    return asyncio.run(main_async(Path(argv[0])))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
