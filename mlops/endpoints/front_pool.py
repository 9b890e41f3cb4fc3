"""The front's connections to each deployment's server (front_upstream.py): kept alive and
reused (no connect per request), one request at a time on each.

A connection goes back to its deployment's pool once both sides are done with an exchange; one
that sat idle longer than KEEP_S (below gunicorn's 2 s keep-alive, so the server never closes it
under a request) or that the server closed is dropped. A request sent on a reused connection
that the server closed before answering a byte is sent once more on a new one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

if __package__:
    from mlops.endpoints import front_wire as wire
    from mlops.endpoints.front_upstream import HOST, Answer, Broken, Upstream
else:  # started by its path (front.py): this folder is first on sys.path
    import front_wire as wire  # type: ignore[no-redef]
    from front_upstream import HOST, Answer, Broken, Upstream  # type: ignore[no-redef]

KEEP_S = 1.0
MAX_IDLE = 64  # idle connections kept per deployment


class Pool:
    """The kept-alive connections to one server (127.0.0.1:port)."""

    def __init__(self, port: int):
        self.port = port
        self.idle: list[Upstream] = []
        self.loop = asyncio.get_running_loop()
        self.connecting: set[asyncio.Task] = set()

    def _reuse(self) -> Upstream | None:
        now = self.loop.time()
        while self.idle:
            upstream = self.idle.pop()
            if not upstream.lost and now - upstream.idle_since < KEEP_S:
                return upstream
            upstream.close()
        return None

    def _back(self, upstream: Upstream, result: Answer | BaseException) -> None:
        """An exchange is over: its connection back to the pool, or closed."""
        if type(result) is Answer and upstream.reusable() and len(self.idle) < MAX_IDLE:
            self.idle.append(upstream)
        else:
            upstream.close()

    def exchange(self, request: wire.Forward, body: wire.Body, timeout: float | None,
                 done: Callable[[Answer | BaseException], None]) -> None:
        """done(the server's answer within `timeout` seconds (None: no limit); TimeoutError
        past it, Broken or OSError when the server cannot answer), called once. A request a
        reused connection's server closed on before a byte of answer goes on a new one."""
        deadline = None if timeout is None else self.loop.time() + timeout
        upstream = self._reuse()
        if upstream is None:
            self._fresh(request, body, deadline, done)
            return

        def over(result: Answer | BaseException) -> None:
            self._back(upstream, result)
            if isinstance(result, Broken) and result.silent:
                self._fresh(request, body, deadline, done)
            else:
                done(result)

        upstream.send(request, body, deadline, over)

    def _fresh(self, request: wire.Forward, body: wire.Body, deadline: float | None,
               done: Callable[[Answer | BaseException], None]) -> None:
        """The exchange on a new connection."""
        task = self.loop.create_task(self._connected(request, body, deadline, done))
        self.connecting.add(task)
        task.add_done_callback(self.connecting.discard)

    async def _connected(self, request: wire.Forward, body: wire.Body,
                         deadline: float | None,
                         done: Callable[[Answer | BaseException], None]) -> None:
        try:
            connecting = self.loop.create_connection(lambda: Upstream(self.port), HOST,
                                                     self.port)
            left = None if deadline is None else max(0.0, deadline - self.loop.time())
            _, upstream = await asyncio.wait_for(connecting, left)
        except (OSError, TimeoutError) as err:
            done(err)
            return

        def over(result: Answer | BaseException) -> None:
            self._back(upstream, result)
            done(result)

        upstream.send(request, body, deadline, over)

    def close(self) -> None:
        for upstream in self.idle:
            upstream.close()
        self.idle.clear()
