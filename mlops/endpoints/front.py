"""The local endpoint's front: what Azure's endpoint does before a request reaches a deployment.

    python mlops/endpoints/front.py <endpoint folder>

It listens on the endpoint's port (endpoint.json, re-read whenever it changes) and, for each
request, in Azure's order (front_rules.py):
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
HTTP is h11's, with nginx's refusals on top (front_wire.py); each deployment's server is reached
over kept-alive connections (front_pool.py); connections are accepted while descriptors last
(front_listen.py). Slow clients are held here (head and body deadlines, answered 408), so a
stalled client never holds one of a server's threads. SIGTERM or SIGINT: it stops accepting,
answers every request it accepted, then exits; SIGHUP: endpoint.json is read again.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
import time
from pathlib import Path

import h11

if __package__:
    from mlops.endpoints import front_listen, front_pool
    from mlops.endpoints import front_wire as wire
    from mlops.endpoints.endpoint_state import DamagedState, Slot
    from mlops.endpoints.front_rules import Route, Router, say
else:  # started by its path: this folder is first on sys.path
    import front_listen  # type: ignore[no-redef]
    import front_pool  # type: ignore[no-redef]
    import front_wire as wire  # type: ignore[no-redef]
    from endpoint_state import DamagedState, Slot  # type: ignore[no-redef]
    from front_rules import Route, Router, say  # type: ignore[no-redef]

HOST = "127.0.0.1"
LINGER_S, LINGER_BYTES = 1.0, 256 * 1024  # what a refused client may still send: then closed
STOP_GRACE_S = 1.0  # how long a connection accepted before a stop may take to send a request


class Client(asyncio.Protocol):
    """One client connection: its requests, read by h11 in order, and their answers."""

    def __init__(self, front: Front):
        self.front, self.wire = front, wire.Inbound()
        self.transport: asyncio.Transport | None = None
        self.phase = "idle"  # idle (no byte of a request yet), head, body, busy, closing
        self.timer: asyncio.TimerHandle | None = None
        self.dropped = 0
        self.ended = False  # the client closed its side
        self.request: h11.Request | None = None
        self.route: Route | None = None
        self.body: wire.Body | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.front.clients[self] = None
        self._wait()

    def connection_lost(self, exc) -> None:
        self._set_timer(None)
        if self.phase != "busy" and self.body is not None:
            self.body.close()
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
            self._set_timer(wire.HEAD_S, self._late)
        self.wire.feed(data)
        if self.phase != "busy":
            self._advance()

    def eof_received(self) -> bool:
        if self.phase in ("closing", "idle"):
            return False
        self.ended = True
        self.wire.feed(b"")
        if self.phase != "busy":
            self._advance()
        return True  # still open for the answer

    def _set_timer(self, seconds: float | None, then=None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = None if seconds is None else \
            asyncio.get_running_loop().call_later(seconds, then)

    def _wait(self) -> None:
        """Wait for the next request: idle connections close quietly in time."""
        self.phase = "idle"
        self._set_timer(STOP_GRACE_S if self.front.stopping else wire.IDLE_S,
                        self.transport.close)

    def _late(self) -> None:
        late = "head" if self.phase == "head" else "body"
        self.refuse(wire.Refused(408, f"the request's {late} did not arrive in time"))

    def _advance(self) -> None:
        try:
            while True:
                event = self.wire.next_event()
                kind = type(event)
                if kind is h11.Data:
                    self.body.add(event.data)
                elif kind is h11.Request:
                    self._begin(event)
                elif kind is h11.EndOfMessage:
                    self._dispatch()
                    return
                elif event is h11.NEED_DATA or event is h11.PAUSED:
                    return
                else:  # the client closed its side before a whole request
                    self.transport.close()
                    return
        except wire.Refused as refused:
            self.refuse(refused)

    def _begin(self, request: h11.Request) -> None:
        """A request's head is in: Azure's rules that need no body, then the body's limit."""
        self.phase = "body"
        self._set_timer(wire.BODY_S, self._late)
        fields = dict(request.headers)  # the fields that must be unique were checked
        self.front.router.authorize(fields)
        route = self.front.router.route(fields)
        self.body = self.wire.body_for(request, route.slot.max_body)
        self.request, self.route = request, route
        if self.wire.conn.they_are_waiting_for_100_continue:
            self.transport.write(self.wire.conn.send(h11.InformationalResponse(
                status_code=100, headers=[], reason=b"Continue")))

    def _dispatch(self) -> None:
        self.phase = "busy"
        self._set_timer(None)
        self.transport.pause_reading()
        self.front.spawn(self.front.answer(self, self.request, self.route, self.body))

    def reply(self, answer: front_pool.Answer, deployment: str) -> None:
        status, reason, headers = wire.relabeled(answer.status, answer.reason, answer.headers,
                                                 deployment=deployment)
        length = len(answer.body)
        if self.request.method == b"HEAD":
            length = int(dict(answer.headers).get(b"content-length", b"0") or 0)
        headers.append((b"content-length", b"%d" % length))
        if self.front.stopping:
            headers.append((b"connection", b"close"))
        self.transport.write(self.wire.respond(status, headers, answer.body, reason=reason))
        self.request = self.route = self.body = None
        if self.front.stopping or self.ended or not self.wire.next_cycle():
            self.phase = "closing"
            self.transport.close()
            return
        self.transport.resume_reading()
        self._wait()
        if self.wire.head:  # pipelined: the next request is already here
            self.phase = "head"
            self._set_timer(wire.HEAD_S, self._late)
            self._advance()

    def refuse(self, refused: wire.Refused) -> None:
        """Answer with the refusal and close: what the client still sends is read and dropped
        for at most LINGER_S seconds or LINGER_BYTES bytes (closing on unread bytes resets the
        connection, which can lose the answer), never drained."""
        self.phase = "closing"
        self.transport.write(self.wire.refuse(refused))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.transport.resume_reading()
        self._set_timer(LINGER_S, self.transport.close)
        target = self.request.target.decode("latin-1") if self.request else "-"
        self.front.log(f"{target} refused {refused.status}: {refused.message}")


