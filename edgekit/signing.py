"""Optional bundle signing: an Ed25519 signature of manifest.json, kept beside it as manifest.sig.

The manifest lists every file's sha256, so one signature over its exact bytes covers the whole
bundle: `edgekit verify BUNDLE --key PUB` first checks every file against the manifest, then the
manifest against the signature. Keys are plain PEM files (PKCS#8 private, SubjectPublicKeyInfo
public) made by `edgekit keygen`, so `openssl pkey -in KEY -pubout` and other tools read them too.
Signing is offline and needs nothing but the `cryptography` package — no identity provider, no
transparency log; see the README for when sigstore would be the better choice.
"""

from __future__ import annotations

import base64
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from edgekit.errors import MissingDependencyError, SignatureError, UsageError
from edgekit.fsutil import write_bytes_atomic, write_text_atomic
from edgekit.manifest import MANIFEST, load_manifest

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

SIGNATURE = "manifest.sig"
SIG_HEADER = "edgekit-ed25519-v1"  # first line of manifest.sig; the base64 signature is the second


def _require_crypto() -> None:
    if importlib.util.find_spec("cryptography") is None:
        raise MissingDependencyError("the `cryptography` package (needed to sign and check signatures)", "runtime")


def generate_keypair(private_path: Path, public_path: Path, *, overwrite: bool = False) -> None:
    """Write a new Ed25519 key pair: the private key readable by its owner only."""
    _require_crypto()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    for path in (private_path, public_path):
        if path.exists() and not overwrite:
            raise UsageError(f"{path} already exists", "choose another path, or delete it first if you mean to")
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    write_bytes_atomic(private_path, private_pem, mode=0o600)
    write_text_atomic(public_path, public_pem.decode())


def _read_key(path: Path, kind: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read the {kind} key {path}: {exc.strerror}", "check the path") from None


def _not_a_key(path: Path, kind: str, why: str) -> UsageError:
    return UsageError(
        f"{path} is not an Ed25519 {kind} key in PEM format ({why})",
        "make a key pair with `edgekit keygen` (private: edgekit.key, public: edgekit.pub)",
    )


def load_private_key(path: Path) -> Ed25519PrivateKey:
    _require_crypto()
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(_read_key(path, "private"), password=None)
    except (ValueError, TypeError) as exc:
        raise _not_a_key(path, "private", str(exc).split("\n")[0]) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise _not_a_key(path, "private", f"it is a {type(key).__name__}")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    _require_crypto()
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    try:
        key = load_pem_public_key(_read_key(path, "public"))
    except (ValueError, TypeError) as exc:
        raise _not_a_key(path, "public", str(exc).split("\n")[0]) from None
    if not isinstance(key, Ed25519PublicKey):
        raise _not_a_key(path, "public", f"it is a {type(key).__name__}")
    return key


def sign_bundle(bundle: Path, private_key: Path) -> Path:
    """Sign `bundle`'s manifest (after checking every file against it). Returns the signature's path."""
    from edgekit.manifest import verify_bundle

    verify_bundle(bundle)  # never sign a bundle that does not match its own manifest
    key = load_private_key(private_key)
    signature = key.sign((bundle / MANIFEST).read_bytes())
    path = bundle / SIGNATURE
    write_text_atomic(path, f"{SIG_HEADER}\n{base64.b64encode(signature).decode()}\n")
    return path


def verify_signature(bundle: Path, public_key: Path) -> None:
    """Raise SignatureError unless manifest.sig is a valid signature of manifest.json by `public_key`."""
    key = load_public_key(public_key)
    from cryptography.exceptions import InvalidSignature

    load_manifest(bundle)
    sig_path = bundle / SIGNATURE
    if sig_path.is_symlink() or not sig_path.is_file():
        raise SignatureError(
            f"{bundle} has no {SIGNATURE}: it is not signed",
            f"sign it with `edgekit sign {bundle} --key PRIVATE_KEY`, or verify without --key",
        )
    lines = sig_path.read_text(encoding="utf-8", errors="replace").split()
    try:
        if len(lines) != 2 or lines[0] != SIG_HEADER:
            raise ValueError
        signature = base64.b64decode(lines[1], validate=True)
    except ValueError:
        raise SignatureError(
            f"{sig_path} is not an edgekit signature", "sign the bundle again with `edgekit sign`"
        ) from None
    try:
        key.verify(signature, (bundle / MANIFEST).read_bytes())
    except InvalidSignature:
        raise SignatureError(
            f"{sig_path} does not match {MANIFEST} and the key {public_key}: the manifest was changed after "
            "signing, or it was signed with another key",
            "do not use this bundle; get it again from a trusted source, or check that you have the right key",
        ) from None
