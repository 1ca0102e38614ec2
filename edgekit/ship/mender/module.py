"""The `edgekit-bundle` update module (Mender's update module protocol v3): one state per call.

Mender calls MODULE STATE FILES; FILES/files/ holds the payload (the .edgekit pack), FILES/tmp/ survives
from one state to the next of the same deployment: it records whether this deployment switched the box.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from edgekit.errors import EdgekitError, UsageError
from edgekit.ship.box import open_root, rollback
from edgekit.ship.install import install
from edgekit.ship.trust import require_policy, verify_trusted

SWITCHED = "edgekit-switched.json"
SERVICE = "edgekit.service"
ANSWERS = {"NeedsArtifactReboot": "No", "SupportsRollback": "Yes"}
NOTHING_TO_DO = frozenset({"Download", "ArtifactReboot", "ArtifactVerifyReboot", "ArtifactRollbackReboot",
                           "ArtifactVerifyRollbackReboot", "ArtifactFailure", "Cleanup"})  # fmt: skip


def artifact_install(files: Path, root: Path) -> None:
    packs = sorted((files / "files").glob("*.edgekit"))
    if len(packs) != 1:
        raise UsageError(f"the artifact's payload holds {len(packs)} .edgekit packs, not one",
                         "write it with edgekit pack --mender")  # fmt: skip
    result = install(packs[0], root)
    if result["changed"]:
        marker = {"slot": result["slot"], "release": result["release"], "previous": result["previous"]}
        (files / "tmp").mkdir(exist_ok=True)
        (files / "tmp" / SWITCHED).write_text(json.dumps(marker))


def artifact_commit(files: Path, root: Path) -> None:
    marker = _switched(files)
    if marker is None:
        return  # this release was already current: nothing was switched, nothing to check
    box = open_root(root)
    current = box.current()
    if current is None or box.rel(current) != marker["slot"]:
        raise UsageError(f"{root}/current is no longer {marker['slot']}", "another install ran meanwhile")
    verify_trusted(current, require_policy(()))
    _service_health()


def artifact_rollback(files: Path, root: Path) -> None:
    marker = _switched(files)
    if marker is None:
        return  # the install refused before switching: the box runs what it ran
    box = open_root(root)
    current = box.current()
    if current is not None and box.rel(current) == marker["slot"]:
        rollback(root)
    (files / "tmp" / SWITCHED).unlink()


def _switched(files: Path) -> dict[str, str] | None:
    path = files / "tmp" / SWITCHED
    return json.loads(path.read_text()) if path.is_file() else None


def _service_health() -> None:
    """Where systemd runs edgekit.service, restart it on the new slot and require it active."""
    if shutil.which("systemctl") is None or not Path("/run/systemd/system").is_dir():
        print("edgekit-bundle: no systemd here; the service is not restarted", file=sys.stderr)
        return
    if subprocess.run(["systemctl", "is-enabled", "--quiet", SERVICE], check=False).returncode != 0:
        return
    subprocess.run(["systemctl", "restart", SERVICE], check=True, timeout=300)
    if subprocess.run(["systemctl", "is-active", "--quiet", SERVICE], check=False).returncode != 0:
        raise EdgekitError(f"{SERVICE} is not active after its restart on the new slot", "see journalctl -u edgekit")


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