class Front:
    def __init__(self, router: Router):
        self.router = router
        self.stopping = False
        self.clients: dict[Client, None] = {}  # in the order they came
        self.opening = 0  # accepted, not yet a Client
        self.background: set[asyncio.Task] = set()
        self.pools: dict[int, front_pool.Pool] = {}
        self.done = asyncio.Event()
        self.listener: front_listen.Listener | None = None
        self.lines: list[str] = []

    def log(self, line: str) -> None:
        """A line of the access log, written within a fraction of a second."""
        if not self.lines:
            asyncio.get_running_loop().call_later(0.2, self._flush)
        self.lines.append(line)

    def _flush(self) -> None:
        sys.stdout.write("".join(f"{line}\n" for line in self.lines))
        sys.stdout.flush()
        self.lines.clear()

    def spawn(self, work) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self.background.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task) -> None:
        self.background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            say(f"error: {task.exception()!r}")
        self.check_done()

    async def forward(self, slot: Slot, request: h11.Request,
                      body: wire.Body) -> front_pool.Answer:
        with self.router.admitted(slot):
            pool = self.pools.get(slot.port) or self.pools.setdefault(
                slot.port, front_pool.Pool(slot.port))
            try:
                return await pool.exchange(wire.upstream_request(request, body.size), body,
                                           slot.timeout_ms / 1000 or None)
            except TimeoutError:
                raise wire.Refused(408, f"{slot.name} took longer than its request_timeout_ms"
                                        f" ({slot.timeout_ms})") from None
            except OSError as err:
                raise wire.Refused(502, f"deployment {slot.name} did not answer: {err}"
                                   ) from None

    async def answer(self, client: Client, request: h11.Request, route: Route,
                     body: wire.Body) -> None:
        started = time.monotonic()
        try:
            answer = await self.forward(route.slot, request, body)
        except wire.Refused as refused:
            if client.phase == "busy":
                client.refuse(refused)
            return
        finally:
            if route.mirror is None:
                body.close()
            else:
                self.spawn(self.mirrored(route.mirror, request, body))
        if client.phase == "busy":
            client.reply(answer, route.slot.name)
        self.log(f"{request.method.decode()} {request.target.decode('latin-1')} -> "
                 f"{route.slot.name} {answer.status} "
                 f"{1000 * (time.monotonic() - started):.0f} ms")

    async def mirrored(self, slot: Slot, request: h11.Request, body: wire.Body) -> None:
        """A copy for the mirror deployment; its answer (or failure) is dropped, as Azure's."""
        try:
            await self.forward(slot, request, body)
            self.log(f"mirror -> {slot.name}")
        except wire.Refused as refused:
            self.log(f"mirror -> {slot.name} dropped: {refused.message}")
        finally:
            body.close()

    # ---- connections ----

    def take(self, conn: socket.socket) -> None:
        self.opening += 1
        self.spawn(self._open(conn))

    async def _open(self, conn: socket.socket) -> None:
        try:
            await asyncio.get_running_loop().connect_accepted_socket(lambda: Client(self), conn)
        except OSError:
            conn.close()
        finally:
            self.opening -= 1

    def evict(self, count: int) -> int:
        """Close up to `count` connections that wait for a request, the oldest first."""
        waiting = [c for c in self.clients if c.phase == "idle"][:count]
        for client in waiting:
            client.phase = "closing"
            client.transport.close()
        return len(waiting)

    def closed(self, client: Client) -> None:
        self.clients.pop(client, None)
        if self.listener is not None and not self.stopping:
            self.listener.closed_one()
        self.check_done()

    def start(self, sock: socket.socket) -> None:
        self.listener = front_listen.Listener(
            sock, self.take, evict=self.evict, held=lambda: len(self.clients) + self.opening,
            limit=front_listen.capacity())
        self.listener.start()

    def stop(self) -> None:
        """Stop accepting; answer what was accepted, then end."""
        if self.stopping:
            return
        self.stopping = True
        self.listener.drain()
        for client in list(self.clients):
            if client.phase == "idle":
                client._wait()
        self.check_done()

    def check_done(self) -> None:
        if self.stopping and not self.clients and not self.opening and not self.background:
            self.done.set()


def listen(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


async def serve(folder: Path) -> int:
    try:
        router = Router.open(folder)
    except (DamagedState, OSError) as err:
        say(f"cannot start: {err}")
        return 1
    front = Front(router)
    front.start(listen(router.state.port))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, front.stop)
    loop.add_signal_handler(signal.SIGHUP, router.reread)
    print(f"front: endpoint {router.state.name} on http://{HOST}:{router.state.port}",
          flush=True)
    await front.done.wait()
    if front.lines:
        front._flush()
    print("front: stopped; every accepted request was answered", flush=True)
    return 0


def main(argv: list[str]) -> int:
    return asyncio.run(serve(Path(argv[0])))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
