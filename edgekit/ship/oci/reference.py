"""`oci://HOST[:PORT]/REPOSITORY:TAG` or `…@sha256:DIGEST`: what `edgekit push`, `pull` and `install` name."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from edgekit.errors import UsageError

SCHEME = "oci://"
# The distribution spec's grammar: path components of lowercase alphanumerics joined by . _ __ or dashes.
REPOSITORY = re.compile(r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*")
TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
HOST = re.compile(r"(?:[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*|\[[0-9a-fA-F:]+\])(?::[0-9]{1,5})?")
EXAMPLE = "oci://registry.example.com:5000/fleet/smollm2:stable"


@dataclass(frozen=True)
class Reference:
    host: str  # with the port, as the registry's URL and the Docker config's `auths` name it
    repository: str
    tag: str | None
    digest: str | None  # "sha256:…" when pinned

    @property
    def target(self) -> str:
        """The tag or the digest: what /v2/REPOSITORY/manifests/ is asked for."""
        return self.digest or self.tag or "latest"

    @property
    def hostname(self) -> str:
        host = self.host.rsplit(":", 1)[0] if not self.host.endswith("]") and ":" in self.host else self.host
        return host.strip("[]")

    def pinned(self, digest: str) -> Reference:
        return Reference(self.host, self.repository, None, digest)

    def is_loopback(self) -> bool:
        if self.hostname == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.hostname).is_loopback
        except ValueError:
            return False

    def __str__(self) -> str:
        at = f"@{self.digest}" if self.digest else f":{self.tag or 'latest'}"
        return f"{SCHEME}{self.host}/{self.repository}{at}"


def is_reference(text: str) -> bool:
    return text.startswith(SCHEME)


def parse_reference(text: str) -> Reference:
    """Parse `oci://HOST[:PORT]/REPO[:TAG|@sha256:…]`, refusing anything the registry would not take."""
    if not is_reference(text):
        raise _bad(text, f"it does not start with {SCHEME}")
    host, _, rest = text[len(SCHEME) :].partition("/")
    if not HOST.fullmatch(host) or not rest:
        raise _bad(text, "it names no HOST[:PORT]/REPOSITORY")
    digest = tag = None
    if "@" in rest:
        rest, _, digest = rest.partition("@")
        if not DIGEST.fullmatch(digest):
            raise _bad(text, f"{digest!r} is not a sha256:<64 hex digits> digest")
    last = rest.rsplit("/", 1)[-1]
    if ":" in last:
        rest, _, tag = rest.rpartition(":")
        if not TAG.fullmatch(tag):
            raise _bad(text, f"{tag!r} is not a tag (letters, digits, . _ -, at most 128)")
    if not REPOSITORY.fullmatch(rest):
        raise _bad(text, f"{rest!r} is not a repository name (lowercase letters, digits and . _ - between them)")
    return Reference(host, rest, tag if digest is None else None, digest)


def _bad(text: str, why: str) -> UsageError:
    return UsageError(f"{text!r} is not an OCI reference: {why}", f"e.g. {EXAMPLE} or …/smollm2@sha256:<digest>")
