"""A client of the OCI distribution API, as much of it as push and pull need, over `requests`.

Auth follows the registry's challenge: HTTP Basic (distribution's htpasswd) or a Bearer token from the
realm it names (GHCR, Harbor, ECR, Docker Hub), with the credentials of `credentials.py`. HTTPS by
default, verified against the system's CAs or `ca_file`; plain HTTP (`insecure`) only on loopback.
Blobs stream in both directions; a GET may start at an offset (a Range request) to resume.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import urljoin, urlsplit

import requests
from requests import Response

from edgekit.errors import UsageError
from edgekit.ship.oci.credentials import Credentials, credentials_for
from edgekit.ship.oci.errors import ArtifactError, RegistryAuthError, RegistryError, RegistryNotFound
from edgekit.ship.oci.reference import Reference

MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
MANIFEST_MAX = 4 * 2**20
TIMEOUT = (10.0, 60.0)  # connect, and between two reads
RETRY_HINT = "check that the registry is up and reachable, then run the same command again"
CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True)
class Connection:
    """How to reach a registry: verified TLS (optionally against `ca_file`), or plain HTTP on loopback."""

    ca_file: Path | None = None
    insecure: bool = False


class Registry:
    def __init__(self, ref: Reference, connection: Connection, *, push: bool = False) -> None:
        if connection.insecure and not ref.is_loopback():
            raise UsageError(f"--insecure (plain HTTP) is allowed only for a registry on loopback, not {ref.host}",
                             "serve the registry over TLS and give its CA with --ca-file")  # fmt: skip
        if connection.ca_file is not None and not Path(connection.ca_file).is_file():
            raise UsageError(f"--ca-file {connection.ca_file} is not a file", "give the registry's CA (PEM)")
        self.ref = ref
        self.base = f"{'http' if connection.insecure else 'https'}://{ref.host}"
        self.scope = f"repository:{ref.repository}:{'pull,push' if push else 'pull'}"
        self.credentials: Credentials | None = credentials_for(ref.host)
        self.session = requests.Session()
        # per request, not on the session: requests lets $REQUESTS_CA_BUNDLE override a session's `verify`
        self.verify: str | bool = str(connection.ca_file) if connection.ca_file else True
        self.session.headers["User-Agent"] = "edgekit"

    # --- manifests ---------------------------------------------------------------------------------------------

    def manifest(self, target: str) -> tuple[bytes, str]:
        """The manifest bytes for a tag or digest, and their digest (checked against a pinned one)."""
        response = self.request("GET", self._path("manifests", target), headers={"Accept": MANIFEST_MEDIA_TYPE})
        body = response.content
        if len(body) > MANIFEST_MAX:
            raise RegistryError(f"{self.ref}: a manifest of {len(body):,} bytes, over the {MANIFEST_MAX:,} one needs")
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        if target.startswith("sha256:") and digest != target:
            raise ArtifactError(str(self.ref), f"the registry served a manifest whose digest is {digest}")
        return body, digest

    def put_manifest(self, tag: str, body: bytes) -> str:
        response = self.request("PUT", self._path("manifests", tag), data=body,
                                headers={"Content-Type": MANIFEST_MEDIA_TYPE}, ok=(201,))  # fmt: skip
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        served = response.headers.get("Docker-Content-Digest")
        if served and served != digest:
            raise RegistryError(f"{self.ref}: the registry stored the manifest as {served}, not {digest}")
        return digest

    # --- blobs ---------------------------------------------------------------------------------------------------

    def has_blob(self, digest: str) -> bool:
        return self.request("HEAD", self._path("blobs", digest), ok=(200, 404)).status_code == 200

    def upload_blob(self, data: IO[bytes] | bytes, digest: str, size: int) -> None:
        """One monolithic upload: POST for a session, then PUT the bytes with their digest."""
        started = self.request("POST", f"/v2/{self.ref.repository}/blobs/uploads/", ok=(202,))
        if "Location" not in started.headers:
            raise RegistryError(f"{self.ref}: the registry opened an upload without saying where (no Location)")
        location = urljoin(self.base + "/", started.headers["Location"])
        if urlsplit(location)[:2] != urlsplit(self.base)[:2]:  # the credentials go to the registry only
            elsewhere = urlsplit(location).netloc
            raise RegistryError(f"{self.ref}: the registry sent the upload to another host ({elsewhere})",
                                "push to that registry directly: credentials go to the host named only")  # fmt: skip
        location += ("&" if "?" in location else "?") + f"digest={digest}"
        self.request("PUT", location, data=data, ok=(201,),
                     headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)})  # fmt: skip

    def open_blob(self, digest: str, offset: int = 0) -> Response:
        """A streaming GET of the blob from `offset` (206), or from 0 (200) where the registry ignores Range."""
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        return self.request("GET", self._path("blobs", digest), headers=headers, stream=True, ok=(200, 206))

    # --- requests, with the registry's auth challenge -------------------------------------------------------------

    def _path(self, kind: str, target: str) -> str:
        return f"/v2/{self.ref.repository}/{kind}/{target}"

    def request(self, method: str, path: str, *, ok: tuple[int, ...] = (200,), **kw: Any) -> Response:
        url = path if path.startswith(("http://", "https://")) else self.base + path
        try:
            response = self.session.request(method, url, timeout=TIMEOUT, verify=self.verify, **kw)
            if response.status_code == 401:  # no credentials sent yet, or a token that expired: once more
                self._authenticate(response.headers.get("WWW-Authenticate", ""))
                if hasattr(kw.get("data"), "seek"):
                    kw["data"].seek(0)  # a file being uploaded is sent again from its start
                response = self.session.request(method, url, timeout=TIMEOUT, verify=self.verify, **kw)
        except requests.exceptions.SSLError as exc:
            raise RegistryError(f"{self.base}: TLS verification failed ({_reason(exc)})",
                                "give the registry's CA with --ca-file") from None  # fmt: skip
        except requests.exceptions.RequestException as exc:
            raise RegistryError(f"{self.base}: {_reason(exc)}", RETRY_HINT) from None
        if response.status_code not in ok:
            self._refuse(method, url, response)
        return response

    def _authenticate(self, challenge: str) -> None:
        if self.credentials is None:
            raise RegistryAuthError(f"{self.ref.host} asks for credentials and none were given",
                                    f"log in (docker login {self.ref.host}) or set EDGEKIT_REGISTRY_USER and "
                                    "EDGEKIT_REGISTRY_PASSWORD")  # fmt: skip
        scheme = challenge.split(" ", 1)[0].lower()
        if scheme == "basic":
            self.session.auth = (self.credentials.user, self.credentials.password)
            return
        if scheme != "bearer":
            raise RegistryError(f"{self.ref.host} asks for {scheme or 'an unnamed'} auth, which edgekit does not speak")
        params = dict(CHALLENGE.findall(challenge))
        if urlsplit(params.get("realm", "")).scheme != "https" and not self.base.startswith("http://"):
            raise RegistryError(f"{self.ref.host} names an auth realm that is not HTTPS ({params.get('realm')!r})",
                                "the password would travel in clear text: fix the registry's token realm")  # fmt: skip
        try:
            token = self.session.get(params["realm"], timeout=TIMEOUT, verify=self.verify,
                                     params={"service": params.get("service", ""), "scope": self.scope},
                                     auth=(self.credentials.user, self.credentials.password))  # fmt: skip
        except (KeyError, requests.exceptions.RequestException) as exc:
            raise RegistryError(f"{self.ref.host}: no token from its auth realm ({_reason(exc)})") from None
        if token.status_code in (401, 403):
            raise self._auth_refused()
        body = token.json() if token.ok else {}
        value = body.get("token") or body.get("access_token")
        if not value:
            raise RegistryError(f"{self.ref.host}: its auth realm answered {token.status_code} without a token")
        self.session.headers["Authorization"] = f"Bearer {value}"

    def _auth_refused(self) -> RegistryAuthError:
        who = self.credentials
        return RegistryAuthError(
            f"{self.ref.host} refused the credentials of {who.user!r} (from {who.source}) for "
            f"{self.scope.rsplit(':', 1)[-1]} on {self.ref.repository}" if who else
            f"{self.ref.host} refused anonymous access",
            "check the user and password (docker login, or EDGEKIT_REGISTRY_USER/_PASSWORD); nothing was changed",
        )  # fmt: skip

    def _refuse(self, method: str, url: str, response: Response) -> None:
        status = response.status_code
        if status in (401, 403):
            raise self._auth_refused()
        if status == 404:
            what = "blob" if "/blobs/" in url else "tag or digest"
            raise RegistryNotFound(f"{self.ref}: the registry has no such {what} ({url.rsplit('/', 1)[-1]})",
                                   "check the repository and tag (edgekit push prints the digest)")  # fmt: skip
        text = (response.text or "")[:300].strip()
        raise RegistryError(f"{self.ref}: {method} {url} answered {status} {text}".rstrip())


def _reason(exc: BaseException) -> str:
    inner = exc
    while inner.__context__ is not None and str(inner.__context__):
        inner = inner.__context__
    return str(inner).splitlines()[0][:200] if str(inner) else type(exc).__name__
