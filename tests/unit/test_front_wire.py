"""The front's HTTP layer (mlops/endpoints/front_wire.py) against hostile byte streams, with no
socket: each stream gets the answer nginx gives it (nginx 1.25's ngx_http_parse.c and
ngx_http_request.c: duplicate unique fields, Content-Length, Transfer-Encoding and chunk rules),
whether it arrives at once or a byte at a time."""

from __future__ import annotations

import h11
import pytest

from mlops.endpoints import front_wire as wire

LIMIT = 1000
OK = 200  # a whole request, ready for the deployment
WAITS = None  # nothing to answer yet


def post(*fields: bytes, version: bytes = b"1.1", method: bytes = b"POST") -> bytes:
    lines = [method + b" /score HTTP/" + version, *fields]
    return b"\r\n".join(lines) + b"\r\n\r\n"


HOST = b"Host: x"
CHUNKED = b"Transfer-Encoding: chunked"

# (what, stream, nginx's answer); every refusal closes the connection
STREAMS = [
    ("a plain request", post(HOST, b"Content-Length: 2") + b"{}", OK),
    ("chunked, with an extension and a trailer",
     post(HOST, CHUNKED) + b"2;a=b\r\n{}\r\n0\r\nX-T: 1\r\n\r\n", OK),
    ("LF-only lines in the head", post(HOST, b"Content-Length: 2").replace(b"\r\n", b"\n")
     + b"{}", OK),
    ("empty lines before the request line", b"\r\n\r\n" + post(HOST, b"Content-Length: 0"),
     OK),
    ("Content-Length with Transfer-Encoding (smuggling)",
     post(HOST, b"Content-Length: 5", CHUNKED) + b"0\r\n\r\nGET /x HTTP/1.1\r\nHost: x\r\n\r\n",
     400),
    ("Transfer-Encoding: chunked, identity", post(HOST, b"Transfer-Encoding: chunked, identity")
     + b"0\r\n\r\n", 501),
    ("Transfer-Encoding: identity", post(HOST, b"Transfer-Encoding: identity"), 501),
    ("two Transfer-Encoding fields", post(HOST, CHUNKED, CHUNKED) + b"0\r\n\r\n", 400),
    ("Transfer-Encoding in HTTP/1.0", post(CHUNKED, version=b"1.0") + b"0\r\n\r\n", 400),
    ("two different Content-Lengths", post(HOST, b"Content-Length: 2", b"Content-Length: 3")
     + b"{}x", 400),
    ("the same Content-Length twice", post(HOST, b"Content-Length: 2", b"Content-Length: 2")
     + b"{}", 400),
    ("Content-Length: 2, 2", post(HOST, b"Content-Length: 2, 2") + b"{}", 400),
    ("Content-Length: +2", post(HOST, b"Content-Length: +2") + b"{}", 400),
    ("Content-Length: 6_685", post(HOST, b"Content-Length: 6_685"), 400),
    ("Content-Length: -1", post(HOST, b"Content-Length: -1"), 400),
    ("Content-Length: 0x2", post(HOST, b"Content-Length: 0x2") + b"{}", 400),
    ("Content-Length over the cap", post(HOST, b"Content-Length: 99999999999"), 413),
    ("chunk size 0x2", post(HOST, CHUNKED) + b"0x2\r\n{}\r\n0\r\n\r\n", 400),
    ("chunk size _2", post(HOST, CHUNKED) + b"_2\r\n{}\r\n0\r\n\r\n", 400),
    ("chunk size +2", post(HOST, CHUNKED) + b"+2\r\n{}\r\n0\r\n\r\n", 400),
    ("chunk size -1", post(HOST, CHUNKED) + b"-1\r\n" + b"x" * 2000, 400),
    ("chunk size of 30 hex digits", post(HOST, CHUNKED) + b"f" * 30 + b"\r\nxx", 400),
    ("chunks past the cap", post(HOST, CHUNKED) + b"200\r\n" + b"x" * 512 + b"\r\n200\r\n"
     + b"x" * 512 + b"\r\n", 413),
    ("a chunk line ended by LF alone", post(HOST, CHUNKED) + b"2\n{}\n0\n\n", 400),
    ("a trailer ended by LF alone", post(HOST, CHUNKED) + b"0\r\nX-T: 1\n", 400),
    ("chunk data not followed by CR LF", post(HOST, CHUNKED) + b"2\r\n{}XX0\r\n\r\n", 400),
    ("obsolete line folding", post(HOST, b"X-A: 1", b" Authorization: Bearer k",
                                   b"Content-Length: 0"), 400),
    ("obsolete line folding with a tab", post(HOST, b"X-A: 1", b"\tmore"), 400),
    ("a space before the colon", post(HOST, b"Authorization : Bearer k"), 400),
    ("two Authorization fields", post(HOST, b"Authorization: Bearer no",
                                      b"Authorization: Bearer yes"), 400),
    ("two azureml-model-deployment fields", post(HOST, b"azureml-model-deployment: blue",
                                                 b"azureml-model-deployment: green"), 400),
    ("two Host fields", post(HOST, b"Host: y"), 400),
    ("no Host in HTTP/1.1", post(b"Content-Length: 0"), 400),
    ("a bare CR in the request line", b"POST /score HTTP/1.1\rHost: x\r\n\r\n", 400),
    ("HTTP/2.0 in a request line", post(HOST, version=b"2.0"), 505),
    ("a lower-case method", post(HOST, method=b"post"), 400),
    ("TRACE", post(HOST, method=b"TRACE"), 405),
    ("a NUL in a field value", post(HOST, b"X-A: a\x00b"), 400),
    ("a head over 64 KiB", post(HOST, b"X-A: " + b"a" * 70_000), 431),
    ("a TLS handshake", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40
     + b"\r\n\r\n", 400),
    ("a head that never ends", b"POST /score HTTP/1.1\r\nHost: x\r\nX-A: 1", WAITS),
]


