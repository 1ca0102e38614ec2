"""Signing keys: ECDSA P-256 pairs in PEM (the key-based signing of OpenSSF model signing), made and checked here.

The private key is created with O_EXCL and mode 0600 in the same system call, so it is never readable by
anyone else, not even for an instant, and an existing key is never overwritten. Public keys are plain
SubjectPublicKeyInfo PEM files: `openssl pkey -pubin -in K.pub -text` reads them, and so does
`model_signing verify key`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import Any

from edgekit.errors import MissingDependencyError, NotAKey, UsageError

# The curves the OpenSSF model-signing library signs with (it refuses others, Ed25519 included).
CURVES = ("secp256r1", "secp384r1", "secp521r1")


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec
    except ImportError:
        raise MissingDependencyError("the `cryptography` package (needed to make and read keys)", "runtime") from None
    return serialization, ec


def generate_keypair(private_path: Path, public_path: Path) -> None:
    """Write a new ECDSA P-256 key pair; refuse to replace either file."""
    serialization, ec = _crypto()
    for path in (private_path, public_path):
        if path.exists() or path.is_symlink():
            raise UsageError(f"{path} already exists", "choose another --name or --out; keys are never overwritten")
    key = ec.generate_private_key(ec.SECP256R1())
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    _write_new(private_path, private_pem, 0o600)
    try:
        _write_new(public_path, public_pem, 0o644)
    except BaseException:
        private_path.unlink(missing_ok=True)  # no half pair
        raise


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Create `path` (never an existing file or link), with `mode` from the start, and write `data` durably."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    except FileExistsError:
        raise UsageError(
            f"{path} already exists", "choose another --name or --out; keys are never overwritten"
        ) from None
    try:
        os.fchmod(fd, mode)  # the umask may have taken bits away from the public key
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            path.unlink()
        raise


def _read(path: Path, kind: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read the {kind} key {path}: {exc.strerror}", "check the path") from None


def check_private_key(path: Path) -> None:
    """Raise a UsageError naming the problem unless `path` is an unencrypted EC private key the signer takes."""
    serialization, ec = _crypto()
    try:
        key = serialization.load_pem_private_key(_read(path, "private"), password=None)
    except (ValueError, TypeError) as exc:
        raise NotAKey(path, "private", str(exc).split("\n")[0]) from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name not in CURVES:
        raise NotAKey(path, "private", f"it is a {type(key).__name__}")


def check_public_key(path: Path) -> str:
    """Check `path` is an EC public key the verifier takes; return its id (sha256 of its PEM, as signatures hint)."""
    serialization, ec = _crypto()
    data = _read(path, "public")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise NotAKey(path, "public", str(exc).split("\n")[0]) from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name not in CURVES:
        raise NotAKey(path, "public", f"it is a {type(key).__name__}")
    pem = key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(pem).hexdigest()
