"""`edgekit install PACK --root ROOT`, in the order of RAUC and Mender: nothing runs that was not checked.

1. unpack into a fresh slot, streaming, after a free-space check on what the manifest lists;
2. verify every hash and the signature against the box's trust policy;
3. refuse a release not higher than the running one (`--allow-downgrade` to insist);
4. smoke test: in a child process, load and warm up each artifact and feed it the build's recorded prompts
   and continuations; their log-probabilities must be within the recorded tolerance of the build's;
5. switch `current` atomically, keep the previous slot, remove older ones beyond `keep`.

Until step 5 the box runs what it ran; a kill anywhere leaves a locked partial slot that the next install
removes. Each step is a module-level function (the kill tests pause in them, patched in their own process).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgekit._util.fsutil import ensure_free_space
from edgekit._util.procutil import die_with_parent
from edgekit.errors import (
    DiskFullError,
    DiskSpaceError,
    DowngradeError,
    EdgekitError,
    IntegrityError,
    MissingDependencyError,
    SmokeTestError,
    TrustError,
    UsageError,
)
from edgekit.manifest import load_manifest
from edgekit.observe.progress import Progress, SilentProgress
from edgekit.ship.fill import Fill, PackFill, RegistryFill
from edgekit.ship.oci.client import Connection
from edgekit.ship.oci.errors import RegistryError
from edgekit.ship.oci.reference import is_reference
from edgekit.ship.slots import InstallRoot, slot_summary
from edgekit.ship.trust import Checked, TrustPolicy, require_policy, verify_trusted
from edgekit.ship.unpack import Head, Unpacked

RETRYABLE = (RegistryError, DiskSpaceError, DiskFullError)  # a pull's downloads are kept for the next try
INSTALL_MARGIN = 32 * 2**20  # left free after an install: a box's disk is small, and logs must still fit
SMOKE_TIMEOUT = 900
DISK_HINT = (
    "free some space on the box or install under another --root (a pull's downloads/ there can go); "
    "nothing was installed"
)


class _AlreadyCurrent(Exception):
    def __init__(self, slot: Path) -> None:
        self.slot = slot


def install(
    source: Path | str,
    root: Path,
    *,
    trusted_keys: Sequence[Path] = (),
    allow_downgrade: bool = False,
    keep: int = 2,
    smoke_timeout: float = SMOKE_TIMEOUT,
    connection: Connection | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Install the pack `source` ("-": stdin) or the artifact `oci://…` under `root`; return what changed."""
    started = time.time()
    policy = require_policy(trusted_keys)
    box = InstallRoot(Path(root).absolute())
    box.ensure()
    fill = _fill_for(box, source, connection, progress)
    with box.locked():
        box.clean_abandoned()
        before = box.current()
        try:
            result = _install_locked(box, fill, policy, before, allow_downgrade, smoke_timeout)
        except _AlreadyCurrent as done:
            fill.done()
            return {**_describe(box, done.slot, None), "changed": False, "seconds": time.time() - started}
        except EdgekitError as exc:
            if not isinstance(exc, RETRYABLE):  # a retry would be refused again: the downloads are dead weight
                fill.done()
            raise
        result["removed"] = cleanup_slots(box, keep)
        fill.done()
    return {**result, "changed": True, "seconds": time.time() - started}


def _fill_for(box: InstallRoot, source: Path | str, connection: Connection | None, progress: Progress | None) -> Fill:
    if is_reference(str(source)):
        return RegistryFill(box, str(source), connection or Connection(), progress or SilentProgress())
    if connection is not None and connection != Connection():
        raise UsageError("--ca-file and --insecure are for an oci:// reference, not a pack", "leave them out")
    return PackFill(source)


def _install_locked(
    box: InstallRoot, fill: Fill, policy: TrustPolicy, before: Path | None, allow: bool, timeout: float
) -> dict[str, Any]:
    holder: list[tuple[Path, int]] = []  # the partial slot and the descriptor that holds its lock

    def prepare(head: Head, needed: int | None = None) -> Path:
        slot = box.slot_for(head.manifest["name"], head.manifest.get("release", 0),
                            hashlib.sha256(head.manifest_bytes).hexdigest())  # fmt: skip
        if slot == before:
            raise _AlreadyCurrent(slot)
        ensure_free_space(box.slots, head.total_bytes if needed is None else needed, margin=INSTALL_MARGIN,
                          hint=DISK_HINT)  # fmt: skip
        holder.append(box.new_partial(slot))
        return holder[0][0]

    try:
        unpacked = _filled_or_full(box, fill, prepare)
        partial = unpacked.path
        checked = _verified(partial, policy, fill.label)
        check_release(before, checked.manifest, allow)
        smoke = smoke_test(partial, timeout)
        slot = box.slot_for(checked.manifest["name"], checked.manifest.get("release", 0),
                            hashlib.sha256(unpacked.head.manifest_bytes).hexdigest())  # fmt: skip
        record = _record(fill.origin(unpacked), checked, smoke)
        _commit(box, partial, slot, record)
        box.switch(slot)
        box.record_switch(slot, "install", record["release"])
    except BaseException:
        if holder:
            shutil.rmtree(holder[0][0], ignore_errors=True)
            with contextlib.suppress(OSError):
                holder[0][0].parent.rmdir()  # the bundle's folder under slots/, if this was its first slot
        raise
    finally:
        if holder:
            os.close(holder[0][1])
    return {**_describe(box, slot, before), "source": record["source"], "pack_sha256": record["pack_sha256"],
            "smoke": smoke}  # fmt: skip


