"""Installing on a box, under faults, with real bundles of the tiny model (tests/support/tiny_project.py).

Releases 1, 2 and 9 of the tiny bundle are signed, packed and installed for real. `paused_install.py POINT
FLAG install …` (the CLI with one seam patched) stops an install at a step and the test kills it there with
SIGKILL; the kill during the smoke test needs no pause (the installer is killed while its smoke-test child
runs). After every kill the box still runs what it ran, and the next install succeeds. Then: a full disk (a
real tmpfs), a downgrade, a pack signed by a key the box does not trust, and a box whose runtime decodes
differently from the build.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from edgekit._util.fsutil import write_json_atomic
from edgekit.manifest import verify_bundle
from edgekit.ship.trust import TRUST_DIR_ENV
from tests.support import SUPPORT
from tests.support.cli_in_process import run_cli as cli
from tests.support.processes import wait_until

PAUSED = SUPPORT / "paused_install.py"
KILL_POINTS = ("unpack", "verified", "smoke test running", "switched")


def edgekit(*args: str, env: dict[str, str] | None = None, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edgekit", *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})}, **kw)  # fmt: skip


@dataclass
class Fleet:
    dir: Path
    key: Path
    pub: Path
    packs: dict[str, Path]  # "r1", "r2", "r3-rogue" (signed by a key the box does not trust)
    bundles: dict[str, Path]
    env: dict[str, str]  # the box's trust policy: a folder holding fleet.pub

    def install(self, pack: str | Path, root: Path, *args: str) -> subprocess.CompletedProcess[str]:
        path = self.packs[pack] if isinstance(pack, str) else pack
        return cli("install", str(path), "--root", str(root), *args, env=self.env)

    def status(self, root: Path) -> dict[str, Any]:
        proc = cli("status", "--root", str(root), "--json", env=self.env)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)


def _relabel(bundle: Path, dest: Path, release: int) -> Path:
    """A copy of `bundle` whose manifest says another release (then signed by whoever the test chooses)."""
    shutil.copytree(bundle, dest)
    (dest / "model.sig").unlink(missing_ok=True)
    manifest = json.loads((dest / "manifest.json").read_text())
    manifest["release"] = release
    write_json_atomic(dest / "manifest.json", manifest)
    return dest


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, tiny_bundle: Path) -> Fleet:
    """Releases 1, 2 and 9 of the session's tiny bundle (its manifest relabelled: `edgekit build --release N`
    is tested on the default bundle, test_ship.py); 9 is signed by a key the box does not trust."""
    from edgekit.ship.keys import generate_keypair
    from edgekit.ship.pack import pack_bundle
    from edgekit.ship.sign import sign_bundle

    root = tmp_path_factory.mktemp("fleet")
    for name in ("fleet", "rogue"):
        generate_keypair(root / "keys" / f"{name}.key", root / "keys" / f"{name}.pub")
    bundles = {name: _relabel(tiny_bundle, root / name / "tiny", int(name[1])) for name in ("r1", "r2", "r9-rogue")}
    packs = {}
    for name, bundle in bundles.items():
        sign_bundle(bundle, root / "keys" / ("rogue.key" if "rogue" in name else "fleet.key"))
        packs[name] = pack_bundle(bundle, root / f"{name}.edgekit").path
    trust = root / "trusted-keys"
    trust.mkdir()
    shutil.copy(root / "keys" / "fleet.pub", trust / "fleet.pub")
    return Fleet(root, root / "keys" / "fleet.key", trust / "fleet.pub", packs, bundles, {TRUST_DIR_ENV: str(trust)})


def test_a_build_records_the_greedy_ids_and_their_logprobs_of_every_artifact(fleet: Fleet, tiny_bundle: Path) -> None:
    manifest = verify_bundle(tiny_bundle)
    assert manifest["release"] == 0  # the recipe sets none
    smoke = manifest["artifacts"][0]["smoke"]
    assert len(smoke["prompts"]) == 3 and smoke["settings"]["max_concurrent"] == 1
    for item in smoke["prompts"]:
        assert item["prompt_ids"] and 1 <= len(item["greedy_ids"]) <= 16
        assert len(item["logprobs"]) == len(item["greedy_ids"]) and all(v <= 0 for v in item["logprobs"])
    assert "edgekit.service" in {f["path"] for f in manifest["files"]}
    assert cli("inspect", str(fleet.bundles["r2"])).stdout.startswith("tiny release 2")


def _current(root: Path) -> str:
    return os.readlink(root / "current")


def _smoke_children(proc: subprocess.Popen[str]) -> list[psutil.Process]:
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [c for c in children if "edgekit.runtime.smoke" in " ".join(c.cmdline())]


def kill_install(fleet: Fleet, point: str, root: Path) -> dict[str, Any]:
    args = ["install", str(fleet.packs["r2"]), "--root", str(root)]
    env = {**os.environ, **fleet.env}
    seen: dict[str, Any] = {}
    if point == "smoke test running":
        proc = subprocess.Popen([sys.executable, "-m", "edgekit", *args], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        wait_until(lambda: _smoke_children(proc), proc, "the smoke test started")
        children = _smoke_children(proc)
        os.kill(proc.pid, signal.SIGKILL)
        _, alive = psutil.wait_procs(children, timeout=10)  # the child dies with its installer
        seen["smoke_alive"] = len(alive)
    else:
        flag = fleet.dir / f"paused-{point}"
        flag.unlink(missing_ok=True)
        proc = subprocess.Popen([sys.executable, str(PAUSED), point, str(flag), *args], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        wait_until(flag.exists, proc, f"the pause at {point}")
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    proc.stdout.close()  # type: ignore[union-attr]
    proc.stderr.close()  # type: ignore[union-attr]
    seen["returncode"] = proc.returncode
    return seen


@dataclass
class Kill:
    point: str
    seen: dict[str, Any]
    current_after_kill: str
    status_after_kill: dict[str, Any]
    next_install: subprocess.CompletedProcess[str]
    status_after_next: dict[str, Any] = field(default_factory=dict)


@pytest.fixture(scope="module")
def kills(fleet: Fleet) -> Iterator[tuple[Path, str, list[Kill]]]:
    """One box running release 1; an install of release 2 killed at each point, then installed again."""
    root = fleet.dir / "box-killed"
    assert fleet.install("r1", root).returncode == 0
    release_1 = _current(root)
    found = []
    for point in KILL_POINTS:
        if _current(root) != release_1:  # back to release 1 before the next kill
            assert cli("rollback", "--root", str(root), env=fleet.env).returncode == 0
        seen = kill_install(fleet, point, root)
        current, status = _current(root), fleet.status(root)
        again = fleet.install("r2", root)
        found.append(Kill(point, seen, current, status, again, fleet.status(root)))
    yield root, release_1, found


@pytest.mark.parametrize("point", KILL_POINTS)
def test_an_install_killed_at_each_step_leaves_the_box_running_and_the_next_install_succeeds(
    point: str, kills: tuple[Path, str, list[Kill]], fleet: Fleet
) -> None:
    _, release_1, found = kills
    kill = next(k for k in found if k.point == point)
    assert kill.seen["returncode"] == -signal.SIGKILL
    current = {s["slot"]: s for s in kill.status_after_kill["slots"]}[kill.current_after_kill]
    assert current["verification"]["state"] == "ok"  # what `current` points at is complete
    if point == "switched":  # the switch is one rename: done, the new release is complete and the old one kept
        assert kill.current_after_kill != release_1 and current["release"] == 2
        assert kill.status_after_kill["previous"] == release_1
    else:
        assert kill.current_after_kill == release_1 and current["release"] == 1
    if point == "smoke test running":
        assert kill.seen["smoke_alive"] == 0
    assert kill.next_install.returncode == 0, kill.next_install.stderr
    after = kill.status_after_next
    assert {s["slot"]: s["release"] for s in after["slots"]}[after["current"]] == 2
    assert after["partial"] == [] and after["previous"] == release_1  # what the kill left is gone
    assert [s["verification"]["state"] for s in after["slots"]] == ["ok", "ok"]


def test_the_box_runs_the_model_after_the_kills(kills: tuple[Path, str, list[Kill]], fleet: Fleet) -> None:
    root, _, _ = kills
    proc = edgekit("run", str(root / "current"), "--prompt", "Hello", "--max-tokens", "4", env=fleet.env)
    assert proc.returncode == 0 and "tiny/gguf-Q8_0" in proc.stderr, proc.stderr


# --- refusals: each with its own message and exit code, nothing left ------------------------------------


@pytest.fixture(scope="module")
def box(fleet: Fleet) -> Path:
    """A box that installed release 1, then release 2 (the refusals below must leave it exactly so)."""
    root = fleet.dir / "box"
    for pack in ("r1", "r2"):
        assert fleet.install(pack, root).returncode == 0
    return root


def _snapshot(root: Path) -> dict[str, Any]:
    return {"current": _current(root),
            "files": sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.name != ".lock")}  # fmt: skip


def test_a_pack_signed_by_a_key_the_box_does_not_trust_is_refused(fleet: Fleet, box: Path) -> None:
    before = _snapshot(box)
    proc = fleet.install("r9-rogue", box)
    assert proc.returncode == 4, proc.stderr
    assert "refused by this box's trust policy" in proc.stderr and "not trusted here" in proc.stderr
    assert _snapshot(box) == before


def _install_edited(fleet: Fleet, box: Path, release: int, edit: Callable[[dict[str, Any]], None]
                    ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Install release `release` of the tiny bundle with `edit` applied to its smoke record, signed by the fleet's
    key (so only the smoke test can object); the box must be left as it was."""
    bundle = _relabel(fleet.bundles["r2"], fleet.dir / f"r{release}-edited" / "tiny", release)
    manifest = json.loads((bundle / "manifest.json").read_text())
    edit(manifest["artifacts"][0]["smoke"])
    write_json_atomic(bundle / "manifest.json", manifest)
    assert cli("sign", str(bundle), "--key", str(fleet.key)).returncode == 0
    pack = cli("pack", str(bundle), "-o", str(fleet.dir / f"r{release}-edited.edgekit"), "--json")
    before = _snapshot(box)
    proc = fleet.install(Path(json.loads(pack.stdout)["path"]), box)
    assert proc.returncode == 5 and "smoke test failed" in proc.stderr, proc.stderr
    assert "nothing was switched" in proc.stderr and _snapshot(box) == before
    return proc


