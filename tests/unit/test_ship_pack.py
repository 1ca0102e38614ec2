"""`edgekit pack` and what `edgekit install` makes of damaged and forged packs, on a small fake bundle.

Every bad pack is refused with exit 4 and its own message while it is unpacked (or verified), the box keeps
running what it ran, and nothing is left: no partial slot, no file outside the install root. (The real
bundles, the smoke test, kills, a full disk and downgrades: tests/e2e/test_ship.py.)
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import pytest

from edgekit.cli.common import load_schema
from edgekit.manifest import SIGNATURE
from edgekit.ship.keys import generate_keypair
from edgekit.ship.pack import pack_bundle
from edgekit.ship.sign import sign_bundle
from edgekit.ship.trust import TRUST_DIR_ENV
from tests.support.cli_in_process import run_cli
from tests.support.fake_bundle import make_bundle


@pytest.fixture
def cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    return lambda *args: run_cli(*args, env={TRUST_DIR_ENV: None})


@dataclass
class Fleet:
    root: Path
    private: Path
    public: Path
    pack: Path  # release 2, signed
    bundle: Path


def fake_release(where: Path, release: int, private: Path) -> Path:
    bundle = make_bundle(where)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest.update(name="mini", release=release)
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    sign_bundle(bundle, private)
    return bundle


@pytest.fixture
def fleet(tmp_path: Path, cli: Callable[..., subprocess.CompletedProcess[str]]) -> Fleet:
    private, public = tmp_path / "fleet.key", tmp_path / "fleet.pub"
    generate_keypair(private, public)
    first = pack_bundle(fake_release(tmp_path / "r1", 1, private), tmp_path / "r1.edgekit")
    bundle = fake_release(tmp_path / "r2", 2, private)
    second = pack_bundle(bundle, tmp_path / "r2.edgekit")
    root = tmp_path / "box"
    ran = cli("install", str(first.path), "--root", str(root), "--trusted-key", str(public))
    assert ran.returncode == 0, ran.stderr
    return Fleet(root, private, public, second.path, bundle)


def members(pack: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(pack) as tar:
        return [(m, tar.extractfile(m).read()) for m in tar.getmembers()]  # type: ignore[union-attr]


def write_tar(path: Path, entries: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return path


def regular(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def box_state(root: Path) -> dict[str, object]:
    """What must not change when a pack is refused: the link, the slots, the files under the root."""
    return {
        "current": (root / "current").readlink(),
        "files": sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.name != ".lock"),
    }


def test_the_same_bundle_packs_to_the_same_bytes_and_the_signature_and_manifest_come_first(
    tmp_path: Path, cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    private = tmp_path / "k.key"
    generate_keypair(private, tmp_path / "k.pub")
    bundle = fake_release(tmp_path / "b", 7, private)
    ran = cli("pack", str(bundle), "-o", str(tmp_path))
    assert ran.returncode == 0, ran.stderr
    first = tmp_path / "mini-7.edgekit"
    sha = ran.stdout.split()[0]
    assert ran.stdout.startswith(f"{sha}  {first}")
    again = json.loads(cli("pack", str(bundle), "-o", str(tmp_path / "again.edgekit"), "--json").stdout)
    assert again["sha256"] == sha and (tmp_path / "again.edgekit").read_bytes() == first.read_bytes()
    names = [m.name for m, _ in members(first)]
    assert names[:2] == [SIGNATURE, "manifest.json"] and sorted(names[2:]) == names[2:]
    assert all(m.mtime == 0 and m.uid == 0 and m.isreg() for m, _ in members(first))
    zstd = json.loads(cli("pack", str(bundle), "-o", str(tmp_path / "z.edgekit"), "--zstd", "--json").stdout)
    zstd_again = json.loads(cli("pack", str(bundle), "-o", str(tmp_path / "z2.edgekit"), "--zstd", "--json").stdout)
    assert zstd["zstd"] and zstd["sha256"] == zstd_again["sha256"] != sha


def test_an_unsigned_bundle_is_not_packed(tmp_path: Path, cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    ran = cli("pack", str(make_bundle(tmp_path / "b")), "-o", str(tmp_path / "x.edgekit"))
    assert ran.returncode == 2 and "is not signed" in ran.stderr and "edgekit sign" in ran.stderr
    assert not (tmp_path / "x.edgekit").exists()


def _truncated(fleet: Fleet, out: Path) -> Path:
    data = fleet.pack.read_bytes()
    out.write_bytes(data[: len(data) // 2])
    return out


def _extra_file(fleet: Fleet, out: Path) -> Path:
    return write_tar(out, [*members(fleet.pack), regular("models/extra.bin", b"not in the manifest")])


def _traversal(fleet: Fleet, out: Path) -> Path:
    entries = members(fleet.pack)
    return write_tar(out, [*entries[:2], regular("../../escaped.txt", b"outside"), *entries[2:]])


def _symlink(fleet: Fleet, out: Path) -> Path:
    entries = members(fleet.pack)
    link = tarfile.TarInfo("models/m.gguf")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    return write_tar(out, [*entries[:2], (link, b""), *[e for e in entries[2:] if e[0].name != "models/m.gguf"]])


def _flipped_byte(fleet: Fleet, out: Path) -> Path:
    data = bytearray(fleet.pack.read_bytes())
    at = data.index(b"GGUF") + 100  # inside models/m.gguf's data
    data[at] ^= 0x01
    out.write_bytes(bytes(data))
    return out


def _rewritten_manifest(fleet: Fleet, out: Path) -> Path:
    entries = members(fleet.pack)
    manifest = json.loads(entries[1][1])
    manifest["release"] = 99  # consistent with every file: only the signature tells
    return write_tar(out, [entries[0], regular("manifest.json", json.dumps(manifest).encode()), *entries[2:]])


def _unsigned(fleet: Fleet, out: Path) -> Path:
    return write_tar(out, members(fleet.pack)[1:])


BAD_PACKS = {
    "truncated": (_truncated, "truncated"),
    "extra file": (_extra_file, "member models/extra.bin is not in its manifest (an extra file)"),
    "path traversal": (_traversal, "member '../../escaped.txt' would be written outside the slot"),
    "symlink member": (_symlink, "member models/m.gguf is a symlink (to '/etc/passwd')"),
    "flipped byte": (_flipped_byte, "models/m.gguf: sha256 differs from its manifest"),
    "manifest rewritten after signing": (_rewritten_manifest, "is not what was signed: manifest.json differs"),
    "unsigned": (_unsigned, "it is not signed"),
}


@pytest.mark.parametrize("bad", list(BAD_PACKS))
def test_a_bad_pack_is_refused_with_its_own_message_and_nothing_is_left(
    bad: str, fleet: Fleet, tmp_path: Path, cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    make, message = BAD_PACKS[bad]
    pack = make(fleet, tmp_path / "bad.edgekit")
    before = box_state(fleet.root)
    ran = cli("install", str(pack), "--root", str(fleet.root), "--trusted-key", str(fleet.public))
    assert ran.returncode == 4, ran.stderr
    assert message in ran.stderr and "Traceback" not in ran.stderr, ran.stderr
    assert box_state(fleet.root) == before  # still release 1, no partial slot, nothing beside it
    assert not (tmp_path / "escaped.txt").exists() and not (fleet.root.parent / "escaped.txt").exists()
    good = cli("install", str(fleet.pack), "--root", str(fleet.root), "--trusted-key", str(fleet.public))
    assert good.returncode == 0, good.stderr  # the next install succeeds


def test_install_reads_a_zstd_pack_from_stdin_and_needs_a_trust_policy(
    fleet: Fleet, tmp_path: Path, cli: Callable[..., subprocess.CompletedProcess[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    zstd = pack_bundle(fleet.bundle, tmp_path / "r2.zst.edgekit", zstd=True)
    ran = cli("install", str(zstd.path), "--root", str(fleet.root))
    assert ran.returncode == 3 and "has no trust policy" in ran.stderr
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(zstd.path.read_bytes())))
    ran = cli("install", "-", "--root", str(fleet.root), "--trusted-key", str(fleet.public), "--json")
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert result["release"] == 2 and result["previous"]["release"] == 1 and result["pack_sha256"] == zstd.sha256


def test_pack_install_status_and_rollback_documents_validate_against_their_schemas(
    fleet: Fleet, tmp_path: Path, cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    trust = ("--root", str(fleet.root), "--trusted-key", str(fleet.public), "--json")
    runs = {
        "pack": cli("pack", str(fleet.bundle), "-o", str(tmp_path / "again.edgekit"), "--json"),
        "install": cli("install", str(fleet.pack), *trust),
        "install again": cli("install", str(fleet.pack), *trust),  # already current: nothing changes
        "status": cli("status", "--verify", *trust),
        "rollback": cli("rollback", *trust),
    }
    documents = {}
    for step, ran in runs.items():
        assert ran.returncode == 0, f"{step}: {ran.stderr}"
        name = step.split()[0]
        documents[step] = document = json.loads(ran.stdout)
        jsonschema.validate(document, load_schema(name))
        assert document["schema"] == f"edgekit.{name}" and document["version"] == 1
    assert documents["install"]["changed"] and not documents["install again"]["changed"]
    assert [s["verification"]["state"] for s in documents["status"]["slots"]] == ["ok", "ok"]
    assert documents["rollback"]["release"] == 1 and documents["rollback"]["previous"]["release"] == 2


@pytest.mark.parametrize(
    ("command", "args", "error"),
    [
        (
            "install",
            ["{root}/no-such.edgekit", "--root", "{root}/box", "--trusted-key", "{key}"],
            "cannot read the pack",
        ),
        ("status", ["--root", "{root}"], "is not an edgekit install root"),
        ("rollback", ["--root", "{root}", "--trusted-key", "{key}"], "is not an edgekit install root"),
        ("pack", ["{root}"], "no edgekit bundle at"),
    ],
)
def test_a_failure_under_json_is_an_error_document(
    command: str, args: list[str], error: str, tmp_path: Path, cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    key = tmp_path / "k.pub"
    generate_keypair(tmp_path / "k.key", key)
    ran = cli(command, *(a.format(root=tmp_path, key=key) for a in args), "--json")
    assert ran.returncode == 2 and error in ran.stderr, ran.stderr
    document = json.loads(ran.stdout)
    jsonschema.validate(document, load_schema("error"))
    assert (
        document["command"] == command and document["error"]["exit_code"] == 2 and error in document["error"]["message"]
    )
