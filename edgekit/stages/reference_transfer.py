"""Carry a reference from the machine that computed it (a GPU box) to build boxes: export, then import.

An exported entry keeps its entry.json: the key and the inputs it was computed from. Importing checks
that the key is the hash of those inputs (the file was not edited), that every file has its recorded
size and sha256, and that the inputs are the ones this recipe plans — checkpoint, text, context
length, device and dtype, tokenizer, library versions — or stops (exit 2) naming each one that differs,
rather than silently computing another reference for hours.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from edgekit._util.hashing import sha256_file
from edgekit.errors import ReferenceExportError, ReferenceMismatchError, UsageError
from edgekit.plan.keys import task_key
from edgekit.plan.task_base import Stage
from edgekit.plan.tasks import ReferenceTask
from edgekit.store.cache import ENTRY_FILE, CacheEntry, StageCache

STAGE = Stage.REFERENCE
# Reference inputs as a person names them (longest matching prefix of the input's path wins).
INPUT_NAMES = {
    "checkpoint": "checkpoint",
    "eval.text_sha256": "text",
    "eval.ids": "tokenizer",
    "eval.tokenizer": "tokenizer",
    "eval.context_length": "context length",
    "eval.max_tokens": "max_tokens",
    "eval.scored": "scored token range",
    "eval.cloze": "cloze settings",
    "eval.cloze_items": "cloze items",
    "eval.tasks": "tasks",
    "eval.prompts": "prompts",
    "device": "device",
    "dtype": "dtype",
    "noise_floor_dtype": "noise-floor dtype",
    "versions.torch": "torch version",
    "versions.transformers": "transformers version",
}


def export_reference(entry: CacheEntry, dest: Path) -> Path:
    """Copy a reference cache entry so another machine can import it into its cache."""
    target = dest / f"{STAGE}-{entry.key}"
    shutil.copytree(entry.path, target)
    return target


def import_reference(src: Path, cache: StageCache, task: ReferenceTask) -> CacheEntry:
    """Put the exported entry `src` into `cache` as the reference `task` plans, or say why it is not that one."""
    meta = _entry_meta(src)
    if meta["key"] != task.key:
        raise ReferenceMismatchError(src, differences(meta["inputs"], task.inputs()))
    _check_files(src, meta)
    final = cache.entry_path(STAGE, meta["key"])
    if not final.exists():
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f".{final.name}.pid{os.getpid()}.partial")
        shutil.copytree(src, tmp)
        os.replace(tmp, final)
    found = cache.lookup(STAGE, meta["key"])
    if found is None:
        raise UsageError(f"{src} could not be imported into {final} (file sizes differ after copying)")
    return found


def _entry_meta(src: Path) -> dict[str, Any]:
    try:
        meta = json.loads((src / ENTRY_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        meta = {}
    if not isinstance(meta, dict) or meta.get("stage") != STAGE or "key" not in meta:
        raise ReferenceExportError(src, f"not an exported reference (no {ENTRY_FILE} of a reference entry)")
    inputs = meta.get("inputs")
    if not isinstance(inputs, dict) or task_key(STAGE, inputs) != meta["key"]:
        raise ReferenceExportError(src, f"the key in its {ENTRY_FILE} is not the hash of the inputs recorded beside "
                                   "it (edited, damaged, or exported with another cache format)")  # fmt: skip
    return meta


def _check_files(src: Path, meta: dict[str, Any]) -> None:
    damaged = []
    for record in meta.get("files", []):
        path = src / record["path"]
        if not path.is_file() or path.stat().st_size != record["size"] or sha256_file(path) != record["sha256"]:
            damaged.append(record["path"])
    if damaged:
        raise ReferenceExportError(src, f"damaged: {', '.join(damaged[:5])} differ from the sizes and sha256 in its "
                                   f"{ENTRY_FILE}")  # fmt: skip


def differences(recorded: dict[str, Any], planned: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(input, imported value, this recipe's value) for every named input that differs."""
    a, b = _flatten(recorded), _flatten(planned)
    found: dict[str, tuple[str, str]] = {}
    for path in sorted(a.keys() | b.keys()):
        if a.get(path) != b.get(path):
            name = _name(path)
            found.setdefault(name, (_shown(a.get(path)), _shown(b.get(path))))
    if "text" in found:  # other text, other token ids: the tokenizer is not what differs
        found.pop("tokenizer", None)
    return [(name, old, new) for name, (old, new) in found.items()]


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def _name(path: str) -> str:
    matches = [p for p in INPUT_NAMES if path == p or path.startswith(p + ".")]
    return INPUT_NAMES[max(matches, key=len)] if matches else path


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    text = json.dumps(value) if isinstance(value, list | dict) else str(value)
    return text[:12] + "…" if len(text) > 16 else text
