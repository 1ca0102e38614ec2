"""Ed25519 signatures over the manifest: `edgekit keygen`, `edgekit sign`, `edgekit verify --key`."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from test_integrity import flip_byte, make_bundle

from edgekit.errors import IntegrityError, SignatureError, UsageError
from edgekit.manifest import verify_bundle
from edgekit.signing import SIGNATURE, generate_keypair, sign_bundle, verify_signature


def edgekit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edgekit", *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    private, public = tmp_path / "keys" / "k.key", tmp_path / "keys" / "k.pub"
    generate_keypair(private, public)
    return private, public


def test_sign_and_verify_through_the_cli(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "b")
    made = edgekit("keygen", "--out", str(tmp_path / "keys"), "--name", "box")
    assert made.returncode == 0, made.stderr
    private, public = tmp_path / "keys" / "box.key", tmp_path / "keys" / "box.pub"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert "BEGIN PUBLIC KEY" in public.read_text() and "BEGIN PRIVATE KEY" in private.read_text()
    signed = edgekit("sign", str(bundle), "--key", str(private))
    assert signed.returncode == 0, signed.stderr
    assert (bundle / SIGNATURE).is_file()
    checked = edgekit("verify", str(bundle), "--key", str(public))
    assert checked.returncode == 0 and "signature" in checked.stdout, checked.stderr
    again = edgekit("keygen", "--out", str(tmp_path / "keys"), "--name", "box")
    assert again.returncode == 2 and "already exists" in again.stderr  # never overwrites a key


def test_a_changed_manifest_fails_the_signature_even_when_the_files_match_it(
    tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    """Re-sealing the manifest after modifying a file passes `verify` without a key, never with one."""
    from test_integrity import write_manifest

    from edgekit.hashing import file_records

    private, public = keys
    bundle = make_bundle(tmp_path / "b")
    sign_bundle(bundle, private)
    flip_byte(bundle / "models" / "m.gguf", 10)
    write_manifest(bundle, [r for r in file_records(bundle) if r["path"] not in ("manifest.json", SIGNATURE)])
    proc = edgekit("verify", str(bundle), "--key", str(public))
    assert proc.returncode == 4 and "does not match manifest.json" in proc.stderr, proc.stderr
    assert edgekit("verify", str(bundle)).returncode == 0  # what the signature is for


def test_a_modified_file_is_caught_before_the_signature(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    private, public = keys
    bundle = make_bundle(tmp_path / "b")
    sign_bundle(bundle, private)
    flip_byte(bundle / "models" / "m.gguf", 10)
    proc = edgekit("verify", str(bundle), "--key", str(public))
    assert proc.returncode == 4 and "models/m.gguf: sha256 differs" in proc.stderr


def test_another_key_is_refused(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    private, _ = keys
    other_private, other_public = tmp_path / "o.key", tmp_path / "o.pub"
    generate_keypair(other_private, other_public)
    bundle = make_bundle(tmp_path / "b")
    sign_bundle(bundle, private)
    with pytest.raises(SignatureError, match="another key"):
        verify_signature(bundle, other_public)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "it is not signed"),
        ("edgekit-ed25519-v1\nnot base64!\n", "not an edgekit signature"),
        ("something else\n", "not an edgekit signature"),
        ("edgekit-ed25519-v1\n" + "A" * 88 + "\n", "does not match"),
    ],
)
def test_missing_or_damaged_signatures_are_refused(
    tmp_path: Path, keys: tuple[Path, Path], content: str | None, expected: str
) -> None:
    _, public = keys
    bundle = make_bundle(tmp_path / "b")
    if content is not None:
        (bundle / SIGNATURE).write_text(content)
    with pytest.raises(SignatureError, match=expected):
        verify_signature(bundle, public)


def test_a_signature_that_is_a_symlink_is_refused(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    private, public = keys
    bundle = make_bundle(tmp_path / "b")
    sign_bundle(bundle, private)
    (bundle / SIGNATURE).rename(tmp_path / "sig")
    (bundle / SIGNATURE).symlink_to(tmp_path / "sig")
    with pytest.raises(IntegrityError, match=r"manifest\.sig: is a link"):
        verify_bundle(bundle)
    with pytest.raises(SignatureError, match="not signed"):
        verify_signature(bundle, public)


def test_a_tampered_bundle_is_never_signed(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    private, _ = keys
    bundle = make_bundle(tmp_path / "b")
    (bundle / "extra").write_text("x")
    with pytest.raises(IntegrityError):
        sign_bundle(bundle, private)
    assert not (bundle / SIGNATURE).exists()


def test_wrong_key_files_say_how_to_make_one(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    private, public = keys
    bundle = make_bundle(tmp_path / "b")
    with pytest.raises(UsageError, match="edgekit keygen"):
        sign_bundle(bundle, public)  # a public key where the private one goes
    ec_key = tmp_path / "ec.pub"
    ec_key.write_bytes(
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    sign_bundle(bundle, private)
    with pytest.raises(UsageError, match="not an Ed25519 public key"):
        verify_signature(bundle, ec_key)
    proc = edgekit("sign", str(bundle), "--key", str(tmp_path / "missing.key"))
    assert proc.returncode == 2 and "cannot read the private key" in proc.stderr
