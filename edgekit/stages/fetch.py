"""fetch: the source model as a Hugging Face checkpoint folder that the reference and every backend start from.

A local folder is linked or copied (and its hashes checked again after the copy); an hf:// snapshot is
downloaded through huggingface_hub's cache and checked against the hashes recorded the first time
its commit was fetched; a GGUF file is dequantized into an FP16 safetensors checkpoint, and the
checkpoint says plainly that it was reconstructed from a quantized file. Pickle weights (allowed by
the recipe) are converted to safetensors here, so no later stage ever unpickles.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from edgekit._util.fsutil import ensure_free_space
from edgekit._util.hashing import sha256_file
from edgekit.errors import SourceError, StageError
from edgekit.plan.tasks import FetchTask, TokenizerSource
from edgekit.sources import PICKLE_SUFFIXES, hub, synthetic
from edgekit.sources.files import source_file
from edgekit.sources.local import checkpoint_files
from edgekit.sources.synthetic import SyntheticSpec
from edgekit.sources.tokenizer import TOKENIZER_FILES
from edgekit.stages.context import StageContext
from edgekit.store.cache import CacheEntry
from edgekit.store.records import Checkpoint, SourceFile
from edgekit.store.results import FetchResult

CHECKPOINT_DIR = "checkpoint"


def run(task: FetchTask, ctx: StageContext, out: Path) -> FetchResult:
    result = _materialise(task, ctx, out / CHECKPOINT_DIR)
    if task.tokenizer is not None:
        _replace_tokenizer(task.tokenizer, out / CHECKPOINT_DIR)
        result.notes = [*result.notes, f"tokenizer files from {task.tokenizer.uri} ([model] tokenizer)"]
    return result


def _replace_tokenizer(tokenizer: TokenizerSource, checkpoint: Path) -> None:
    """The model's original tokenizer files instead of the source's (or the one rebuilt from a GGUF)."""
    for name in TOKENIZER_FILES:
        (checkpoint / name).unlink(missing_ok=True)
    for f in tokenizer.files:
        _link_or_copy(Path(tokenizer.location) / f.path, checkpoint / f.path)
        if sha256_file(checkpoint / f.path) != f.sha256:
            raise SourceError(f"{tokenizer.uri}: {f.path} changed while it was being copied", "run the build again")


def _materialise(task: FetchTask, ctx: StageContext, out: Path) -> FetchResult:
    if task.synthetic is not None:
        with ctx.progress.task(f"fetch  write random weights ({task.synthetic.name}, seed {task.synthetic.seed})"):
            return _materialise_synthetic(task, task.synthetic, out)
    if task.kind == "gguf":
        with ctx.progress.task(f"fetch  dequantize {Path(task.location).name} into a checkpoint"):
            return _materialise_gguf(Path(task.location), out)
    folder, files = Path(task.location), task.files
    if task.kind == "hf":
        with ctx.progress.task(f"fetch  hf://{hub.repo_id(task.uri)}@{task.revision}"):
            folder = hub.snapshot(task.uri, str(task.revision), task.allow_patterns, task.allow_pickle)
        chosen = checkpoint_files(folder, task.allow_pickle, task.uri)
        files = tuple(source_file(p, p.relative_to(folder).as_posix(), ctx.env.cache_root) for p in chosen)
        hub.check_recorded_hashes(ctx.env.cache_root, task.uri, str(task.revision), files)
    with ctx.progress.task(f"fetch  materialise checkpoint ({task.kind})"):
        notes = _materialise_folder(task.uri, folder, files, out)
    return FetchResult(notes=notes, files=list(files))


def checkpoint_folder(task: FetchTask, entry: CacheEntry | None) -> Path:
    """The checkpoint folder a finished fetch entry holds (a stage that reads the weights runs after the fetch)."""
    assert entry is not None, f"fetch {task.key} has no entry: a stage that reads its checkpoint ran before it"
    return entry.path / CHECKPOINT_DIR


def checkpoint(task: FetchTask, entry: CacheEntry | None) -> Checkpoint:
    """The checkpoint a finished fetch entry holds; without one (nothing needed the dequantized checkpoint of a
    GGUF source), the source's provenance alone, with no folder."""
    result = FetchResult.of(entry) if entry is not None else FetchResult(reconstructed_from=task.reconstructed_from)
    package = (f"source package: {task.package}",) if task.package else ()
    return Checkpoint(
        path=entry.path / CHECKPOINT_DIR if entry is not None else None,
        key=task.key,
        uri=task.uri,
        revision=task.revision,
        files=tuple(result.files or ()) or task.files,
        reconstructed_from=result.reconstructed_from,
        notes=tuple(result.notes) + package,
        speed_only=task.synthetic is not None,
    )


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


def _materialise_folder(uri: str, folder: Path, files: tuple[SourceFile, ...], out: Path) -> list[str]:
    """Link or copy `files` of `folder` into `out`, checked against their hashes; what was done to them."""
    ensure_free_space(out.parent, sum(f.size for f in files))
    for f in files:
        _link_or_copy(folder / f.path, out / f.path)
    notes: list[str] = []
    if any(f.path.endswith(PICKLE_SUFFIXES) for f in files):
        from edgekit.sources.pickle import pickle_to_safetensors

        pickle_to_safetensors(out)
        notes.append("pickle weights were converted to safetensors (allow_pickle = true)")
    for f in files:  # hashes of what we copied must be what we hashed
        if f.path.endswith(PICKLE_SUFFIXES):
            continue
        if sha256_file(out / f.path) != f.sha256:
            raise SourceError(f"{uri}: {f.path} changed while it was being copied", "run the build again")
    return notes


def _materialise_synthetic(task: FetchTask, spec: SyntheticSpec, out: Path) -> FetchResult:
    """The small files written at planning time, and the weights drawn from the spec's seed."""
    _materialise_folder(task.uri, Path(task.location), task.files, out)
    vocab = int(json.loads((out / "config.json").read_text(encoding="utf-8"))["vocab_size"])
    ensure_free_space(out, 2 * spec.parameters(vocab))
    written = synthetic.write_weights(spec, vocab, out)
    return FetchResult(notes=[synthetic.describe(spec, vocab)], synthetic=written, files=list(task.files))


def _materialise_gguf(path: Path, out: Path) -> FetchResult:
    """Dequantize a GGUF into an FP16 safetensors checkpoint with transformers' GGUF loader."""
    from edgekit.sources.gguf import gguf_to_hf_checkpoint

    ensure_free_space(out.parent, path.stat().st_size * 5)
    try:
        described = gguf_to_hf_checkpoint(path, out)
    except (ValueError, KeyError, RuntimeError) as exc:
        raise StageError(
            "fetch",
            f"transformers could not load {path.name}: {exc}",
            "this GGUF architecture may not be supported by transformers' GGUF loader; use a Hugging Face "
            "checkpoint as the source instead",
        ) from exc
    return FetchResult(
        reconstructed_from=f"GGUF {described['file_type']}",
        notes=[
            f"the reference and every artifact start from weights dequantized from a {described['file_type']} "
            "GGUF file; accuracy is measured against that reconstruction, not against the original "
            "full-precision model"
        ],
        gguf=described,
    )