def _filled_or_full(box: InstallRoot, fill: Fill, prepare: Any) -> Unpacked:
    try:
        return fill.fill(prepare)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise
        raise DiskFullError(f"{box.slots}: the disk filled up while unpacking ({exc.strerror})", DISK_HINT) from None


def _verified(partial: Path, policy: TrustPolicy, label: str) -> Checked:
    try:
        return verify_slot(partial, policy)
    except TrustError as exc:  # name the pack, not the temp folder it was unpacked into
        message = exc.message.replace(str(partial), "its bundle")
        raise exc.reworded(f"{label}: {message}; nothing was installed") from None


def verify_slot(slot: Path, policy: TrustPolicy) -> Checked:
    """Step 2: every file against the manifest, the whole against the signature of a trusted key."""
    return verify_trusted(slot, policy)


def check_release(before: Path | None, manifest: dict[str, Any], allow_downgrade: bool) -> None:
    """Step 3: releases only go up on a box, unless the operator insists."""
    if before is None or allow_downgrade:
        return
    try:
        running = load_manifest(before)
    except IntegrityError:
        return  # the running slot is damaged: anything verified is better
    old, new = int(running.get("release", 0)), int(manifest.get("release", 0))
    if new <= old:
        raise DowngradeError(manifest["name"], new, old, running["name"])


def smoke_test(slot: Path, timeout: float) -> dict[str, Any]:
    """Step 4, in a child process (a crash or its memory never reaches the installer): the build's records."""
    artifacts = load_manifest(slot).get("artifacts", [])
    if not any((a.get("smoke") or {}).get("prompts") for a in artifacts):  # built without records: nothing to replay
        return {a["name"]: "unrecorded" for a in artifacts}
    proc = subprocess.run(
        [sys.executable, "-m", "edgekit.runtime.smoke", str(slot)],
        capture_output=True, text=True, timeout=timeout, preexec_fn=die_with_parent(),
    )  # fmt: skip
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = " ".join(proc.stderr.strip().splitlines()[-3:]) or f"exit {proc.returncode}"
        raise SmokeTestError(f"the smoke test could not run: {tail}", "nothing was switched; see the message above")
    result = json.loads(lines[-1])
    _judge_smoke(result)
    return {name: r["status"] for name, r in result["artifacts"].items()}


def _judge_smoke(result: dict[str, Any]) -> None:
    mismatches = [_difference(name, d) for name, r in result["artifacts"].items() for d in r.get("differences", [])]
    if mismatches:
        raise SmokeTestError(
            "smoke test failed: this box computes differently from the build machine, so the accuracy sign-off "
            "does not describe what it would run:\n  " + "\n  ".join(mismatches),
            "nothing was switched. Compare this box's edgekit, llama-cpp-python/OpenVINO/ONNX Runtime versions and "
            "CPU with the manifest's; rebuild and validate for this runtime",
        )
    default = result["artifacts"].get(result.get("default_artifact") or "", {})
    if default.get("status") == "skipped":
        raise MissingDependencyError(f"the runtime of the default artifact ({default['reason']})", "runtime")


def _difference(artifact: str, d: dict[str, Any]) -> str:
    if d["what"] == "log-probabilities":
        got, allowed = d["got"], d["expected"]
        return (f"{artifact}, log-probabilities of the recorded tokens: this box is {got['mean_abs']:.3g} nats "
                f"from the build machine on average and {got['max_abs']:.3g} at most; the tolerance is "
                f"{allowed['mean_abs']:.3g} and {allowed['max_abs']:.3g} ({allowed['source']})")  # fmt: skip
    return f"{artifact}, {d['what']} of {d['text']!r}: build machine {d['expected']}, this box {d['got']}"


def _record(origin: dict[str, Any], checked: Checked, smoke: dict[str, Any]) -> dict[str, Any]:
    manifest = checked.manifest
    return {
        "name": manifest["name"],
        "release": int(manifest.get("release", 0)),
        "source": origin,
        "pack_sha256": origin.get("sha256"),
        "signed_by": str(Path(checked.signed_by).absolute()) if checked.signed_by else None,
        "installed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "smoke": smoke,
    }


def _commit(box: InstallRoot, partial: Path, slot: Path, record: dict[str, Any]) -> None:
    if slot.exists():  # a slot of this very content that is not current (rolled back from, or killed before switch)
        doomed = slot.with_name(f".{slot.name}.replaced.partial")
        os.replace(slot, doomed)
        shutil.rmtree(doomed)
    box.remember(slot, record)
    os.replace(partial, slot)


def cleanup_slots(box: InstallRoot, keep: int) -> list[str]:
    """Step 5, after the switch: slots beyond the `keep` most recent ones go."""
    return box.cleanup(keep)


def _describe(box: InstallRoot, slot: Path, before: Path | None) -> dict[str, Any]:
    return {"root": str(box.root), "slot": box.rel(slot), **slot_summary(slot),
            "previous": {"slot": box.rel(before), **slot_summary(before)} if before else None}  # fmt: skip
