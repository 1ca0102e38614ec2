"""A pack that carries a box runtime (`edgekit pack --box ARCH`), and what `edgekit install` makes of it.

The runtime here is a folder of small stand-in wheels, so that this runs in seconds; the real one (cross-compiled
llama-cpp-python and every wheel of edgekit[runtime] for aarch64, installed on an emulated ARM64 box) is
tests/e2e/test_arm64_box.py.
"""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from edgekit._util.arch import arch_name
from edgekit._util.hashing import sha256_file
from edgekit.manifest import SIGNATURE
from edgekit.ship.box_runtime import DESCRIPTION
from edgekit.ship.keys import generate_keypair
from edgekit.ship.pack import pack_bundle
from edgekit.ship.sign import sign_bundle
from edgekit.ship.trust import TRUST_DIR_ENV
from edgekit.toolchain.box.runtime import BoxRuntime
from tests.support.cli_in_process import run_cli
from tests.support.fake_bundle import make_bundle


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Path, Path]:
    private, public = tmp_path / "fleet.key", tmp_path / "fleet.pub"
    generate_keypair(private, public)
    bundle = make_bundle(tmp_path / "bundle")
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest.update(name="mini", release=1)
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    sign_bundle(bundle, private)
    return bundle, public


@pytest.fixture
def runtime(tmp_path: Path) -> BoxRuntime:
    folder = tmp_path / "wheels"
    folder.mkdir()
    for name in ("edgekit-0.1.0-py3-none-any.whl", f"llama_cpp_python-0.3.36-py3-none-linux_{arch_name()}.whl"):
        (folder / name).write_bytes(name.encode() * 100)
    wheels = {p.name: sha256_file(p) for p in sorted(folder.iterdir())}
    return BoxRuntime(arch_name(), "baseline", "3.11", "0.1.0", ("runtime",), folder, wheels)


def install(pack: Path, root: Path, public: Path) -> tuple[int, str]:
    proc = run_cli("install", str(pack), "--root", str(root), "--trusted-key", str(public), env={TRUST_DIR_ENV: None})
    return proc.returncode, proc.stderr


def rewritten(pack: Path, out: Path, change: dict[str, bytes | None]) -> Path:
    """The pack with members replaced (bytes) or dropped (None)."""
    with tarfile.open(pack) as src, tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read()  # type: ignore[union-attr]
            if member.name in change:
                if (new := change[member.name]) is None:
                    continue
                data, member.size = new, len(new)
            dst.addfile(member, io.BytesIO(data))
    return out


def test_the_runtime_follows_the_bundle_listed_with_its_hashes_and_installs_are_unaffected(
    signed: tuple[Path, Path], runtime: BoxRuntime, tmp_path: Path
) -> None:
    bundle, public = signed
    packed = pack_bundle(bundle, tmp_path, runtime=runtime)
    assert packed.path.name == f"mini-1.{arch_name()}.edgekit" and packed.box == arch_name()
    with tarfile.open(packed.path) as tar:
        names = tar.getnames()
        described = json.loads(tar.extractfile(DESCRIPTION).read())  # type: ignore[union-attr]
        script = tar.getmember("box-runtime/install.sh")
    bundle_files = 2 + len(json.loads((bundle / "manifest.json").read_text())["files"])
    assert names[:2] == [SIGNATURE, "manifest.json"] and names[bundle_files] == DESCRIPTION
    assert names[bundle_files + 1 :] == ["box-runtime/install.sh", *(f"box-runtime/wheels/{w}" for w in runtime.wheels)]
    assert described["arch"] == arch_name() and described["requirement"] == "edgekit[runtime]==0.1.0"
    assert set(described["files"]) == {"install.sh", *(f"wheels/{w}" for w in runtime.wheels)}
    assert script.mode == 0o755
    assert pack_bundle(bundle, tmp_path / "again.edgekit", runtime=runtime).sha256 == packed.sha256
    code, err = install(packed.path, tmp_path / "box", public)
    assert code == 0, err
    slot = (tmp_path / "box" / "current").resolve()
    assert not (slot / "box-runtime").exists()  # the runtime is not part of the release


def test_a_pack_for_another_architecture_is_refused_with_the_fix(
    signed: tuple[Path, Path], runtime: BoxRuntime, tmp_path: Path
) -> None:
    bundle, public = signed
    other = "aarch64" if arch_name() != "aarch64" else "x86_64"
    packed = pack_bundle(bundle, tmp_path, runtime=replace(runtime, arch=other))
    code, err = install(packed.path, tmp_path / "box", public)
    assert code == 2, err
    assert f"carries the runtime for {other} boxes; this box is {arch_name()}" in err
    assert f"edgekit pack BUNDLE --box {arch_name()}" in err and not (tmp_path / "box" / "current").exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("changed", "sha256 differs from box-runtime/runtime.json"),
        ("dropped", "its box runtime lacks box-runtime/wheels/"),
        ("unlisted", "is not a file box-runtime/runtime.json lists"),
    ],
)
def test_a_changed_missing_or_unlisted_runtime_file_is_refused(
    signed: tuple[Path, Path], runtime: BoxRuntime, tmp_path: Path, change: str, message: str
) -> None:
    bundle, public = signed
    packed = pack_bundle(bundle, tmp_path, runtime=runtime)
    wheel = f"box-runtime/wheels/{next(iter(runtime.wheels))}"
    edits: dict[str, bytes | None] = {
        "changed": {wheel: b"not the wheel"},
        "dropped": {wheel: None},
        "unlisted": {DESCRIPTION: json.dumps({"arch": arch_name(), "files": {}}).encode()},
    }[change]
    code, err = install(rewritten(packed.path, tmp_path / "bad.edgekit", edits), tmp_path / "box", public)
    assert code == 4 and message in err, err
    assert not (tmp_path / "box" / "current").exists()
