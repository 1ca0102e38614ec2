"""`edgekit verify`: a bundle holds exactly the plain files its manifest lists, with their hashes.

Every tampering is refused with exit 4 and a message naming the file; forged manifests cannot make
the verifier read outside the bundle, and links are never followed.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from edgekit.errors import IntegrityError
from edgekit.manifest import verify_bundle
from tests.support.fake_bundle import flip_byte, make_bundle, write_manifest


def listed(root: Path) -> list[dict[str, object]]:
    return json.loads((root / "manifest.json").read_text())["files"]


def forge(root: Path, rel: str, target: Path) -> None:
    """Add a record for `rel` whose size and hash are right for `target`: only the path is wrong."""
    data = target.read_bytes()
    write_manifest(root, [*listed(root), {"path": rel, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}])


def _secret(root: Path) -> Path:
    secret = root.parent / "outside" / "secret.txt"
    secret.parent.mkdir(exist_ok=True)
    secret.write_text("not part of any bundle\n")
    return secret


TAMPERS: dict[str, tuple[Callable[[Path], None], str]] = {
    "one byte of the model": (lambda b: flip_byte(b / "models" / "m.gguf", 500), "models/m.gguf: sha256 differs"),
    "truncated model": (lambda b: (b / "models" / "m.gguf").write_bytes(b"GGUF"), "models/m.gguf: size"),
    "removed file": (lambda b: (b / "tokenizer" / "tokenizer.json").unlink(), "tokenizer/tokenizer.json: missing"),
    "added file": (lambda b: (b / "models" / "extra.gguf").write_bytes(b"GGUF"), "models/extra.gguf: not in the"),
    "added hidden file": (lambda b: (b / ".pth").write_text("import os"), ".pth: not in the manifest"),
    "renamed file": (
        lambda b: (b / "models" / "m.gguf").rename(b / "models" / "n.gguf"),
        "models/m.gguf: missing",
    ),
    "file swapped for a symlink to a copy": (
        lambda b: (
            (b.parent / "copy.toml").write_bytes((b / "runtime.toml").read_bytes()),
            (b / "runtime.toml").unlink(),
            (b / "runtime.toml").symlink_to(b.parent / "copy.toml"),
        ),
        "runtime.toml: is a link",
    ),
    "folder swapped for a symlink to a copy": (
        lambda b: (
            (b / "tokenizer").rename(b.parent / "tok-copy"),
            (b / "tokenizer").symlink_to(b.parent / "tok-copy"),
        ),
        "tokenizer/tokenizer.json: is a link",
    ),
    "symlink added": (lambda b: (b / "models" / "link.gguf").symlink_to(b / "models" / "m.gguf"), "link.gguf"),
    "fifo in place of a file": (
        lambda b: ((b / "runtime.toml").unlink(), os.mkfifo(b / "runtime.toml")),
        "runtime.toml: missing",
    ),
    "manifest is a symlink": (
        lambda b: (
            (b / "manifest.json").rename(b.parent / "m.json"),
            (b / "manifest.json").symlink_to(b.parent / "m.json"),
        ),
        "manifest.json is a link",
    ),
    "manifest edited to match a modified model": (
        lambda b: (
            flip_byte(b / "models" / "m.gguf", 7),
            (b / "models" / "m.gguf").rename(b / "models" / "m2.gguf"),
        ),
        "models/m2.gguf: not in the manifest",
    ),
    "forged ../ path": (lambda b: forge(b, "../outside/secret.txt", _secret(b)), "'../outside/secret.txt': manifest"),
    "forged models/../../ path": (
        lambda b: forge(b, "models/../../outside/secret.txt", _secret(b)),
        "outside the bundle",
    ),
    "forged absolute path": (lambda b: forge(b, str(_secret(b)), _secret(b)), "outside the bundle"),
    "forged ./ path": (lambda b: forge(b, "./runtime.toml", b / "runtime.toml"), "not a plain relative path"),
    "forged duplicate record": (lambda b: forge(b, "runtime.toml", b / "runtime.toml"), "listed twice"),
    "forged record without hash": (
        lambda b: write_manifest(b, [*listed(b), {"path": "x"}]),
        "files[3]: not a {path, size, sha256} record",
    ),
    "forged record that is a string": (lambda b: write_manifest(b, ["runtime.toml"]), "files[0]: not a"),
    "forged files that is a table": (lambda b: write_manifest(b, {"runtime.toml": 1}), "no list of files"),
    "manifest that is not JSON": (lambda b: (b / "manifest.json").write_text("{"), "not valid JSON"),
    "manifest of another schema": (
        lambda b: (b / "manifest.json").write_text('{"schema_version": 99, "files": []}'),
        "schema_version 99",
    ),
    "runtime.local.toml is a symlink": (
        lambda b: (b / "runtime.local.toml").symlink_to("/etc/hostname"),
        "runtime.local.toml: is a link",
    ),
}


def test_an_intact_bundle_verifies(tmp_path: Path) -> None:
    verify_bundle(make_bundle(tmp_path / "b"))


@pytest.mark.parametrize("what", sorted(TAMPERS))
def test_tampering_is_refused_naming_the_file(what: str, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "b")
    tamper, expected = TAMPERS[what]
    tamper(bundle)
    with pytest.raises(IntegrityError) as info:
        verify_bundle(bundle)
    assert expected in str(info.value), str(info.value)


def test_the_cli_refuses_with_exit_4_and_one_message(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "b")
    flip_byte(bundle / "models" / "m.gguf", 100)
    (bundle / "tokenizer" / "tokenizer.json").unlink()
    (bundle / "notes.txt").write_text("hi")
    proc = subprocess.run(
        [sys.executable, "-m", "edgekit", "verify", str(bundle)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 4 and "Traceback" not in proc.stderr
    for name in ("models/m.gguf: sha256 differs", "tokenizer/tokenizer.json: missing", "notes.txt: not in the"):
        assert name in proc.stderr, proc.stderr
    assert proc.stderr.count("error:") == 1 and "rebuild it or copy it again" in proc.stderr
