"""OpenSSF model signatures of every file: `edgekit keygen`, `edgekit sign`, `edgekit verify --key`, and the
box's trust policy (`EDGEKIT_TRUST_DIR`, `--trusted-key`)."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from edgekit._util.hashing import file_records
from edgekit.cli.errors import hint
from edgekit.errors import IntegrityError, TrustError, TrustPolicyError, UsageError
from edgekit.manifest import SIGNATURE, verify_bundle
from edgekit.ship.keys import generate_keypair
from edgekit.ship.sign import sign_bundle, verify_signature
from edgekit.ship.trust import TRUST_DIR_ENV, box_policy, check_bundle
from tests.support.cli_in_process import run_cli
from tests.support.fake_bundle import flip_byte, make_bundle, write_manifest


def edgekit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edgekit", *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    private, public = tmp_path / "keys" / "k.key", tmp_path / "keys" / "k.pub"
    generate_keypair(private, public)
    return private, public


@pytest.fixture(autouse=True)
def no_box_policy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Whatever /etc/edgekit holds on this machine, these tests choose their own policy."""
    monkeypatch.setenv(TRUST_DIR_ENV, str(tmp_path / "no-policy-here"))
    monkeypatch.delenv(TRUST_DIR_ENV)
    monkeypatch.setattr("edgekit.ship.trust.DEFAULT_TRUST_DIR", tmp_path / "no-policy-here")


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
    assert json.loads((bundle / SIGNATURE).read_text())["mediaType"].startswith("application/vnd.dev.sigstore.bundle")
    checked = edgekit("verify", str(bundle), "--key", str(public))
    assert checked.returncode == 0 and "signature" in checked.stdout, checked.stderr
    as_json = json.loads(run_cli("verify", str(bundle), "--key", str(public), "--json").stdout)
    assert as_json["ok"] and as_json["signature"]["key"] == str(public) and len(as_json["files"]) == 3
    again = edgekit("keygen", "--out", str(tmp_path / "keys"), "--name", "box")
    assert again.returncode == 2 and "already exists" in again.stderr  # never overwrites a key
    assert "BEGIN PRIVATE KEY" in private.read_text()


