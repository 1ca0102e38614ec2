"""Shipping with Mender, for real: `edgekit pack --mender` writes a module-image artifact that
`mender-artifact validate` accepts, and Debian's mender-client in standalone mode runs edgekit's
`edgekit-bundle` update module through install and commit, rollback, and a failing smoke test.

Mender's update modules live in /usr/share/mender/modules/v3 and its standalone mode reads
/etc/mender/artifact_info (neither can be moved by its configuration), so the test writes both, as root, and
removes what it wrote; everything else (its data, the device type, the install root) is in the test's folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from edgekit._util.fsutil import write_json_atomic
from tests.support.cli_in_process import run_cli as cli

DEVICE = "edgekit-test-gw"
ARTIFACT_INFO = Path("/etc/mender/artifact_info")


@dataclass
class MenderBox:
    dir: Path
    root: Path  # edgekit's install root
    config: Path
    data: Path
    artifacts: dict[str, Path]  # r1, r2, r3-bad-smoke (recorded logprobs 1 nat off), other-device

    def mender(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["mender", "--config", str(self.config), "--data", str(self.data), "--no-syslog",
                               "-l", "info", *args], capture_output=True, text=True, timeout=600)  # fmt: skip

    def current_release(self) -> int | None:
        status = json.loads(cli("status", "--root", str(self.root), "--json").stdout)
        return next((s["release"] for s in status["slots"] if s["current"]), None)


def _release(tiny: Path, dest: Path, release: int, key: Path, *, smoke_shift: float = 0.0) -> Path:
    shutil.copytree(tiny, dest)
    (dest / "model.sig").unlink(missing_ok=True)
    manifest = json.loads((dest / "manifest.json").read_text())
    manifest["release"] = release
    for item in manifest["artifacts"][0]["smoke"]["prompts"]:
        item["logprobs"] = [value - smoke_shift for value in item["logprobs"]]
    write_json_atomic(dest / "manifest.json", manifest)
    assert cli("sign", str(dest), "--key", str(key)).returncode == 0
    return dest


def _mender_pack(bundle: Path, out: Path, device: str) -> dict[str, Any]:
    proc = cli("pack", str(bundle), "-o", str(out), "--mender", "--device-type", device, "--json")
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


@pytest.fixture(scope="module")
def mender_box(tmp_path_factory: pytest.TempPathFactory, tiny_bundle: Path) -> Iterator[MenderBox]:
    from edgekit.ship.keys import generate_keypair
    from edgekit.ship.mender.artifact import MODULE, MODULES_DIR, install_module

    assert shutil.which("mender") and shutil.which("mender-artifact"), "scripts/install.sh --dev installs them"
    root = tmp_path_factory.mktemp("mender")
    generate_keypair(root / "fleet.key", root / "trusted" / "fleet.pub")
    artifacts = {}
    releases = (("r1", 1, 0.0, DEVICE), ("r2", 2, 0.0, DEVICE), ("r3-bad-smoke", 3, 1.0, DEVICE),
                ("other-device", 4, 0.0, "another-gw"))  # fmt: skip
    for name, release, shift, device in releases:
        bundle = _release(tiny_bundle, root / name / "tiny", release, root / "fleet.key", smoke_shift=shift)
        (root / "out" / name).mkdir(parents=True)
        artifacts[name] = Path(_mender_pack(bundle, root / "out" / name, device)["mender"]["path"])
    (root / "data").mkdir()
    (root / "data" / "device_type").write_text(f"device_type={DEVICE}\n")
    config = root / "mender.conf"
    config.write_text(json.dumps({"DeviceTypeFile": str(root / "data" / "device_type")}))
    assert not (MODULES_DIR / MODULE).exists(), f"{MODULES_DIR / MODULE} exists already: not the test's to replace"
    wrote_info = not ARTIFACT_INFO.exists()
    if wrote_info:
        ARTIFACT_INFO.parent.mkdir(parents=True, exist_ok=True)
        ARTIFACT_INFO.write_text("artifact_name=factory\n")
    install_module(root / "box", MODULES_DIR, root / "trusted")
    try:
        yield MenderBox(root, root / "box", config, root / "data", artifacts)
    finally:
        (MODULES_DIR / MODULE).unlink(missing_ok=True)
        if wrote_info:
            ARTIFACT_INFO.unlink(missing_ok=True)


def test_the_artifact_validates_and_carries_the_pack_for_its_device_type(mender_box: MenderBox) -> None:
    artifact = mender_box.artifacts["r1"]
    assert subprocess.run(["mender-artifact", "validate", str(artifact)], capture_output=True).returncode == 0
    read = subprocess.run(["mender-artifact", "read", str(artifact)], capture_output=True, text=True, check=True)
    assert "edgekit-bundle" in read.stdout and DEVICE in read.stdout and "tiny-1.edgekit" in read.stdout
    assert "Name: tiny-1" in read.stdout


def test_mender_installs_commits_and_rolls_back_through_edgekits_module(mender_box: MenderBox) -> None:
    box = mender_box
    installed = box.mender("install", str(box.artifacts["r1"]))
    assert installed.returncode == 0, installed.stderr
    assert box.current_release() == 1  # switched by ArtifactInstall, after verify, trust and the smoke test
    committed = box.mender("commit")
    assert committed.returncode == 0, committed.stderr
    assert box.mender("show-artifact").stdout.strip() == "tiny-1"

    assert box.mender("install", str(box.artifacts["r2"])).returncode == 0
    assert box.current_release() == 2
    rolled = box.mender("rollback")
    assert rolled.returncode == 0, rolled.stderr
    assert box.current_release() == 1 and box.mender("show-artifact").stdout.strip() == "tiny-1"


def test_a_failing_smoke_test_makes_mender_roll_back_and_another_device_type_is_refused(
    mender_box: MenderBox,
) -> None:
    box = mender_box
    if box.current_release() is None:  # run alone: release 1 first
        assert box.mender("install", str(box.artifacts["r1"])).returncode == 0
        assert box.mender("commit").returncode == 0
    before = box.current_release()
    failed = box.mender("install", str(box.artifacts["r3-bad-smoke"]))
    assert failed.returncode != 0 and "smoke test failed" in failed.stderr, failed.stderr
    assert box.current_release() == before and box.mender("commit").returncode == 2  # nothing left to commit
    status = json.loads(cli("status", "--root", str(box.root), "--json").stdout)
    assert status["partial"] == [] and 3 not in [s["release"] for s in status["slots"]]

    refused = box.mender("install", str(box.artifacts["other-device"]))
    assert refused.returncode != 0 and f"not compatible with device {DEVICE}" in refused.stderr
    assert box.current_release() == before


def test_pack_refuses_device_types_without_mender(tiny_bundle: Path, tmp_path: Path) -> None:
    proc = cli("pack", str(tiny_bundle), "-o", str(tmp_path), "--device-type", DEVICE)
    assert proc.returncode == 2 and "--device-type is for --mender" in proc.stderr
    assert os.listdir(tmp_path) == []
