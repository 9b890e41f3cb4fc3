"""One client connection of the front (mlops/endpoints/front_client.py) with no socket: its one
timer still closes an idle connection, refuses a head that never ends with a 408, is not set
again by a request that arrives whole and is answered, and closes the connection no sooner than
the last request's idle deadline; a request the pool fails to take is answered once."""

from __future__ import annotations

import asyncio
import re

from mlops.endpoints import front_client
from mlops.endpoints import front_wire as wire
from mlops.endpoints.endpoint_state import AuthMode, EndpointState, Slot
from mlops.endpoints.front import Front
from mlops.endpoints.front_client import Client
from mlops.endpoints.front_rules import Router
from mlops.endpoints.front_upstream import Answer


class Wire(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.sent, self.closed = b"", None  # closed: when, on the loop's clock
        self.reading = True

    def write(self, data) -> None:
        self.sent += bytes(data)

    def close(self) -> None:
        self.closed = asyncio.get_running_loop().time()

    def abort(self) -> None:
        self.close()

    def can_write_eof(self) -> bool:
        return False

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name, default=None):
        return default if name != "socket" else Socket()


class Socket:
    def setsockopt(self, *args) -> None:
        pass


def connections(tmp_path, count: int, then) -> list[tuple[Client, Wire]]:
    """`count` connections of a front over tmp_path's endpoint (no auth), after `then`."""
    slot = Slot(name="blue", port=1, pid=1, folder="/nowhere", spec="", model="",
                environment="", max_body=100, timeout_ms=1000, max_pending=2)
    EndpointState(name="e", auth_mode=AuthMode.NONE, deployments={"blue": slot},
                  traffic={"blue": 100}).write(tmp_path)

    async def run():
        front = Front(Router.open(tmp_path))
        front.answer = lambda client, request, route, body: client.reply(
            Answer(status=200, reason=b"OK", headers=[], body=b"{}"), route.slot.name)
        made = [(Client(front), Wire()) for _ in range(count)]
        for client, transport in made:
            client.connection_made(transport)
        await then(made)
        return made

    return asyncio.run(run())


async def until(condition) -> None:
    """Poll on the loop for `condition` (5 s at most)."""
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not in 5 s")