def answer(stream: bytes, *, by_byte: bool = False):
    """What the front does with `stream`: OK, the status it refuses with, or WAITS."""
    inbound, body = wire.Inbound(), None
    pieces = [stream[i:i + 1] for i in range(len(stream))] if by_byte else [stream]
    try:
        for piece in pieces:
            inbound.feed(piece)
            while (event := inbound.next_event()) not in (h11.NEED_DATA, h11.PAUSED):
                if type(event) is h11.Request:
                    body = inbound.body_for(wire.fields_of(event)[1], LIMIT)
                elif type(event) is h11.Data:
                    body.add(event.data)
                elif type(event) is h11.EndOfMessage:
                    return OK
    except wire.Refused as refused:
        assert inbound.refuse(refused).startswith(b"HTTP/1.1 %d " % refused.status)
        return refused.status
    return WAITS


@pytest.mark.parametrize(("what", "stream", "nginx"), STREAMS, ids=[s[0] for s in STREAMS])
def test_each_stream_gets_nginxs_answer(what, stream, nginx):
    assert answer(stream) == nginx, what


@pytest.mark.parametrize(("what", "stream", "nginx"),
                         [s for s in STREAMS if len(s[1]) < 4000], ids=lambda s: str(s)[:40])
def test_a_stream_sent_a_byte_at_a_time_gets_the_same_answer(what, stream, nginx):
    assert answer(stream, by_byte=True) == nginx, what


def test_a_refusal_says_why_and_closes_the_connection():
    inbound = wire.Inbound()
    inbound.feed(post(HOST, b"Content-Length: 2", CHUNKED))
    with pytest.raises(wire.Refused) as refused:
        inbound.next_event()
    out = inbound.refuse(refused.value)
    assert out.startswith(b"HTTP/1.1 400 Bad Request\r\n") and b"connection: close" in out
    assert b"both Content-Length and Transfer-Encoding" in out


def test_pipelined_requests_are_read_one_after_the_other():
    inbound = wire.Inbound()
    inbound.feed(post(HOST, b"Content-Length: 1") + b"a" + post(HOST, b"Content-Length: 1")
                 + b"b")
    assert type(inbound.next_event()) is h11.Request
    assert bytes(inbound.next_event().data) == b"a"
    assert type(inbound.next_event()) is h11.EndOfMessage
    assert inbound.next_event() is h11.PAUSED  # the next waits for this one's answer
    inbound.respond(200, [(b"content-length", b"0")], b"")
    assert inbound.next_cycle() and inbound.head  # the next request is already here
    assert type(inbound.next_event()) is h11.Request
    assert bytes(inbound.next_event().data) == b"b"


