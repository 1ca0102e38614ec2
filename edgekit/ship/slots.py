"""An install root on the box: release slots, the `current` link, and the history that says what came before.

    ROOT/slots/NAME/RELEASE-SHA/        one complete bundle per slot (SHA: of its manifest.json), never edited
    ROOT/slots/NAME/.RELEASE-SHA.*.partial   a slot being unpacked; its installer holds its lock
    ROOT/current -> slots/NAME/…        what runs; switched by one rename of a symlink, then an fsync of ROOT
    ROOT/state.json                     each slot's install record and the history of switches
    ROOT/.lock                          one install or rollback at a time

The link is the truth about what runs: state.json is written after each switch, so a kill between the
two leaves a history whose last entry is the release before, which is what `previous` means anyway.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from edgekit._util.fsutil import abandoned, fsync_dir, lock_folder, write_bytes_atomic
from edgekit.errors import ExitCode, InstallError, IntegrityError
from edgekit.manifest import load_manifest

STATE = "state.json"
HISTORY_KEPT = 100


class RootBusyError(InstallError):
    exit_code = ExitCode.ENVIRONMENT


@dataclass(frozen=True)
class InstallRoot:
    root: Path

    @property
    def slots(self) -> Path:
        return self.root / "slots"

    @property
    def link(self) -> Path:
        return self.root / "current"

    def ensure(self) -> None:
        self.slots.mkdir(parents=True, exist_ok=True)
        for folder in (self.root, self.slots):
            os.chmod(folder, 0o755)  # the service's dynamic user reads the slots

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        try:
            with FileLock(str(self.root / ".lock"), timeout=0):
                yield
        except Timeout:
            raise RootBusyError(
                f"another install or rollback is running on {self.root}", "wait for it to finish, then try again"
            ) from None

    def slot_for(self, name: str, release: int, manifest_sha256: str) -> Path:
        return self.slots / name / f"{release}-{manifest_sha256[:12]}"

    def new_partial(self, slot: Path) -> tuple[Path, int]:
        """A locked temp folder beside `slot`, made readable by all (the slot it becomes is served)."""
        slot.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(slot.parent, 0o755)
        tmp = Path(tempfile.mkdtemp(dir=slot.parent, prefix=f".{slot.name}.", suffix=".partial"))
        os.chmod(tmp, 0o755)
        return tmp, lock_folder(tmp)

    def clean_abandoned(self) -> list[str]:
        """Remove what killed installs left: partial slots whose installer is gone, a half-made link."""
        removed = []
        for partial in sorted(self.slots.glob("*/.*.partial")):
            if abandoned(partial):
                shutil.rmtree(partial, ignore_errors=True)
                removed.append(self.rel(partial))
        for link in self.root.glob(".current.*.tmp"):
            link.unlink(missing_ok=True)
        return removed

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def current(self) -> Path | None:
        if not self.link.is_symlink():
            return None
        target = self.root / os.readlink(self.link)
        return target if target.is_dir() else None

    def switch(self, slot: Path) -> None:
        """Point `current` at `slot` in one atomic rename, and make the rename durable."""
        tmp = self.root / f".current.{os.getpid()}.tmp"
        tmp.unlink(missing_ok=True)
        os.symlink(self.rel(slot), tmp)
        os.replace(tmp, self.link)
        fsync_dir(self.root)

    def installed(self) -> list[Path]:
        return sorted(p for p in self.slots.glob("*/*") if p.is_dir() and not p.name.startswith("."))

    def state(self) -> dict[str, Any]:
        try:
            data = json.loads((self.root / STATE).read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
            data = {}
        data.setdefault("slots", {})
        data.setdefault("history", [])
        return data

    def save(self, state: dict[str, Any]) -> None:
        state["history"] = state["history"][-HISTORY_KEPT:]
        write_bytes_atomic(self.root / STATE, (json.dumps(state, indent=2) + "\n").encode(), mode=0o644)

    def remember(self, slot: Path, record: dict[str, Any]) -> None:
        state = self.state()
        state["slots"][self.rel(slot)] = record
        self.save(state)

    def record_switch(self, slot: Path, action: str, release: int) -> None:
        state = self.state()
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        state["history"].append({"slot": self.rel(slot), "release": release, "action": action, "at": at})
        self.save(state)

    def previous(self) -> Path | None:
        """The slot that was current before the current one (the most recent other one in the history)."""
        current = self.current()
        for entry in reversed(self.state()["history"]):
            slot = self.root / entry["slot"]
            if slot != current and slot.is_dir():
                return slot
        return None

    def cleanup(self, keep: int) -> list[str]:
        """Remove complete slots beyond the `keep` most recently current ones (current first, previous next)."""
        current = self.current()
        keepers = [current] if current else []
        for entry in reversed(self.state()["history"]):
            slot = self.root / entry["slot"]
            if len(keepers) >= keep:
                break
            if slot not in keepers and slot.is_dir():
                keepers.append(slot)
        removed = []
        for slot in self.installed():
            if slot not in keepers:
                # renamed first: a kill midway leaves a partial that the next install removes, never half a slot
                doomed = slot.with_name(f".{slot.name}.removed.partial")
                os.replace(slot, doomed)
                shutil.rmtree(doomed)
                removed.append(self.rel(slot))
        if removed:
            state = self.state()
            state["slots"] = {k: v for k, v in state["slots"].items() if k not in removed}
            self.save(state)
        for folder in self.slots.iterdir():
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        return removed


def slot_summary(slot: Path) -> dict[str, Any]:
    try:
        manifest = load_manifest(slot)
    except IntegrityError as exc:
        return {"problem": exc.message}
    return {
        "name": manifest.get("name"),
        "release": int(manifest.get("release", 0)),
        "size": sum(int(f.get("size", 0)) for f in manifest.get("files", [])),
        "verdicts": {a["name"]: a.get("verdict") for a in manifest.get("artifacts", [])},
    }
