"""HTTPS on the tracking server's port without a process (mlops/runtime/local_tls.py,
mlflow_serve.dual_server, trust_store.py): the local authority is made once and remade when
damaged or expiring; one listening socket answers plain HTTP and TLS, a silent or broken TLS
client neither holds the accept loop nor stops the server; a job's certifi bundle gains the
local authority."""

from __future__ import annotations

import datetime
import http.client
import json
import socket
import ssl
import threading
import types
from pathlib import Path

import certifi
import pytest
from support import until

from mlops.runtime import local_tls, trust_store
from mlops.runtime.mlflow_serve import dual_server


def test_the_authority_is_made_once_checked_and_remade_when_damaged_or_expiring(tmp_path):
    folder = tmp_path / "cache" / "local-tls"
    tls = local_tls.ensure(folder)
    first = tls.fingerprint
    assert local_tls.ensure(folder).fingerprint == first  # kept: made once
    assert sorted(p.name for p in folder.iterdir()) == ["ca.pem", "digest.json", "server.pem"]
    assert (folder / "server.pem").stat().st_mode & 0o077 == 0  # its key is the user's alone
    (folder / "server.pem").write_bytes(b"damaged")
    remade = local_tls.ensure(folder).fingerprint
    assert remade != first
    digest = json.loads((folder / "digest.json").read_text())
    soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    (folder / "digest.json").write_text(json.dumps({**digest, "expires": soon.isoformat()}))
    second = local_tls.ensure(folder).fingerprint
    assert second not in (first, remade) and local_tls.sound(folder)
    assert [p.name for p in folder.parent.iterdir() if p.name != ".local-tls.lock"] == \
        ["local-tls"]  # nothing staged or put aside is left


def test_runs_making_it_at_once_share_one(tmp_path):
    folder = tmp_path / "local-tls"
    found: list[str] = []
    threads = [threading.Thread(target=lambda: found.append(
        local_tls.ensure(folder).fingerprint)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(found) == 4 and len(set(found)) == 1


def hello(environ, start_response):
    body = json.dumps({"scheme": environ["wsgi.url_scheme"],
                       "path": environ["PATH_INFO"]}).encode()
    start_response("200 OK", [("Content-Type", "application/json"),
                              ("Content-Length", str(len(body)))])
    return [body]


@pytest.fixture
def served(tmp_path, monkeypatch):
    """The tracking server's socket server (a small app in its place) in a thread."""
    monkeypatch.setattr(local_tls, "HANDSHAKE_S", 0.5)
    tls = local_tls.ensure(tmp_path / "local-tls")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    server = dual_server(listener.fileno(), hello, str(tls.folder))
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield tls, server.socket.getsockname()[1]
    server.shutdown()
    server.server_close()
    listener.close()


def ask(port: int, tls=None, path="/health") -> dict:
    if tls is None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    else:
        context = ssl.create_default_context(cafile=str(tls.ca))
        context.verify_flags |= ssl.VERIFY_X509_STRICT
        connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    try:
        connection.request("GET", path)
        return json.loads(connection.getresponse().read())
    finally:
        connection.close()


def test_one_port_answers_plain_http_and_tls(served):
    tls, port = served
    assert ask(port) == {"scheme": "http", "path": "/health"}
    assert ask(port, tls, "/history/x") == {"scheme": "https", "path": "/history/x"}
    with pytest.raises(ssl.SSLCertVerificationError):  # a client that trusts only public CAs
        ask(port, types.SimpleNamespace(ca=certifi.where()))


def closed(client: socket.socket) -> bool:
    try:
        return client.recv(64) == b""
    except ConnectionResetError:
        return True


def test_a_silent_or_broken_tls_client_leaves_the_server_answering(served):
    tls, port = served
    silent = socket.create_connection(("127.0.0.1", port))  # says nothing
    stalled = socket.create_connection(("127.0.0.1", port))
    stalled.sendall(b"\x16\x03\x01")  # a handshake that never goes on
    broken = socket.create_connection(("127.0.0.1", port))
    broken.sendall(b"\x16" + b"\xff" * 64)  # not TLS after its first byte
    assert ask(port, tls)["scheme"] == "https"  # the accept loop is not held by them
    for client in (silent, stalled, broken):
        client.settimeout(10)
        until(lambda c=client: closed(c), 10, "the server to close a bad client")
        client.close()
    assert ask(port) == {"scheme": "http", "path": "/health"}


def test_a_jobs_certifi_bundle_gains_the_local_authority(tmp_path, monkeypatch):
    tls = local_tls.ensure(tmp_path / "local-tls")
    public = tmp_path / "cacert.pem"
    public.write_text("-----BEGIN CERTIFICATE-----\npublic\n-----END CERTIFICATE-----\n")
    monkeypatch.setattr(trust_store.sys, "prefix", str(tmp_path / "env"))
    monkeypatch.setenv(trust_store.VARIABLE, str(tls.ca))
    module = types.SimpleNamespace(where=lambda: str(public))  # certifi as the job imports it
    trust_store.patch(module)
    bundle = module.where()
    assert bundle.startswith(str(tmp_path / "env" / "mlops-trust"))
    assert Path(bundle).read_text() == public.read_text() + tls.ca.read_text()
    assert module.where() == bundle and trust_store.with_local_ca(bundle) == bundle
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(public))  # the user's own bundle: it gains it
    monkeypatch.setattr(trust_store.sys, "meta_path", [])
    trust_store.install()
    assert trust_store.os.environ["REQUESTS_CA_BUNDLE"] == bundle
    assert isinstance(trust_store.sys.meta_path[0], trust_store.Finder)
    monkeypatch.delenv(trust_store.VARIABLE)  # a job the runner gave no authority: untouched
    assert trust_store.with_local_ca(str(public)) == str(public)


def test_certifi_loaded_through_the_finder_reads_its_own_bundle_plus_the_authority(
        tmp_path, monkeypatch):
    """The patching loader is certifi's own for everything else: certifi finds its bundle
    through the loader's resource reader."""
    import importlib.util

    tls = local_tls.ensure(tmp_path / "local-tls")
    monkeypatch.setattr(trust_store.sys, "prefix", str(tmp_path / "env"))
    monkeypatch.setenv(trust_store.VARIABLE, str(tls.ca))
    spec = trust_store.Finder().find_spec("certifi", None)
    fresh = importlib.util.module_from_spec(spec)  # a copy: the suite's certifi is untouched
    monkeypatch.setitem(trust_store.sys.modules, "certifi", fresh)
    monkeypatch.delitem(trust_store.sys.modules, "certifi.core")  # and its bundle found anew
    spec.loader.exec_module(fresh)
    text = Path(fresh.where()).read_text()
    assert text.startswith(Path(certifi.where()).read_text().rstrip("\n"))
    assert text.endswith(tls.ca.read_text()) and certifi.where() != fresh.where()