def test_a_big_body_waits_in_a_file_and_reads_back_whole(monkeypatch):
    monkeypatch.setattr(wire, "SPOOL_MEMORY", 10)
    body = wire.Body(100)
    for piece in (b"abcdef", b"ghijkl", b"mnop"):
        body.add(piece)
    assert body.file is not None and b"".join(body.chunks()) == b"abcdefghijklmnop"
    assert b"".join(body.chunks()) == b"abcdefghijklmnop"  # again, for the mirror
    body.close()
    with pytest.raises(wire.Refused) as refused:
        wire.Body(3).add(b"abcd")
    assert refused.value.status == 413


def test_the_deployment_gets_no_hop_by_hop_field_and_the_bodys_length():
    request = h11.Request(method=b"POST", target=b"/score", headers=[
        (b"host", b"x"), (b"connection", b"keep-alive, x-hop"), (b"x-hop", b"1"),
        (b"transfer-encoding", b"chunked"), (b"expect", b"100-continue"), (b"x-kept", b"1")])
    items, _ = wire.fields_of(request)
    sent = wire.upstream_request(request, items, 7).headers
    assert sent == [(b"host", b"x"), (b"x-kept", b"1"), (b"Content-Length", b"7")]


def test_a_deployments_answer_other_than_200_is_a_424_naming_its_status():
    status, reason, headers = wire.relabeled(400, b"BAD REQUEST", [
        (b"content-length", b"2"), (b"connection", b"close"), (b"content-type", b"x")],
        deployment="blue")
    assert (status, reason) == (424, b"Failed Dependency")
    assert headers == [(b"content-type", b"x"), (b"azureml-model-deployment", b"blue"),
                       (b"ms-azureml-model-error-statuscode", b"400"),
                       (b"ms-azureml-model-error-reason", b"BAD REQUEST")]
    assert wire.relabeled(200, b"OK", [], deployment="g") == (
        200, b"OK", [(b"azureml-model-deployment", b"g")])


@pytest.mark.parametrize(("fields", "version", "keeps"), [
    ((), b"1.1", True),
    ((b"Connection: keep-alive, Close",), b"1.1", False),
    ((), b"1.0", False),
])
def test_an_answer_is_written_as_h11_writes_it_and_keeps_the_connection_by_its_rule(
        fields, version, keeps):
    inbound = wire.Inbound()
    stream = post(HOST, b"Content-Length: 1", *fields, version=version) + b"a"
    inbound.feed(stream + post(HOST, b"Content-Length: 1") + b"b")
    assert type(inbound.next_event()) is h11.Request
    assert type(inbound.next_event()) is h11.Data
    assert type(inbound.next_event()) is h11.EndOfMessage
    ours = inbound.reply(200, [(b"x-a", b"1"), (b"content-length", b"2")], b"{}", reason=b"OK")
    assert inbound.reply(200, [(b"content-length", b"0")], b"", reason=b"OK") == b""  # once
    h11s = h11.Connection(h11.SERVER)
    h11s.receive_data(stream)
    while type(h11s.next_event()) is not h11.EndOfMessage:
        pass
    assert ours == b"".join(h11s.send(event) for event in (
        h11.Response(status_code=200, headers=[(b"x-a", b"1"), (b"content-length", b"2")],
                     reason=b"OK"), h11.Data(data=b"{}"), h11.EndOfMessage()))
    assert inbound.next_cycle() == keeps
    if keeps:  # the pipelined request, read by a new h11 connection, then one sent after it
        assert type(inbound.next_event()) is h11.Request
        assert bytes(inbound.next_event().data) == b"b"
        assert type(inbound.next_event()) is h11.EndOfMessage
        assert inbound.reply(200, [(b"content-length", b"0")], b"", reason=b"OK")
        assert inbound.next_cycle() and inbound.next_event() is h11.NEED_DATA
        inbound.feed(post(HOST, b"Content-Length: 1") + b"c")
        assert type(inbound.next_event()) is h11.Request
        assert bytes(inbound.next_event().data) == b"c"