def test_an_idle_connection_closes_and_a_head_that_never_ends_gets_a_408(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setattr(wire, "IDLE_S", 0.02)
    monkeypatch.setattr(wire, "HEAD_S", 0.04)

    async def then(made):
        (_, idle), (stalled, transport) = made
        stalled.data_received(b"POST /score HTTP/1.1\r\nHo")
        await until(lambda: idle.closed and transport.sent)

    (_, idle), (_, stalled) = connections(tmp_path, 2, then)
    assert idle.sent == b"" and stalled.sent.startswith(b"HTTP/1.1 408 ")


def test_requests_answered_at_once_set_no_timer_and_the_last_one_decides_the_close(
        tmp_path, monkeypatch):
    monkeypatch.setattr(wire, "IDLE_S", 0.5)  # wide: a loaded machine may pause the loop
    request = b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"

    async def then(made):
        client, transport = made[0]
        first, loop = client.timer, asyncio.get_running_loop()
        for _ in range(3):
            client.data_received(request)
        await until(lambda: loop.time() > client.timer_at - wire.IDLE_S + 0.01)
        client.data_received(request)  # its idle deadline is past the timer's
        assert client.timer is first and client.phase == "idle" and client.due > first.when()
        assert transport.sent.count(b"HTTP/1.1 200 OK\r\n") == 4
        await until(lambda: transport.closed)
        assert transport.closed >= client.due - 0.001  # the timer was set again for it

    connections(tmp_path, 1, then)


def test_a_request_the_pool_fails_to_take_is_answered_502_once_and_leaves_no_pending(tmp_path):
    class Failing:
        def exchange(self, request, body, timeout, done):
            done(ConnectionError("late"))  # an answer, then the failure the call raises
            raise RuntimeError("the transport is closed")

    async def then(made):
        front = made[0][0].front
        slot = front.router.state.deployments["blue"]
        front.pools[slot.port] = Failing()
        got = []
        front.forward(slot, wire.Forward(b"POST", b"/", []), wire.Body(10), got.append)
        assert [(refused.status, "did not answer" in refused.message) for refused in got] == [
            (502, True)]
        assert front.router.pending == {"blue": 0}

    connections(tmp_path, 1, then)


def test_after_a_429_or_a_deployments_failure_the_connection_serves_on(tmp_path, monkeypatch):
    """A request read whole that the front answers itself (429 past max_pending, 408 or 502
    for the deployment's failure) keeps the connection, as nginx keeps it after a 429, 502 or
    504; a pipelined request after it is answered. A refused head still closes it (after its
    linger, shortened from 1 s: the close is what is waited for)."""
    monkeypatch.setattr(front_client, "LINGER_S", 0.02)
    request = b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
    outcomes = [wire.Refused(429, "too many"), wire.Refused(408, "late"),
                wire.Refused(502, "gone"), Answer(status=200, reason=b"OK", headers=[],
                                                  body=b"{}")]

    async def then(made):
        client, transport = made[0]
        client.front.answer = lambda client, request, route, body: client.answered(
            outcomes.pop(0))
        client.data_received(request * 4 + b"POST /score HTTP/1.1\r\nHost: x\r\nX\r\n\r\n")
        await until(lambda: transport.closed)

    (_, transport), = connections(tmp_path, 1, then)
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", transport.sent)
    assert statuses == [b"429", b"408", b"502", b"200", b"400"], transport.sent
    assert transport.sent.count(b"connection: close") == 1  # the 400's


def test_a_client_that_does_not_read_its_answers_gets_no_next_one_until_it_does(tmp_path):
    """Answers wait in the connection's buffer while the client does not read them: past the
    buffer's mark (pause_writing) no pipelined request is read, as nginx reads one only once
    the answer before it is sent; when the client catches up (resume_writing) it is."""
    request = b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"

    async def then(made):
        client, transport = made[0]
        written = transport.write
        transport.write = lambda data: (written(data), client.pause_writing())
        client.data_received(request * 3)
        client.data_received(request * 1000)  # held, not read, up to a bound
        for _ in range(20):  # the loop's turns: what is scheduled runs
            await asyncio.sleep(0)
        assert transport.sent.count(b"HTTP/1.1 200 OK") == 1 and client.phase != "busy"
        transport.write = written
        client.resume_writing()
        await until(lambda: transport.sent.count(b"HTTP/1.1 200 OK") == 1003)

    connections(tmp_path, 1, then)


def test_pipelined_requests_answered_at_once_do_not_nest_a_call_each(tmp_path):
    """429s are answered within the call that read the request: the next pipelined request
    is read on the loop's next turn, not inside that call (1,500 nested calls: RecursionError,
    the connection reset)."""
    request = b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"

    async def then(made):
        client, transport = made[0]
        client.front.answer = lambda client, request, route, body: client.answered(
            wire.Refused(429, "too many"))
        for _ in range(3):
            client.data_received(request * 500)
        await until(lambda: transport.sent.count(b"HTTP/1.1 429 ") == 1500)
        assert transport.closed is None

    connections(tmp_path, 1, then)


def test_what_a_client_pipelines_waits_unparsed_up_to_a_bound_however_long_it_goes_on(tmp_path):
    """Reading pauses while more than a head's worth waits unparsed, and resumes only once
    answers have taken it under: a client that pipelines without end is read as fast as it
    is answered (the front's memory grew 580 MB in 5 s)."""
    request = b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
    waiting, paused, resumed = [], 0, 0

    async def then(made):
        nonlocal paused, resumed
        client, transport = made[0]
        client.front.answer = lambda client, request, route, body: waiting.append(client)
        for _ in range(600):
            if transport.reading:  # a client sends only while it is read
                client.data_received(request * 100)
            else:
                paused += 1
                assert len(client.wire.buf) > wire.MAX_HEAD
            assert len(client.wire.buf) <= wire.MAX_HEAD + 100 * len(request)
            for _ in range(5):  # the loop's turns: the next pipelined request is read
                await asyncio.sleep(0)
            was = transport.reading
            waiting.pop().answered(Answer(status=200, reason=b"OK", headers=[], body=b"{}"))
            resumed += transport.reading and not was
        assert paused > 400 and resumed >= 3

    connections(tmp_path, 1, then)


def test_requests_pipelined_before_the_client_closes_its_side_are_all_answered(
        tmp_path, monkeypatch):
    """A client that sends its requests and then closes its side (shutdown(SHUT_WR)) gets an
    answer to each, as nginx gives it, then the connection closes; a partial request after
    them is refused (the first two answers only, before; its linger shortened from 1 s)."""
    monkeypatch.setattr(front_client, "LINGER_S", 0.02)
    request = b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"

    async def then(made):
        (whole, first), (partial, second) = made
        for client, stream in ((whole, request * 3), (partial, request * 2 + request[:20])):
            client.data_received(stream)
            assert client.eof_received()  # still open for the answers
        await until(lambda: first.closed and second.closed)

    (_, first), (_, second) = connections(tmp_path, 2, then)
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", first.sent) == [b"200"] * 3
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", second.sent) == [b"200", b"200", b"400"]


def test_a_long_answer_is_written_from_its_file_as_the_client_reads_it(tmp_path, monkeypatch):
    """An answer spooled to a file (front_upstream: past wire.SPOOL_MEMORY) is written a piece
    at a time, each once the client has read the one before (resume_writing), so a client that
    never reads holds one piece of the front's memory, not the answer (a 200 MB answer took the
    front from 26 to 426 MB); one that stops reading for BODY_S is cut off, and the next
    request waits for the answer before it."""
    monkeypatch.setattr(wire, "BODY_S", 0.05)
    request = b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
    data = bytes(range(256)) * 1024  # four of chunks()'s pieces

    def spooled(client, request, route, body):
        answer = wire.Body(1 << 30, spill=True)
        answer.add(data)
        client.reply(Answer(status=200, reason=b"OK", headers=[], body=answer), "blue")

    async def then(made):
        (reader, first), (stalled, second) = made
        for client, transport in made:
            client.front.answer = spooled
            written = transport.write
            transport.write = lambda data, client=client, written=written: (
                written(data), client.pause_writing())
            client.data_received(request * 2)
        assert len(first.sent) < (1 << 16) + 200 and reader.phase == "busy"  # one piece
        while first.sent.count(b"HTTP/1.1 200 OK") < 2 or reader.streaming is not None:
            reader.resume_writing()  # the client read what was written
            await asyncio.sleep(0)
        await until(lambda: second.closed)  # never read: cut off after BODY_S
        file = stalled.spooled.file
        stalled.connection_lost(None)  # (what the transport calls once it is cut off)
        assert file.closed

    (reader, first), (stalled, second) = connections(tmp_path, 2, then)
    answers = first.sent.split(b"HTTP/1.1 200 OK")[1:]
    assert [answer.endswith(b"\r\ncontent-length: %d\r\n\r\n" % len(data) + data)
            for answer in answers] == [True, True] and first.closed is None
    assert len(second.sent) < (1 << 16) + 200 and stalled.spooled is None
