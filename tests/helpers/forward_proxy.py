"""Loopback stand-ins for the outside world: a forward proxy, an HTTP(S) JSON endpoint, a self-signed certificate.

The proxy resolves host names only through its own `hosts` table (say `api.test` -> the endpoint's loopback port),
so a test can call an endpoint that looks external while no byte leaves loopback; a name it does not know gets a 502.
It counts CONNECT tunnels and forwarded plain-HTTP connections, and keeps each one's first request head.
"""

import asyncio
import datetime
import gzip
import ipaddress
import ssl
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import orjson
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def self_signed_cert(folder: Path, names: tuple[str, ...] = ("api.test", "localhost")) -> tuple[Path, Path]:
    """A certificate for `names` and 127.0.0.1, signed by its own key: (certificate, key) PEM files in `folder`.
    Point SSL_CERT_FILE at the certificate and ssl.create_default_context() trusts it."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    now = datetime.datetime.now(datetime.timezone.utc)
    alt_names: list[x509.GeneralName] = [x509.DNSName(name) for name in names]
    alt_names.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


async def _read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
    """One request's head and body (Content-Length framed), or None at the connection's end."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head, await reader.readexactly(length) if length else b""


def header(head: bytes, name: bytes) -> bytes | None:
    """The value of header `name` in a request head, or None."""
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


@dataclass
class JsonEndpoint:
    """Answers every request with `{"ok": true, "path": ...}`, gzip-encoded when the request asked for it (or always,
    with `gzip_always`; `encoding` replaces the body with bytes labelled with that Content-Encoding), and keeps each
    request's head. TLS when `cert` is given. Listens on 127.0.0.1."""

    cert: tuple[Path, Path] | None = None
    gzip_always: bool = False
    encoding: tuple[bytes, bytes] | None = None  # (Content-Encoding, body) to send instead
    heads: list[bytes] = field(default_factory=list)
    port: int = 0
    _server: asyncio.Server | None = None

    async def __aenter__(self) -> "JsonEndpoint":
        tls = None
        if self.cert is not None:
            tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            tls.load_cert_chain(*self.cert)
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        with suppress(ConnectionError):
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while (request := await _read_request(reader)) is not None:
                head, _ = request
                self.heads.append(head)
                path = head.split(b" ", 2)[1].decode()
                body, extra = orjson.dumps({"ok": True, "path": path}), b""
                if self.encoding is not None:
                    extra, body = b"content-encoding: %s\r\n" % self.encoding[0], self.encoding[1]
                elif self.gzip_always or b"gzip" in (header(head, b"accept-encoding") or b""):
                    extra, body = b"content-encoding: gzip\r\n", gzip.compress(body)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s"
                             % (len(body), extra, body))
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()


@dataclass
class ForwardProxy:
    """A forward proxy on 127.0.0.1: CONNECT tunnels and absolute-form plain HTTP, to the loopback ports of `hosts`
    ("name:port" -> loopback port). `refuse` answers 407 to everything; `close` closes each connection unanswered.
    `tunnels` and `forwarded` hold the first request head of each connection it served, `proxy_auth` the
    Proxy-Authorization value of each."""

    hosts: dict[str, int]
    mode: Literal["serve", "refuse", "close"] = "serve"
    tunnels: list[bytes] = field(default_factory=list)
    forwarded: list[bytes] = field(default_factory=list)
    proxy_auth: list[bytes | None] = field(default_factory=list)
    port: int = 0
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def seen(self) -> int:
        return len(self.tunnels) + len(self.forwarded)

    async def __aenter__(self) -> "ForwardProxy":
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with suppress(ConnectionError):
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._relay(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:  # our own __aexit__ stopping a tunnel: a cancelled handler task is logged
            pass
        finally:
            writer.close()
            self._tasks.discard(task)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await _read_request(reader)
        if request is None:
            return
        head, body = request
        method, target, _ = head.split(b" ", 2)
        self.proxy_auth.append(header(head, b"proxy-authorization"))
        if method == b"CONNECT":
            self.tunnels.append(head)
            authority = target.decode()
        else:
            self.forwarded.append(head)
            authority = target.decode().split("/")[2]
            if ":" not in authority:
                authority += ":80"
        if self.mode == "close":
            return
        if self.mode == "refuse":
            writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\nproxy-authenticate: Basic\r\n"
                         b"content-length: 0\r\n\r\n")
            await writer.drain()
            return
        if authority not in self.hosts:  # never resolve a name for real: nothing leaves loopback
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
            await writer.drain()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.hosts[authority])
        try:
            if method == b"CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:  # the origin form of the request line, as the endpoint expects it
                path = "/" + target.decode().split("/", 3)[3] if target.count(b"/") >= 3 else "/"
                up_writer.write(head.replace(target, path.encode(), 1) + body)
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            up_writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        with suppress(ConnectionError, RuntimeError):
            writer.write_eof()
