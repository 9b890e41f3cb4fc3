"""The front's HTTP layer (mlops/endpoints/front_inbound.py: llhttp with nginx's rules from
front_wire.py) against hostile byte streams, with no socket: each stream gets the answer nginx
gives it (nginx 1.25's ngx_http_parse.c and ngx_http_request.c: duplicate unique fields,
Content-Length, Transfer-Encoding and chunk rules), whether it arrives at once or a byte at a
time."""

from __future__ import annotations

import h11
import pytest

from mlops.endpoints import front_wire as wire
from mlops.endpoints.front_inbound import END, NEED_DATA, PAUSED, REQUEST, Inbound

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
    ("chunk data holding CR LF CR LF (a multipart body, sent chunked)",
     post(HOST, CHUNKED) + b"6\r\nab\r\n\r\n\r\n4\r\n\r\n\r\n\r\n0\r\n\r\n", OK),
    ("a chunk size past the cap, before its data (nginx: announced)",
     post(HOST, CHUNKED) + b"ffffffff\r\nxx", 413),
    ("chunk sizes adding up past the cap, the last one's data not sent",
     post(HOST, CHUNKED) + b"200;e=1\r\n" + b"x" * 512 + b"\r\n201\r\n", 413),
    ("chunks adding up to the cap, with data that looks like sizes",
     post(HOST, CHUNKED) + b"8\r\nff\r\n\r\nab\r\n3e0\r\n" + b"x" * 992 + b"\r\n0\r\n\r\n", OK),
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
    ("an empty Host", post(b"Host: ", b"Content-Length: 0"), 400),
    ("a Host with a slash", post(b"Host: a/b", b"Content-Length: 0"), 400),
    ("a Host with ..", post(b"Host: a..b", b"Content-Length: 0", version=b"1.0"), 400),
    ("a Host with a port and no name", post(b"Host: :5001", b"Content-Length: 0"), 400),
    ("a Host with a space", post(b"Host: a b", b"Content-Length: 0"), 400),
    ("a Host of a name, an IPv6 literal, a trailing dot",
     post(b"Host: [::1]:5001", b"Content-Length: 0").replace(b"/score", b"http://a.b./s"), OK),
    ("a request line of 8 KiB", post(HOST, b"Content-Length: 0").replace(
        b"/score", b"/score?" + b"a" * 8192), 414),
    ("a request line under 8 KiB", post(HOST, b"Content-Length: 0").replace(
        b"/score", b"/score?" + b"a" * 8000), OK),
    ("a field line over 8 KiB", post(HOST, b"Cookie: " + b"a" * 8192, b"Content-Length: 0"),
     400),
    ("fields over 8 KiB, each under it", post(HOST, *[b"X-A: " + b"a" * 4000] * 4,
                                              b"Content-Length: 0"), OK),
    ("a bare CR in the request line", b"POST /score HTTP/1.1\rHost: x\r\n\r\n", 400),
    ("HTTP/2.0 in a request line", post(HOST, version=b"2.0"), 505),
    ("a lower-case method", post(HOST, method=b"post"), 400),
    ("TRACE", post(HOST, method=b"TRACE"), 405),
    ("CONNECT", b"CONNECT x:443 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 405),
    ("Upgrade: h2c (curl --http2 on http)", post(HOST, b"Connection: Upgrade, HTTP2-Settings",
                                                 b"Upgrade: h2c", b"HTTP2-Settings: AAMAAABk",
                                                 b"Content-Length: 2") + b"{}", OK),
    ("Upgrade: websocket, LF-only lines", post(HOST, b"Connection: upgrade",
                                                b"Upgrade: websocket", method=b"GET")
     .replace(b"\r\n", b"\n"), OK),
    ("a NUL in a field value", post(HOST, b"X-A: a\x00b"), 400),
    ("a head over 64 KiB", post(HOST, b"X-A: " + b"a" * 70_000), 431),
    ("a TLS handshake", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40
     + b"\r\n\r\n", 400),
    ("a head that never ends", b"POST /score HTTP/1.1\r\nHost: x\r\nX-A: 1", WAITS),
    ("OPTIONS *", b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("an absolute target", b"POST http://x/score HTTP/1.1\r\nHost: x\r\n\r\n", OK),
    ("a path above the root", b"GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("a %-encoded path above the root",
     b"GET /score/%2e%2E/..%2f..%2fetc HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("an absolute target above the root", b"GET http://x/a/../../b HTTP/1.1\r\nHost: x\r\n\r\n",
     400),
    ("a path that climbs and stays under the root",
     b"GET //a/./b/../score?next=/../%2e%2e HTTP/1.1\r\nHost: x\r\n\r\n", OK),
]


def answer(stream: bytes, *, by_byte: bool = False):
    """What the front does with `stream`: OK, the status it refuses with, or WAITS."""
    inbound, body = Inbound(), None
    pieces = [stream[i:i + 1] for i in range(len(stream))] if by_byte else [stream]
    try:
        for piece in pieces:
            inbound.feed(piece)
            while (event := inbound.next_event()) not in (NEED_DATA, PAUSED):
                if event is REQUEST:
                    inbound.cap = LIMIT
                    if inbound.left > LIMIT:
                        raise wire.too_large(LIMIT)
                    body = wire.Body(LIMIT)
                elif type(event) is bytes:
                    body.add(event)
                elif event is END:
                    return OK
    except wire.Refused as refused:
        assert inbound.refuse(refused).startswith(b"HTTP/1.1 %d " % refused.status)
        return refused.status
    return WAITS


def events(inbound: Inbound) -> list:
    """What the inbound hands out until it needs more or waits for an answer."""
    out = []
    while (event := inbound.next_event()) not in (NEED_DATA, PAUSED):
        out.append(event)
    return out


@pytest.mark.parametrize(("what", "stream", "nginx"), STREAMS, ids=[s[0] for s in STREAMS])
def test_each_stream_gets_nginxs_answer(what, stream, nginx):
    assert answer(stream) == nginx, what


@pytest.mark.parametrize(("what", "stream", "nginx"),
                         [s for s in STREAMS if len(s[1]) < 4000], ids=lambda s: str(s)[:40])
def test_a_stream_sent_a_byte_at_a_time_gets_the_same_answer(what, stream, nginx):
    assert answer(stream, by_byte=True) == nginx, what


def test_a_refusal_says_why_and_closes_the_connection():
    inbound = Inbound()
    inbound.feed(post(HOST, b"Content-Length: 2", CHUNKED))
    with pytest.raises(wire.Refused) as refused:
        inbound.next_event()
    out = inbound.refuse(refused.value)
    assert out.startswith(b"HTTP/1.1 400 Bad Request\r\n") and b"connection: close" in out
    assert b"both Content-Length and Transfer-Encoding" in out


@pytest.mark.parametrize("chunked", [False, True])
def test_pipelined_requests_are_read_one_after_the_other(chunked):
    """The parser never reads ahead into the next request: it waits, as it came, for the
    first one's answer (and nginx's rules read its head as it came)."""
    first = post(HOST, CHUNKED) + b"1\r\na\r\n0\r\n\r\n" if chunked else \
        post(HOST, b"Content-Length: 1") + b"a"
    second = post(HOST, b"Content-Length: 1") + b"b"
    inbound = Inbound()
    inbound.feed(first + second + b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert events(inbound) == [REQUEST, b"a", END]
    assert inbound.next_event() is PAUSED and bytes(inbound.buf).startswith(second)
    assert inbound.reply(200, [(b"content-length", b"0")], b"", reason=b"OK")
    assert inbound.next_cycle() and inbound.buf  # the next request is already here
    assert events(inbound) == [REQUEST, b"b", END]
    assert inbound.reply(200, [(b"content-length", b"0")], b"", reason=b"OK")
    assert inbound.next_cycle()
    assert events(inbound) == [REQUEST, END] and inbound.method == b"GET"


def test_a_pipelined_head_is_checked_as_it_came():
    inbound = Inbound()
    inbound.feed(post(HOST, CHUNKED) + b"0\r\n\r\n" + b"POST /x HTTP/1.1\nHost: x\n"
                 b" folded: 1\nContent-Length: 0\n\n")
    assert events(inbound) == [REQUEST, END]
    inbound.reply(200, [(b"content-length", b"0")], b"", reason=b"OK")
    assert inbound.next_cycle()
    with pytest.raises(wire.Refused) as refused:
        inbound.next_event()
    assert refused.value.status == 400 and "folding" in refused.value.message


@pytest.mark.parametrize("framing", [b"Content-Length: 32", CHUNKED])
def test_a_request_asking_to_upgrade_is_read_whole_as_nginx_reads_it(framing):
    """llhttp ends a request with `Connection: upgrade` at its head and leaves its body to be
    read as the next request; nginx reads it as any request (and Upgrade is hop-by-hop)."""
    hidden = b"GET /admin HTTP/1.1\r\nHost: x\r\n\r\n"
    body = hidden if framing != CHUNKED else b"20\r\n" + hidden + b"\r\n0\r\n\r\n"
    inbound = Inbound()
    inbound.feed(post(HOST, b"Connection: Upgrade", b"Upgrade: x", framing) + body)
    assert events(inbound) == [REQUEST, hidden, END] and not inbound.buf
    forward = wire.upstream_request(inbound.method, inbound.target, inbound.items, length=32,
                                    connection=inbound.fields[b"connection"])
    assert b"pgrade" not in forward.head(b"h")
    assert inbound.reply(200, [(b"content-length", b"0")], b"", reason=b"OK")
    assert inbound.next_cycle()
    inbound.feed(post(HOST, b"Content-Length: 1") + b"b")
    assert events(inbound) == [REQUEST, b"b", END]


def test_a_chunked_bodys_end_split_across_reads_is_not_read_past():
    inbound = Inbound()
    for piece in (post(HOST, CHUNKED) + b"1\r\na\r\n0\r\n", b"\r\nGET / HTTP/1.1\r\n",
                  b"Host: x\r\n\r\n"):
        inbound.feed(piece)
    assert events(inbound) == [REQUEST, b"a", END]
    assert bytes(inbound.buf) == b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"


def test_a_method_llhttp_does_not_know_is_read_as_nginx_reads_it():
    inbound = Inbound()
    inbound.feed(post(HOST, b"Content-Length: 0", method=b"FROB"))
    assert events(inbound) == [REQUEST, END] and inbound.method == b"FROB"
    forward = wire.upstream_request(inbound.method, inbound.target, inbound.items, length=0)
    assert forward.head(b"h").startswith(b"FROB /score HTTP/1.1\r\n")


@pytest.mark.parametrize(("stream", "expects"), [
    (post(HOST, b"Content-Length: 2", b"Expect: 100-continue"), True),
    (post(HOST, b"Content-Length: 2", b"Expect: 100-continue") + b"{}", False),  # here already
    (post(HOST, b"Content-Length: 2", b"Expect: 100-continue", version=b"1.0"), False),
    (post(HOST, b"Content-Length: 0", b"Expect: 100-continue"), False),
])
def test_100_continue_is_owed_as_h11_owes_it(stream, expects):
    inbound = Inbound()
    inbound.feed(stream)
    assert inbound.next_event() is REQUEST and inbound.expects_continue == expects


def test_a_client_that_closes_mid_request_is_refused_and_between_requests_closes_quietly():
    for stream in (b"POST /score HTTP/1.1\r\nHo", post(HOST, b"Content-Length: 5") + b"ab"):
        inbound = Inbound()
        inbound.feed(stream)
        with pytest.raises(wire.Refused) as refused:
            inbound.feed(b"")
            events(inbound)
        assert refused.value.status == 400
    inbound = Inbound()
    inbound.feed(b"\r\n")
    inbound.feed(b"")
    assert inbound.next_event() == "closed"


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
    inbound = Inbound()
    inbound.feed(post(HOST, b"Connection: keep-alive, x-hop", b"X-Hop: 1", b"Connection: x-two",
                      b"X-Two: 2", CHUNKED, b"Expect: 100-continue", b"X-Kept: 1"))
    assert inbound.next_event() is REQUEST
    sent = wire.upstream_request(inbound.method, inbound.target, inbound.items, length=7,
                                 connection=inbound.fields[b"connection"]).headers
    assert sent == [(b"Host", b"x"), (b"X-Kept", b"1"), (b"Content-Length", b"7")]


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
    ((b"Connection: keep-alive", b"Connection: close"), b"1.1", False),
    ((), b"1.0", False),
])
def test_an_answer_is_written_as_h11_writes_it_and_keeps_the_connection_by_its_rule(
        fields, version, keeps):
    inbound = Inbound()
    stream = post(HOST, b"Content-Length: 1", *fields, version=version) + b"a"
    inbound.feed(stream + post(HOST, b"Content-Length: 1") + b"b")
    assert events(inbound) == [REQUEST, b"a", END]
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
    if keeps:  # the pipelined request, then one sent after it
        assert events(inbound) == [REQUEST, b"b", END]


def test_an_http_1_0_request_asking_to_keep_the_connection_keeps_it_as_nginx_does():
    """HTTP/1.0 with `Connection: keep-alive` keeps the connection (RFC 9112 9.3; nginx keeps
    it), and the answer says so, since an HTTP/1.0 client closes after an answer otherwise."""
    inbound = Inbound()
    stream = post(b"Connection: Keep-Alive", b"Content-Length: 1", version=b"1.0") + b"a"
    inbound.feed(stream + post(b"Content-Length: 1", version=b"1.0") + b"b")
    assert events(inbound) == [REQUEST, b"a", END]
    ours = inbound.reply(200, [(b"content-length", b"2")], b"{}", reason=b"OK")
    assert ours.endswith(b"\r\nConnection: keep-alive\r\n\r\n{}") and inbound.next_cycle()
    assert events(inbound) == [REQUEST, b"b", END]  # without it: closed after the answer
    assert inbound.reply(200, [(b"content-length", b"2")], b"{}", reason=b"OK").endswith(
        b"\r\nConnection: close\r\n\r\n{}") and not inbound.next_cycle()
