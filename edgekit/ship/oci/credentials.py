"""Registry credentials: $EDGEKIT_REGISTRY_USER / _PASSWORD first, then the Docker config file's `auths`.

The Docker config is `$DOCKER_CONFIG/config.json` or `~/.docker/config.json`, as `docker login` writes it:
`{"auths": {"HOST[:PORT]": {"auth": base64("USER:PASSWORD")}}}` (or `username` and `password`). Credential
helpers (`credsStore`, `credHelpers`) run programs edgekit does not run: export the variables instead.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from dataclasses import dataclass
from pathlib import Path

from edgekit.errors import UsageError

USER_ENV, PASSWORD_ENV = "EDGEKIT_REGISTRY_USER", "EDGEKIT_REGISTRY_PASSWORD"


@dataclass(frozen=True)
class Credentials:
    user: str
    password: str
    source: str  # where they came from, for the messages

    def __repr__(self) -> str:
        return f"Credentials(user={self.user!r}, source={self.source!r})"


def docker_config() -> Path:
    folder = os.environ.get("DOCKER_CONFIG")
    return Path(folder) / "config.json" if folder else Path.home() / ".docker" / "config.json"


def credentials_for(host: str) -> Credentials | None:
    user, password = os.environ.get(USER_ENV), os.environ.get(PASSWORD_ENV)
    if user is not None or password is not None:
        if not user or password is None:
            raise UsageError(f"set both {USER_ENV} and {PASSWORD_ENV}, or neither", "export the missing one")
        return Credentials(user, password, f"${USER_ENV}")
    return _from_docker_config(docker_config(), host)


def _from_docker_config(path: Path, host: str) -> Credentials | None:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the Docker config {path}: {exc}", "fix it (docker login rewrites it)") from None
    entry = _entry(config.get("auths") or {}, host)
    if entry is None:
        return None
    if "auth" in entry:
        try:
            user, sep, password = base64.b64decode(entry["auth"], validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError, TypeError):
            user, sep, password = "", "", ""
        if not sep or not user:
            raise UsageError(f"{path}: auths[{host!r}].auth is not base64 of USER:PASSWORD", "run docker login again")
        return Credentials(user, password, str(path))
    if entry.get("username") and "password" in entry:
        return Credentials(entry["username"], entry["password"], str(path))
    return None


def _entry(auths: dict[str, dict[str, str]], host: str) -> dict[str, str] | None:
    for key in (host, f"https://{host}", f"http://{host}", f"https://{host}/v2/", f"https://{host}/v1/"):
        if key in auths:
            return auths[key]
    return None