def test_a_box_that_computes_differently_stops_the_install_showing_how_far(fleet: Fleet, box: Path) -> None:
    """A correctly signed bundle whose recorded log-probabilities this box does not reproduce: another runtime,
    in effect (every recorded token 1 nat away, beyond the default tolerance: the tiny build has no noise floor)."""

    def shift(smoke: dict[str, Any]) -> None:
        assert smoke["tolerance"]["source"] == "the default: the build measured no noise floor"
        for item in smoke["prompts"]:
            item["logprobs"] = [value - 1.0 for value in item["logprobs"]]

    proc = _install_edited(fleet, box, 4, shift)
    assert "log-probabilities of the recorded tokens" in proc.stderr
    assert "from the build machine on average and 1 at most; the tolerance is 0.05 and 0.5" in proc.stderr


def test_a_record_of_greedy_ids_only_is_judged_by_them(fleet: Fleet, box: Path) -> None:
    """A bundle recorded before log-probabilities were (an older edgekit): a different greedy id stops it."""
    recorded: list[int] = []

    def older(smoke: dict[str, Any]) -> None:
        for item in smoke["prompts"]:
            del item["logprobs"]
        ids = smoke["prompts"][0]["greedy_ids"]
        ids[-1] = (ids[-1] + 1) % 1000
        recorded.extend(ids)

    proc = _install_edited(fleet, box, 5, older)
    assert f"build machine {recorded}" in proc.stderr and "this box [" in proc.stderr


