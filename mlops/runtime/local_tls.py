"""HTTPS on the warm tracking server's own port: a local certificate authority and a server
certificate for 127.0.0.1 and localhost, made once, and the accept-side sniffing that lets one
listening socket answer both plain HTTP and TLS.

Why: a job reaches Azure ML's services on its tracking URI's host, and some build the URL with
`https://` whatever the URI's scheme (responsible-AI's run-history call, run_history.py); locally
that host is the tracking server, http://127.0.0.1:<port>. Azure's image trusts its service's
certificate; a local job trusts this authority instead (trust_store.py, in its environment).

The files live in the cache (`local-tls/`: ca.pem, server.pem with its key, digest.json), made in
a staged folder and renamed into place whole (two runs at once keep one), and checked before use:
a damaged, foreign or expiring set is put aside and made again. Keys are P-256 (made in a
millisecond, unlike RSA's tenth of a second); the certificates meet Python's strict verification.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import json
import os
import shutil
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from mlops.project import cache_root

FOLDER = "local-tls"
FILES = ("ca.pem", "server.pem")
VALID_DAYS = 3650
RENEW_BEFORE = datetime.timedelta(days=1)
HANDSHAKE_S = 10.0  # a client that connects and says nothing, or stalls its handshake
TLS_RECORD = 0x16  # the first byte of a TLS handshake record (a ClientHello)


@dataclass(frozen=True)
class LocalTls:
    """The local authority (`ca`, what a job trusts) and the server's certificate and key
    (`server`, one PEM file); `fingerprint` names the authority."""

    folder: Path

    @property
    def ca(self) -> Path:
        return self.folder / "ca.pem"

    @property
    def server(self) -> Path:
        return self.folder / "server.pem"

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(self.ca.read_bytes()).hexdigest()

    def server_context(self) -> ssl.SSLContext:
        """The server side: TLS 1.2 or newer with the server certificate."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.server)
        return context


def ensure(folder: Path | None = None) -> LocalTls:
    """The authority and server certificate in `folder` (default: the cache's local-tls/),
    made now when missing, damaged or about to expire (under a lock: runs of two stores at once
    make one set). OSError: the cache cannot be written."""
    folder = folder or cache_root() / FOLDER
    if sound(folder):
        return LocalTls(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(folder.with_name(f".{folder.name}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                   0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not sound(folder):
            made = staged(folder)
            aside = made.with_name(made.name + ".old")
            if folder.exists():
                os.replace(folder, aside)
            os.rename(made, folder)
            shutil.rmtree(aside, ignore_errors=True)
    finally:
        os.close(lock)
    if not sound(folder):
        raise OSError(f"the local TLS certificate in {folder} could not be made")
    return LocalTls(folder)


def sound(folder: Path) -> bool:
    """The set is whole (its digest holds) and its server certificate is valid for a day more
    (read from the digest file: no certificate is parsed on a run's way)."""
    try:
        digest = json.loads((folder / "digest.json").read_text())
        data = {name: (folder / name).read_bytes() for name in FILES}
        expires = datetime.datetime.fromisoformat(digest.pop("expires"))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return False
    return digest == {name: hashlib.sha256(data[name]).hexdigest() for name in FILES} and \
        expires - RENEW_BEFORE > datetime.datetime.now(datetime.UTC)


def staged(folder: Path) -> Path:
    """A new set, written whole into a folder beside `folder` (nothing left on failure)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    made = folder.with_name(f".{folder.name}.{os.getpid()}.{os.urandom(4).hex()}")
    made.mkdir(mode=0o700)
    try:
        write_set(made)
    except BaseException:
        shutil.rmtree(made, ignore_errors=True)
        raise
    return made


def write_set(made: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    ca, ca_key = authority()
    server, server_key = leaf(ca, ca_key)
    pem = serialization.Encoding.PEM
    key = server_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption())
    data = {"ca.pem": ca.public_bytes(pem), "server.pem": server.public_bytes(pem) + key}
    for name, content in data.items():
        descriptor = os.open(made / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as out:
            out.write(content)
    digest = {name: hashlib.sha256(content).hexdigest() for name, content in data.items()}
    digest["expires"] = server.not_valid_after_utc.isoformat()
    (made / "digest.json").write_text(json.dumps(digest))


def _builder(subject: str, issuer: str, public_key):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), False))


CA_NAME = "azml local tracking server CA"


def authority():
    """A self-signed authority that may sign server certificates only (path length 0)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    usage = x509.KeyUsage(digital_signature=False, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          key_cert_sign=True, crl_sign=True, encipher_only=False,
                          decipher_only=False)
    cert = (_builder(CA_NAME, CA_NAME, key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), True)
            .add_extension(usage, True)
            .sign(key, hashes.SHA256()))
    return cert, key


def leaf(ca, ca_key):
    """The server certificate for 127.0.0.1, ::1 and localhost, signed by the authority."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
             x509.IPAddress(ipaddress.ip_address("::1"))]
    usage = x509.KeyUsage(digital_signature=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          key_cert_sign=False, crl_sign=False, encipher_only=False,
                          decipher_only=False)
    authority_key = x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key())
    cert = (_builder("127.0.0.1", CA_NAME, key.public_key())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
            .add_extension(usage, True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
            .add_extension(x509.SubjectAlternativeName(names), False)
            .add_extension(authority_key, False)
            .sign(ca_key, hashes.SHA256()))
    return cert, key


class Sniffing:
    """A socketserver mix-in (before the server class: `class S(Sniffing, ThreadedWSGIServer)`)
    whose connections may each be plain or TLS: the first byte, peeked in the connection's own
    thread, tells (0x16 opens a TLS handshake), so neither a slow client nor a bad handshake
    holds the accept loop. `tls_context`: the server side's (None: plain only). A connection
    that sends nothing or a broken handshake within HANDSHAKE_S is closed, the server unmoved."""

    tls_context: ssl.SSLContext | None = None

    def finish_request(self, request, client_address) -> None:
        try:
            wrapped = self.sniffed(request)
        except OSError:  # a timeout, a reset, a bad handshake (ssl.SSLError is an OSError)
            return
        if wrapped is None:
            return
        try:
            super().finish_request(wrapped, client_address)
        except ssl.SSLError:  # the client broke TLS mid-request: its connection alone ends
            pass
        finally:
            if wrapped is not request:
                with contextlib.suppress(OSError):
                    wrapped.close()

    def sniffed(self, request: socket.socket) -> socket.socket | None:
        """The connection as the request handler reads it: TLS unwrapped, or as it is; None
        when the client left without a byte."""
        request.settimeout(HANDSHAKE_S)
        first = request.recv(1, socket.MSG_PEEK)
        if not first:
            return None
        if first[0] == TLS_RECORD and self.tls_context is not None:
            request = self.tls_context.wrap_socket(request, server_side=True)
        request.settimeout(None)
        return request
