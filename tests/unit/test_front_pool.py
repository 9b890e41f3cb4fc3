"""The front's connections to a deployment's server (mlops/endpoints/front_upstream.py), with no
socket: the request's bytes as the server gets them, and each shape of answer read whole, byte
by byte as well, with whether the connection may take the next request."""

from __future__ import annotations

import asyncio

import pytest

from mlops.endpoints import front_upstream
from mlops.endpoints import front_wire as wire


class Wire(asyncio.Transport):
    """What the front writes, and whether it dropped the connection."""

    def __init__(self) -> None:
        super().__init__()
        self.sent, self.dropped = b"", False

    def write(self, data) -> None:
        self.sent += bytes(data)

    def abort(self) -> None:
        self.dropped = True

    def close(self) -> None:
        self.dropped = True

    def is_closing(self) -> bool:
        return self.dropped

    def get_extra_info(self, name, default=None):
        return default


def exchange(answer: bytes, *, method: bytes = b"POST", by_byte: bool = False,
             eof: bool = False) -> tuple[front_upstream.Answer | Exception, bool, bytes]:
    """The answer the front reads from `answer` (or the error), whether the connection is
    reusable after it, and the bytes the server got."""

    async def run():
        upstream, transport = front_upstream.Upstream(5001), Wire()
        upstream.connection_made(transport)
        body = wire.Body(100)
        body.add(b"{}")
        request = wire.Forward(method, b"/score", [(b"Host", b"x"), (b"Content-Length", b"2")])
        task = asyncio.ensure_future(upstream.exchange(request, body, None))
        await asyncio.sleep(0)
        pieces = [answer[i:i + 1] for i in range(len(answer))] if by_byte else [answer]
        for piece in filter(None, pieces):  # a transport never hands on b""
            upstream.data_received(piece)
        if eof:
            upstream.eof_received()
            upstream.connection_lost(None)
        try:
            result = await task
        except Exception as err:  # noqa: BLE001 - the error is what some cases expect
            result = err
        return result, upstream.reusable(), transport.sent

    return asyncio.run(run())


OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


@pytest.mark.parametrize("by_byte", [False, True])
def test_an_answer_is_read_whole_and_its_connection_kept(by_byte):
    answer, reusable, sent = exchange(OK, by_byte=by_byte)
    assert (answer.status, answer.reason, answer.body) == (200, b"OK", b"{}")
    assert answer.headers == [(b"Content-Type", b"application/json"), (b"Content-Length", b"2")]
    assert reusable
    assert sent == b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"


@pytest.mark.parametrize("by_byte", [False, True])
def test_a_chunked_answer_after_a_100_continue_is_the_final_one(by_byte):
    answer, reusable, _ = exchange(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 500 BAD\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"2\r\n{}\r\n1\r\nx\r\n0\r\n\r\n", by_byte=by_byte)
    assert (answer.status, answer.reason, answer.body) == (500, b"BAD", b"{}x")
    assert reusable


@pytest.mark.parametrize(("what", "answer", "eof", "body"), [
    ("Connection: close", OK.replace(b"OK\r\n", b"OK\r\nConnection: close\r\n"), False, b"{}"),
    ("HTTP/1.0", OK.replace(b"HTTP/1.1", b"HTTP/1.0"), False, b"{}"),
    ("framed by the close", b"HTTP/1.1 200 OK\r\n\r\nall of it", True, b"all of it"),
    ("a second answer after it", OK + OK, False, b"{}"),
])
def test_an_answer_that_leaves_the_connection_unfit_is_read_and_the_connection_dropped(
        what, answer, eof, body):
    answer, reusable, _ = exchange(answer, eof=eof)
    assert answer.body == body and not reusable, what


def test_a_second_answer_in_the_same_read_leaves_the_first_as_it_was():
    answer, reusable, _ = exchange(OK + b"HTTP/1.1 200 OK\r\nX-B: 1\r\nContent-Length: 0\r\n\r\n")
    assert answer.headers == [(b"Content-Type", b"application/json"), (b"Content-Length", b"2")]
    assert answer.body == b"{}" and not reusable


def test_an_answer_to_head_is_whole_at_its_head_and_its_connection_dropped():
    answer, reusable, sent = exchange(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n",
                                      method=b"HEAD")
    assert answer.status == 200 and answer.body == b"" and not reusable
    assert sent.startswith(b"HEAD /score HTTP/1.1\r\n")


