"""A real OCI registry for the tests: Debian's `docker-registry` (CNCF distribution 2.8) on loopback, with
htpasswd users (`htpasswd` from apache2-utils) and TLS from a CA made here; and a plain-HTTP proxy in
front of one that misbehaves on request (cuts a blob short, flips a byte, stalls).
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Registry:
    host: str  # 127.0.0.1:PORT
    folder: Path
    ca: Path | None  # the CA that signed its certificate (TLS), else plain HTTP
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"{'https' if self.ca else 'http'}://{self.host}"

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def _tls(folder: Path) -> tuple[Path, Path, Path]:
    """A CA, and a certificate for 127.0.0.1 that it signed: (ca.pem, server.pem, server.key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "edgekit test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))  # fmt: skip
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(2).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))  # fmt: skip
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))  # fmt: skip
    return paths


@contextlib.contextmanager
def running_registry(
    folder: Path, *, tls: bool = False, users: dict[str, str] | None = None, tokens: TokenServer | None = None
) -> Iterator[Registry]:
    """`docker-registry serve` on a free loopback port; with `users`, htpasswd basic auth; with `tokens`, Bearer
    tokens from that server (the way GHCR, Harbor and ECR authenticate)."""
    binary = shutil.which("docker-registry")
    assert binary, "Debian's docker-registry is not installed: scripts/install.sh --dev installs it (as root)"
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    lines = ["version: 0.1", "log:", "  level: warn", "storage:", "  filesystem:",
             f"    rootdirectory: {folder / 'storage'}", "  delete:", "    enabled: true",
             "http:", f"  addr: 127.0.0.1:{port}"]  # fmt: skip
    ca = None
    if tls:
        ca, cert, key = _tls(folder)
        lines += ["  tls:", f"    certificate: {cert}", f"    key: {key}"]
    if users:
        htpasswd = folder / "htpasswd"
        htpasswd.write_text("".join(subprocess.run(["htpasswd", "-Bbn", user, password], check=True,
                                                   capture_output=True, text=True).stdout.strip() + "\n"
                                    for user, password in users.items()))  # fmt: skip
        lines += ["auth:", "  htpasswd:", "    realm: edgekit-test", f"    path: {htpasswd}"]
    if tokens:
        lines += ["auth:", "  token:", f"    realm: {tokens.realm}", f"    service: {tokens.service}",
                  f"    issuer: {tokens.issuer}", f"    rootcertbundle: {tokens.certificate}"]  # fmt: skip
    (folder / "config.yml").write_text("\n".join(lines) + "\n")
    log = open(folder / "registry.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen([binary, "serve", str(folder / "config.yml")], stdout=log, stderr=log)
    registry = Registry(f"127.0.0.1:{port}", folder, ca, process)
    try:
        _wait_up(registry)
        yield registry
    finally:
        if process.poll() is None:
            registry.stop()
        log.close()


def _wait_up(registry: Registry) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert registry.process.poll() is None, (registry.folder / "registry.log").read_text()
        verify = ssl.create_default_context(cafile=str(registry.ca)) if registry.ca else False
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{registry.url}/v2/", verify=verify).status_code in (200, 401):
                return
        time.sleep(0.1)
    raise AssertionError(f"the registry did not answer: {(registry.folder / 'registry.log').read_text()}")


# --- a proxy that misbehaves ----------------------------------------------------------------------------------


@dataclass
class Fault:
    """What the proxy does to the next blob GETs (`times` of them): cut after `cut` bytes, flip byte `flip`,
    or send `stall_after` bytes and then hang (until the client gives up or is killed)."""

    cut: int | None = None
    flip: int | None = None
    stall_after: int | None = None
    times: int = 1
    min_size: int = 2**20  # only blobs at least this big (the model files, not the manifest or the signature)
    seen: list[str] = field(default_factory=list)  # the Range headers of the blob GETs it served


class LoopbackServer:
    """An HTTP/1.1 server on a free loopback port, in a thread, handing every request to `handle`."""

    def __init__(self, handle: Callable[[BaseHTTPRequestHandler], None]) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                handle(self)

            do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = do_GET

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Proxy(LoopbackServer):
    """Plain HTTP on loopback in front of a plain-HTTP registry, forwarding everything, faulting on request."""

    def __init__(self, upstream: str) -> None:
        self.upstream, self.fault = upstream, Fault(times=0)
        super().__init__(self.forward)

    def forward(self, handler: BaseHTTPRequestHandler) -> None:
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in ("host", "content-length")}
        with httpx.stream(handler.command, f"http://{self.upstream}{handler.path}", headers=headers,
                          content=body, follow_redirects=False, timeout=60) as response:  # fmt: skip
            size = int(response.headers.get("Content-Length") or 0)
            blob = handler.command == "GET" and "/blobs/" in handler.path and response.status_code in (200, 206)
            fault = self.fault if blob and size >= self.fault.min_size and self.fault.times > 0 else None
            if fault is not None:
                fault.times -= 1
            if blob:
                self.fault.seen.append(handler.headers.get("Range") or "")
            handler.send_response(response.status_code)
            for key, value in response.headers.items():
                if key.lower() not in ("transfer-encoding", "connection"):
                    handler.send_header(key, value)
            handler.end_headers()
            if handler.command != "HEAD":
                self._send(handler, response.iter_bytes(), fault)

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, chunks: Iterator[bytes], fault: Fault | None) -> None:
        sent = 0
        for chunk in chunks:
            if fault is not None and fault.flip is not None and sent <= fault.flip < sent + len(chunk):
                at = fault.flip - sent
                chunk = chunk[:at] + bytes([chunk[at] ^ 0xFF]) + chunk[at + 1 :]
            for limit in (fault.cut, fault.stall_after) if fault is not None else ():
                if limit is not None and sent + len(chunk) >= limit:
                    handler.wfile.write(chunk[: limit - sent])
                    handler.wfile.flush()
                    if fault is not None and limit == fault.stall_after:
                        time.sleep(3600)
                    handler.close_connection = True
                    handler.connection.shutdown(socket.SHUT_RDWR)
                    return
            handler.wfile.write(chunk)
            sent += len(chunk)