def test_the_openssf_tool_reads_edgekit_signatures(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    """The format is the library's own: its CLI verifies an edgekit bundle (runtime.local.toml stays outside)."""
    private, public = keys
    bundle = make_bundle(tmp_path / "b")
    sign_bundle(bundle, private)
    (bundle / "runtime.local.toml").write_text("[runtime]\nn_threads = 1\n")
    args = ["verify", "key", str(bundle), "--signature", str(bundle / SIGNATURE), "--public_key", str(public)]
    proc = subprocess.run([sys.executable, "-m", "model_signing", *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "Verification succeeded" in proc.stdout, proc.stdout + proc.stderr


def test_the_private_key_is_created_600_whatever_the_umask_and_never_through_a_link(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        generate_keypair(tmp_path / "a.key", tmp_path / "a.pub")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "a.pub").stat().st_mode) == 0o644
    target = tmp_path / "elsewhere"
    (tmp_path / "b.key").symlink_to(target)  # a dangling link where the key would go
    with pytest.raises(UsageError, match="already exists"):
        generate_keypair(tmp_path / "b.key", tmp_path / "b.pub")
    assert not target.exists() and not (tmp_path / "b.pub").exists()


def test_a_changed_manifest_fails_the_signature_even_when_the_files_match_it(
    tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    """Re-sealing the manifest after modifying a file passes `verify` without a key, never with one."""
    private, public = keys
    bundle = make_bundle(tmp_path / "b")
    sign_bundle(bundle, private)
    flip_byte(bundle / "models" / "m.gguf", 10)
    write_manifest(bundle, [r for r in file_records(bundle) if r["path"] not in ("manifest.json", SIGNATURE)])
    proc = run_cli("verify", str(bundle), "--key", str(public))
    assert proc.returncode == 4 and "is not what was signed" in proc.stderr, proc.stderr
    assert "manifest.json differs; models/m.gguf differs" in proc.stderr
    assert run_cli("verify", str(bundle)).returncode == 0  # what the signature is for


def test_a_modified_file_is_named(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    private, public = keys
    bundle = make_bundle(tmp_path / "b")
    sign_bundle(bundle, private)
    flip_byte(bundle / "models" / "m.gguf", 10)
    proc = run_cli("verify", str(bundle), "--key", str(public))
    assert proc.returncode == 4 and "is not what was signed: models/m.gguf differs" in proc.stderr, proc.stderr
    (bundle / "extra.txt").write_text("x")
    proc = run_cli("verify", str(bundle), "--key", str(public))
    assert proc.returncode == 4 and "extra.txt: not in the manifest (extra file)" in proc.stderr


def test_another_key_is_refused(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    private, _ = keys
    other_private, other_public = tmp_path / "o.key", tmp_path / "o.pub"
    generate_keypair(other_private, other_public)
    bundle = make_bundle(tmp_path / "b")
    sign_bundle(bundle, private)
    with pytest.raises(TrustError, match="not trusted here"):
        verify_signature(bundle, [other_public])


def _forged_signature(bundle: Path) -> str:
    data = json.loads((bundle / SIGNATURE).read_text())
    sig = bytearray(base64.b64decode(data["dsseEnvelope"]["signatures"][0]["sig"]))
    sig[-1] ^= 0x01
    data["dsseEnvelope"]["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    return json.dumps(data)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "is not signed"),
        ("not json at all", "not a readable OpenSSF model signature"),
        ('{"mediaType": "x"}', "not a readable OpenSSF model signature"),
        (_forged_signature, "damaged or forged"),
    ],
)
def test_missing_or_damaged_signatures_are_refused(
    tmp_path: Path, keys: tuple[Path, Path], content: object, expected: str
) -> None:
    private, public = keys
    bundle = make_bundle(tmp_path / "b")
    sign_bundle(bundle, private)
    if content is None:
        (bundle / SIGNATURE).unlink()
    else:
        text = content(bundle) if callable(content) else content
        (bundle / SIGNATURE).write_text(str(text))
    with pytest.raises(TrustError, match=expected):
        verify_signature(bundle, [public])


def test_a_signature_that_is_a_symlink_is_refused(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    private, public = keys
    bundle = make_bundle(tmp_path / "b")
    sign_bundle(bundle, private)
    (bundle / SIGNATURE).rename(tmp_path / "sig")
    (bundle / SIGNATURE).symlink_to(tmp_path / "sig")
    with pytest.raises(IntegrityError, match=r"model\.sig: is a link"):
        verify_bundle(bundle)
    with pytest.raises(TrustError, match="not signed"):
        verify_signature(bundle, [public])


def test_a_tampered_bundle_is_never_signed(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    private, _ = keys
    bundle = make_bundle(tmp_path / "b")
    (bundle / "extra").write_text("x")
    with pytest.raises(IntegrityError):
        sign_bundle(bundle, private)
    assert not (bundle / SIGNATURE).exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp signature left


def test_wrong_key_files_say_how_to_make_one(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    private, public = keys
    bundle = make_bundle(tmp_path / "b")
    with pytest.raises(UsageError, match=r"not an ECDSA .* private key") as refused:
        sign_bundle(bundle, public)  # a public key where the private one goes
    assert "edgekit keygen" in (hint(refused.value) or "")
    old_key = tmp_path / "old.pub"  # an edgekit 0.1 (Ed25519) key
    old_key.write_bytes(
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    sign_bundle(bundle, private)
    with pytest.raises(UsageError, match=r"not an ECDSA .* public key"):
        verify_signature(bundle, [old_key])
    proc = run_cli("sign", str(bundle), "--key", str(tmp_path / "missing.key"))
    assert proc.returncode == 2 and "cannot read the private key" in proc.stderr
    proc = run_cli("sign", str(bundle))
    assert proc.returncode == 2 and "--key" in proc.stderr


def test_an_old_ed25519_signature_is_named_and_must_be_replaced(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "b")
    (bundle / "manifest.sig").write_text("edgekit-ed25519-v1\nAAAA\n")
    with pytest.raises(IntegrityError, match=r"manifest\.sig: an Ed25519 signature of edgekit 0\.1, no longer read"):
        verify_bundle(bundle)


# --- the trust policy ----------------------------------------------------------------------------------


def test_the_trust_folder_is_the_policy_and_an_empty_one_refuses_everything(
    tmp_path: Path, keys: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    private, public = keys
    bundle = make_bundle(tmp_path / "b")
    assert box_policy() is None and check_bundle(bundle).signed_by is None  # no policy: the hashes only
    trust = tmp_path / "trust"
    trust.mkdir()
    monkeypatch.setenv(TRUST_DIR_ENV, str(trust))
    with pytest.raises(TrustError, match="holds no keys"):
        check_bundle(bundle)
    (trust / "fleet.pub").write_bytes(public.read_bytes())
    with pytest.raises(TrustError, match=r"trust policy .*: .* is not signed"):
        check_bundle(bundle)
    sign_bundle(bundle, private)
    assert check_bundle(bundle).signed_by == trust / "fleet.pub"
    monkeypatch.setenv(TRUST_DIR_ENV, str(tmp_path / "missing"))
    with pytest.raises(TrustPolicyError, match="is not a folder") as info:
        check_bundle(bundle)
    assert info.value.exit_code == 3


def test_a_trusted_key_on_the_command_line_makes_a_policy(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    private, public = keys
    bundle = make_bundle(tmp_path / "b")
    with pytest.raises(TrustError, match="not signed"):
        check_bundle(bundle, [public])
    sign_bundle(bundle, private)
    other = tmp_path / "other"
    generate_keypair(other.with_suffix(".key"), other.with_suffix(".pub"))
    assert check_bundle(bundle, [other.with_suffix(".pub"), public]).signed_by == public
    proc = run_cli("verify", str(bundle), "--trusted-key", str(other.with_suffix(".pub")))
    assert proc.returncode == 4 and "not trusted here" in proc.stderr and "trust policy" in proc.stderr
