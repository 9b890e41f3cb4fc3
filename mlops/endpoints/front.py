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
Clients' requests are read by llhttp (httptools), one at a time, with nginx's refusals on
top (front_inbound.py); each deployment's server is reached over kept-alive connections
(front_pool.py), its answers read by httptools (front_upstream.py); a request is passed on and
answered by callbacks, no task per request. Connections are accepted while descriptors last
(front_listen.py); the loop is uvloop's where it has a build. Slow clients are held here
(head and body deadlines, answered 408), so a stalled client never holds one of a server's
threads. SIGTERM or SIGINT: it stops accepting, answers every request it accepted, then exits;
SIGHUP: endpoint.json is read again.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path

if __package__:
    from mlops.endpoints import front_listen, front_pool
    from mlops.endpoints import front_wire as wire
    from mlops.endpoints.endpoint_state import DamagedState, Slot
    from mlops.endpoints.front_client import Client
    from mlops.endpoints.front_rules import Route, Router, say
    from mlops.endpoints.front_upstream import Answer
else:  # started by its path: this folder is first on sys.path
    import front_listen  # type: ignore[no-redef]
    import front_pool  # type: ignore[no-redef]
    import front_wire as wire  # type: ignore[no-redef]
    from endpoint_state import DamagedState, Slot  # type: ignore[no-redef]
    from front_client import Client  # type: ignore[no-redef]
    from front_rules import Route, Router, say  # type: ignore[no-redef]
    from front_upstream import Answer  # type: ignore[no-redef]

HOST = "127.0.0.1"
try:  # libuv's event loop: less of the front's CPU a request than asyncio's own
    from uvloop import run
except ImportError:  # no build for this platform (Windows)
    from asyncio import run


class Front:
    """The endpoint's front: its connections, the requests in flight and the pools to each
    deployment's server."""

    def __init__(self, router: Router):
        self.router = router
        self.stopping = False
        self.clients: dict[Client, None] = {}  # in the order they came
        self.opening = 0  # accepted, not yet a Client
        self.background: set[asyncio.Task] = set()
        self.pools: dict[int, front_pool.Pool] = {}
        self.done = asyncio.Event()
        self.listener: front_listen.Listener | None = None
        self.lines: list = []  # the log's lines to come: each a str, or a request answered
        self.mirrors = 0  # copies to a mirror deployment in flight
        self.loop = asyncio.get_running_loop()

    def log(self, line) -> None:
        """A line of the log (a str, or the fields of the line for a request answered,
        formatted off the request's path), written within a fraction of a second."""
        if not self.lines:
            self.loop.call_later(0.2, self._flush)
        self.lines.append(line)

    def _flush(self) -> None:
        sys.stdout.write("".join([line + "\n" if type(line) is str else
                                  f"{line[0].decode()} {line[1].decode('latin-1')} -> "
                                  f"{line[2]} {line[3]} {line[4]} ms\n"
                                  for line in self.lines]))
        sys.stdout.flush()
        self.lines.clear()

    def spawn(self, work) -> None:
        task = self.loop.create_task(work)
        self.background.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task) -> None:
        self.background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            say(f"error: {task.exception()!r}")
        self.check_done()

    def forward(self, slot: Slot, request: wire.Forward, body: wire.Body,
                done: Callable[[Answer | wire.Refused], None]) -> None:
        """Pass the request on to the slot's server: done(its answer, or the refusal that
        stands for its failure) once it is over; Refused (429) at once past the slot's
        pending requests."""
        self.router.enter(slot)
        pool = self.pools.get(slot.port) or self.pools.setdefault(
            slot.port, front_pool.Pool(slot.port))
        passage = Passage(self.router, slot, done)
        try:
            pool.exchange(request, body, slot.timeout_ms / 1000 or None, passage.over)
        except Exception as err:  # noqa: BLE001 - every request is answered, whatever failed
            passage.over(err)

    def answer(self, client: Client, request: wire.Forward, route: Route,
               body: wire.Body) -> None:
        """The client's request passed on and answered (Client.answered); then passed()."""
        client.started = self.loop.time()
        try:
            self.forward(route.slot, request, body, client.answered)
        except wire.Refused as refused:
            client.answered(refused)

    def passed(self, request: wire.Forward, route: Route, body: wire.Body,
               result: Answer | wire.Refused, *, started: float) -> None:
        """A client's request was answered: its copy to the mirror, and the log's line."""
        if route.mirror is None:
            body.close()
        else:
            self.mirror(route.mirror, request, body)
        if type(result) is Answer:
            self.log((request.method, request.target, route.slot.name, result.status,
                      round(1000 * (self.loop.time() - started))))

    def mirror(self, slot: Slot, request: wire.Forward, body: wire.Body) -> None:
        """A copy for the mirror deployment; its answer (or failure) is dropped, as Azure's."""
        self.mirrors += 1

        def over(result: Answer | wire.Refused) -> None:
            self.mirrors -= 1
            body.close()
            if type(result) is Answer and type(result.body) is not bytes:
                result.body.close()
            self.log(f"mirror -> {slot.name}" if type(result) is Answer else
                     f"mirror -> {slot.name} dropped: {result.message}")
            self.check_done()

        try:
            self.forward(slot, request, body, over)
        except wire.Refused as refused:
            over(refused)

    # ---- connections ----

    def take(self, conn: socket.socket) -> None:
        self.opening += 1
        self.spawn(self._open(conn))

    async def _open(self, conn: socket.socket) -> None:
        try:
            await self.loop.connect_accepted_socket(lambda: Client(self), conn)
        except OSError:
            conn.close()
        finally:
            self.opening -= 1
            if self.listener is not None and not self.stopping:
                self.listener.settled()

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
                client.wait_next()
        self.check_done()

    def check_done(self) -> None:
        if self.stopping and not (self.clients or self.opening or self.background or
                                  self.mirrors):
            self.done.set()


class Passage:
    """A request on its way to a deployment's server and back: over() takes the outcome
    (once, whatever calls it), leaves the slot's pending requests and hands `done` the
    answer, or the refusal that stands for the failure."""

    __slots__ = ("router", "slot", "done")

    def __init__(self, router: Router, slot: Slot,
                 done: Callable[[Answer | wire.Refused], None]):
        self.router, self.slot, self.done = router, slot, done

    def over(self, result: Answer | BaseException) -> None:
        done = self.done
        if done is not None:
            self.done = None
            self.router.leave(self.slot)
            done(result if type(result) is Answer else failure(self.slot, result))


def failure(slot: Slot, err: BaseException) -> wire.Refused:
    """What the client is answered when the exchange with the slot's server failed."""
    if isinstance(err, wire.Refused):
        return err
    if isinstance(err, TimeoutError):
        return wire.Refused(408, f"{slot.name} took longer than its request_timeout_ms"
                                 f" ({slot.timeout_ms})")
    if isinstance(err, OSError):
        return wire.Refused(502, f"deployment {slot.name} did not answer: {err}")
    return wire.Refused(502, f"the front could not pass the request on: {err!r}")


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
    return run(serve(Path(argv[0])))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
