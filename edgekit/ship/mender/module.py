"""The `edgekit-bundle` update module (Mender's update module protocol v3): one state per call.

Mender calls MODULE STATE FILES; FILES/files/ holds the payload (the .edgekit pack), FILES/tmp/ survives
from one state to the next of the same deployment: it records which slot was current before it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from edgekit._util.fsutil import write_json_atomic
from edgekit.errors import EdgekitError, UsageError
from edgekit.ship.box import open_root, rollback
from edgekit.ship.install import install
from edgekit.ship.slots import InstallRoot
from edgekit.ship.trust import require_policy, verify_trusted

BEFORE = "edgekit-before.json"  # the slot current before this deployment (null: none)
SERVICE = "edgekit.service"
ANSWERS = {"NeedsArtifactReboot": "No", "SupportsRollback": "Yes"}
NOTHING_TO_DO = frozenset({"Download", "ArtifactReboot", "ArtifactVerifyReboot", "ArtifactRollbackReboot",
                           "ArtifactVerifyRollbackReboot", "ArtifactFailure", "Cleanup"})  # fmt: skip


def artifact_install(files: Path, root: Path) -> None:
    packs = sorted((files / "files").glob("*.edgekit"))
    if len(packs) != 1:
        raise UsageError(f"the artifact's payload holds {len(packs)} .edgekit packs, not one",
                         "write it with edgekit pack --mender")  # fmt: skip
    box = InstallRoot(Path(root).absolute())
    before = box.current() if box.slots.is_dir() else None
    # written before the install: a crash after its switch still leaves what a rollback must go back to
    write_json_atomic(files / "tmp" / BEFORE, {"slot": box.rel(before) if before else None})
    install(packs[0], root)


def artifact_commit(files: Path, root: Path) -> None:
    before = _before(files)
    box = open_root(root)
    current = box.current()
    if current is None or (before is not None and box.rel(current) == before.get("slot")):
        return  # this deployment switched nothing (that release was already current): nothing to check
    verify_trusted(current, require_policy(()))
    _service_health()


def artifact_rollback(files: Path, root: Path) -> None:
    before = _before(files)
    if before is None:
        return  # the install never started: the box runs what it ran
    box = open_root(root)
    current = box.current()
    if current is not None and box.rel(current) != before["slot"]:
        if before["slot"] is None:  # the box's first release: back to running none
            with box.locked():
                box.link.unlink()
        else:
            rollback(root)
        _service_health()


def _before(files: Path) -> dict[str, str | None] | None:
    path = files / "tmp" / BEFORE
    return json.loads(path.read_text()) if path.is_file() else None


def _service_health() -> None:
    """Where systemd runs edgekit.service, restart it on the slot now current and require it active."""
    if shutil.which("systemctl") is None or not Path("/run/systemd/system").is_dir():
        print("edgekit-bundle: no systemd here; the service is not restarted", file=sys.stderr)
        return
    if subprocess.run(["systemctl", "is-enabled", "--quiet", SERVICE], check=False).returncode != 0:
        return
    try:
        subprocess.run(["systemctl", "restart", SERVICE], check=True, timeout=300, capture_output=True)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        raise EdgekitError(f"systemctl restart {SERVICE} failed ({exc})", "see journalctl -u edgekit") from None
    if subprocess.run(["systemctl", "is-active", "--quiet", SERVICE], check=False).returncode != 0:
        raise EdgekitError(f"{SERVICE} is not active after its restart", "see journalctl -u edgekit")


STATES: dict[str, Callable[[Path, Path], None]] = {
    "ArtifactInstall": artifact_install,
    "ArtifactCommit": artifact_commit,
    "ArtifactRollback": artifact_rollback,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="edgekit-bundle", description="Mender update module for edgekit packs")
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("state")
    parser.add_argument("files", type=Path)
    args = parser.parse_args(argv)
    if args.state in ANSWERS:
        print(ANSWERS[args.state])
        return 0
    if args.state in NOTHING_TO_DO:
        return 0
    handler = STATES.get(args.state)
    if handler is None:
        print(f"edgekit-bundle: unknown state {args.state!r}", file=sys.stderr)
        return 1
    try:
        handler(args.files, args.root)
    except EdgekitError as exc:
        print(f"edgekit-bundle {args.state}: {exc}", file=sys.stderr)
        return 1
    return 0