def test_a_downgrade_is_refused_unless_asked(fleet: Fleet, box: Path) -> None:
    before = _snapshot(box)
    refused = fleet.install("r1", box)
    assert refused.returncode == 2 and "release 1 is older than release 2" in refused.stderr, refused.stderr
    assert "edgekit rollback" in refused.stderr and _snapshot(box) == before
    same = fleet.install("r2", box)
    assert same.returncode == 0 and "already current" in same.stdout and _snapshot(box) == before
    forced = fleet.install("r1", box, "--allow-downgrade", "--json")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["release"] == 1 and json.loads(forced.stdout)["previous"]["release"] == 2


# --- a full disk: a real, small filesystem ---------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path, fleet: Fleet) -> Iterator[tuple[Path, int]]:
    """A tmpfs with room for the pack and the install margin, and 4 MiB more (mounting needs root)."""
    from edgekit.ship.install import INSTALL_MARGIN

    mount = tmp_path / "disk"
    mount.mkdir()
    size = fleet.packs["r2"].stat().st_size + INSTALL_MARGIN + 4 * 2**20
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, f"mounting a tmpfs needs root (CAP_SYS_ADMIN): {proc.stderr}"
    try:
        yield mount, size
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_is_refused_before_unpacking_and_a_disk_that_fills_midway_leaves_nothing(
    small_disk: tuple[Path, int], fleet: Fleet, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    mount, _ = small_disk
    root = mount / "edgekit"
    ballast = mount / "ballast"
    ballast.write_bytes(b"\0" * 8 * 2**20)  # now the pack and the margin do not fit
    refused = fleet.install("r2", root)
    assert refused.returncode == 3, refused.stderr
    assert "not enough disk space in" in refused.stderr and "nothing was installed" in refused.stderr
    assert list((root / "slots").iterdir()) == []
    ballast.unlink()

    # The check passes, then something else fills the disk (the seam: right after the check, in this process).
    from edgekit.cli import main
    from edgekit.ship import install

    checked = install.ensure_free_space

    def then_fill(path: Path, needed: int, **kw: Any) -> None:
        checked(path, needed, **kw)
        free = shutil.disk_usage(mount).free
        ballast.write_bytes(b"\0" * (free - 2**20))  # leave 1 MiB: the model file cannot fit

    monkeypatch.setattr(install, "ensure_free_space", then_fill)
    monkeypatch.setenv(TRUST_DIR_ENV, fleet.env[TRUST_DIR_ENV])
    monkeypatch.setattr(sys, "argv", ["edgekit", "install", str(fleet.packs["r2"]), "--root", str(root)])
    with pytest.raises(SystemExit) as exit_info:
        main()
    err = " ".join(capsys.readouterr().err.split())
    assert exit_info.value.code == 3, err
    assert "the disk filled up while unpacking (No space left on device)" in err and "nothing was installed" in err
    assert list((root / "slots").iterdir()) == [] and not (root / "current").exists()
    ballast.unlink()
    monkeypatch.undo()
    assert fleet.install("r2", root).returncode == 0  # room again: the install goes through