@pytest.mark.parametrize(("what", "answer", "eof"), [
    ("not HTTP", b"SSH-2.0-OpenSSH\r\n\r\n", False),
    ("a bad chunk size", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", False),
    ("closed before the whole body", b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{}", True),
    ("closed before a byte", b"", True),
])
def test_a_broken_answer_is_an_error_and_the_connection_dropped(what, answer, eof):
    error, reusable, _ = exchange(answer, eof=eof)
    assert isinstance(error, front_upstream.Broken) and not reusable, what
    assert error.silent == (answer == b""), what


def test_an_answer_past_the_cap_is_an_error(monkeypatch):
    monkeypatch.setattr(front_upstream, "MAX_ANSWER", 4)
    error, reusable, _ = exchange(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n123456789")
    assert isinstance(error, front_upstream.Broken) and "over 4 bytes" in str(error)
    assert not reusable


@pytest.mark.parametrize("interim", [b"", b"HTTP/1.1 100 Continue\r\n\r\n"])
def test_an_answer_whose_head_does_not_end_is_an_error_at_the_cap_not_read_on(interim):
    """Headers without end would fill the front's memory until request_timeout_ms: past
    MAX_HEAD bytes the connection is dropped (nginx: "upstream sent too big header", 502)."""
    field = b"X-A: " + b"a" * 1000 + b"\r\n"
    head = interim + b"HTTP/1.1 200 OK\r\n" + field * (front_upstream.MAX_HEAD // len(field))
    error, reusable, _ = exchange(head + field * 8)
    assert isinstance(error, front_upstream.Broken) and "head is over" in str(error)
    assert not reusable
    whole = head + b"Content-Length: 2\r\n\r\n{}"  # just under the cap, a whole answer
    answer, _, _ = exchange(whole.replace(field, b"", 2))
    assert answer.status == 200 and answer.body == b"{}"


def test_a_request_without_host_gets_the_servers():
    head = wire.Forward(b"GET", b"/", [(b"X-A", b"1")]).head(b"127.0.0.1:5001")
    assert head == b"GET / HTTP/1.1\r\nHost: 127.0.0.1:5001\r\nX-A: 1\r\n\r\n"


def test_an_answer_that_comes_while_a_spooled_body_is_sent_is_handed_on_when_it_ends(
        monkeypatch):
    monkeypatch.setattr(wire, "SPOOL_MEMORY", 4)  # the body waits in a file

    async def run():
        upstream, transport = front_upstream.Upstream(5001), Wire()
        upstream.connection_made(transport)
        body = wire.Body(100)
        for piece in (b"abcdef", b"ghijkl"):
            body.add(piece)
        got = []
        upstream.pause_writing()  # the kernel's buffer is full after the first write
        upstream.send(wire.Forward(b"POST", b"/", [(b"Host", b"x")]), body, None, got.append)
        await asyncio.sleep(0)
        upstream.data_received(OK)
        await asyncio.sleep(0)
        waited = list(got)  # the file is still being read: nothing handed on yet
        upstream.resume_writing()
        for _ in range(3):
            await asyncio.sleep(0)
        body.close()
        return waited, got, transport.sent

    waited, got, sent = asyncio.run(run())
    assert waited == [] and [answer.body for answer in got] == [b"{}"]
    assert sent == b"POST / HTTP/1.1\r\nHost: x\r\n\r\nabcdefghijkl"


@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_an_answer_past_the_memory_mark_waits_in_a_file_and_reads_back_whole(framing,
                                                                             monkeypatch):
    """A long answer is not held in memory (a client that reads it slowly would hold it
    there): past wire.SPOOL_MEMORY its bytes go to a temporary file, read back in order."""
    monkeypatch.setattr(wire, "SPOOL_MEMORY", 10)
    data = bytes(range(256)) * 4
    body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data) if framing == "chunked" else data
    head = b"Transfer-Encoding: chunked" if framing == "chunked" else b"Content-Length: 1024"
    answer, reusable, _ = exchange(b"HTTP/1.1 200 OK\r\n" + head + b"\r\n\r\n" + body,
                                   by_byte=True)
    assert type(answer.body) is wire.Body and answer.body.file is not None and reusable
    assert len(answer.body) == len(data) and b"".join(answer.body.chunks()) == data
    answer.body.close()