# --- a token server, as GHCR, Harbor and ECR have -------------------------------------------------------------


class TokenServer(LoopbackServer):
    """The distribution token protocol: GET /token?service=…&scope=repository:NAME:ACTIONS with Basic auth answers
    a JWT (ES256, its certificate in x5c) granting the actions `rights` gives that user, nothing to others."""

    service, issuer = "edgekit-test-registry", "edgekit-test-issuer"

    def __init__(self, folder: Path, rights: dict[str, tuple[str, set[str]]]) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        folder.mkdir(parents=True, exist_ok=True)
        self.rights = rights  # user → (password, actions)
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "edgekit test token issuer")])
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(self.key.public_key())
                     .serial_number(3).not_valid_before(now - datetime.timedelta(minutes=5))
                     .not_valid_after(now + datetime.timedelta(days=1))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))  # fmt: skip
        self.certificate = folder / "token-issuer.pem"
        self.certificate.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self.issued: list[tuple[str, str]] = []  # (user, actions granted)
        super().__init__(self.answer)
        self.realm = f"http://{self.host}/token"

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        import base64
        import json
        from urllib.parse import parse_qs, urlparse

        query = parse_qs(urlparse(handler.path).query)
        user, _, password = (
            base64.b64decode((handler.headers.get("Authorization") or "Basic ").split(" ", 1)[1] or b"")
            .decode()
            .partition(":")
        )
        if user not in self.rights or self.rights[user][0] != password:
            handler.send_response(401)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        access = []
        for scope in query.get("scope", []):
            kind, name, actions = scope.split(":")
            granted = sorted(set(actions.split(",")) & self.rights[user][1])
            access.append({"type": kind, "name": name, "actions": granted})
            self.issued.append((user, ",".join(granted)))
        body = json.dumps({"token": self._jwt(user, access)}).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def _jwt(self, user: str, access: list[dict[str, object]]) -> str:
        import base64
        import json

        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

        def b64(data: bytes) -> str:
            return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

        now = int(time.time())
        x5c = [base64.b64encode(self.cert.public_bytes(serialization.Encoding.DER)).decode()]
        header = {"typ": "JWT", "alg": "ES256", "x5c": x5c}
        claims = {"iss": self.issuer, "sub": user, "aud": self.service, "exp": now + 300, "nbf": now - 10,
                  "iat": now, "jti": f"{user}-{now}-{len(self.issued)}", "access": access}  # fmt: skip
        signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
        r, s = decode_dss_signature(self.key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
        return f"{signing_input}.{b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"
