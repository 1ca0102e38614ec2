"""What a box reports and undoes: `edgekit status` (its slots, which one runs, what was checked) and
`edgekit rollback` (back to the previous slot, verified again first, in one atomic switch)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgekit.errors import EdgekitError, NotAnInstallRoot, NothingToRollBack
from edgekit.manifest import verify_bundle
from edgekit.ship.slots import InstallRoot, slot_summary
from edgekit.ship.trust import TrustPolicy, box_policy, require_policy, verify_trusted


def open_root(root: Path) -> InstallRoot:
    box = InstallRoot(Path(root).absolute())
    if not box.slots.is_dir():
        raise NotAnInstallRoot(root)
    return box


def status(root: Path, *, verify: bool = False, trusted_keys: Sequence[Path] = ()) -> dict[str, Any]:
    """The slots under `root`: which is current and previous, releases, install records and verification state."""
    box = open_root(root)
    current, previous = box.current(), box.previous()
    state = box.state()
    policy = box_policy(trusted_keys) if verify else None
    slots = []
    for slot in box.installed():
        rel = box.rel(slot)
        slots.append({
            "slot": rel,
            "current": slot == current,
            "previous": slot == previous,
            **slot_summary(slot),
            "install": state["slots"].get(rel),
            "verification": _verification(slot, verify, policy),
        })  # fmt: skip
    return {
        "root": str(box.root),
        "current": box.rel(current) if current else None,
        "previous": box.rel(previous) if previous else None,
        "slots": slots,
        "partial": [box.rel(p) for p in sorted(box.slots.glob("*/.*.partial"))],
        "history": state["history"][-10:],
    }


def _verification(slot: Path, full: bool, policy: TrustPolicy | None) -> dict[str, Any]:
    try:
        if not full:
            verify_bundle(slot, check_hashes=False)
            return {"state": "ok", "checked": "files and sizes (--verify: hashes and signature)"}
        if policy is None:
            verify_bundle(slot)
            return {"state": "ok", "checked": "every sha256 (no trust policy: the signature was not checked)"}
        checked = verify_trusted(slot, policy)
        return {"state": "ok", "checked": f"every file against the signature of {checked.signed_by}"}
    except EdgekitError as exc:
        return {"state": "failed", "checked": "hashes and signature" if full else "files and sizes",
                "problem": exc.message}  # fmt: skip


def rollback(root: Path, *, trusted_keys: Sequence[Path] = ()) -> dict[str, Any]:
    """Switch `current` back to the previous slot after verifying it against the trust policy again."""
    started = time.time()
    policy = require_policy(trusted_keys)
    box = open_root(root)
    with box.locked():
        box.clean_abandoned()
        current, target = box.current(), box.previous()
        if target is None:
            raise NothingToRollBack(box.root)
        checked = verify_trusted(target, policy)  # it may have been changed while it was not running
        box.switch(target)
        box.record_switch(target, "rollback", int(checked.manifest.get("release", 0)))
    return {
        "root": str(box.root),
        "slot": box.rel(target),
        **slot_summary(target),
        "signed_by": str(checked.signed_by),
        "previous": {"slot": box.rel(current), **slot_summary(current)} if current else None,
        "seconds": time.time() - started,
    }
