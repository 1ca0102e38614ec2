"""The fetch task of a recipe's [model]: where the source is, and the hashes that make it content-addressed.

Local and pkg:// sources are hashed here (each file once, remembered by path, size, mtime and inode).
An hf:// source is pinned to the commit its revision names; a commit fixes every file, so the commit
is its key. When that commit is already in the local Hugging Face cache its files are checked here
against the hashes recorded the first time it was fetched, so a damaged cache stops the build before
anything is reused from it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from edgekit._util.hashing import sha256_json
from edgekit._util.versions import dist_version, package_version
from edgekit.errors import SourceError
from edgekit.plan.keys import key_inputs
from edgekit.plan.tasks import FetchTask, TokenizerSource
from edgekit.recipe.schema import ModelSection
from edgekit.sources import PICKLE_SUFFIXES, hub, resolve_pkg, synthetic
from edgekit.sources.files import source_file
from edgekit.sources.local import checkpoint_files, local_path, locate_local
from edgekit.sources.tokenizer import TOKENIZER_FILES
from edgekit.store.memo import remembered
from edgekit.store.records import SourceFile


def fetch_task(model: ModelSection, base_dir: Path, cache_root: Path) -> FetchTask:
    if synthetic.is_synthetic(model.source):
        return _synthetic_task(model, base_dir, cache_root)
    hub_source = model.source.startswith("hf://")
    task = _hub_task(model, cache_root) if hub_source else _local_task(model, base_dir, cache_root)
    tokenizer = tokenizer_source(model, base_dir, cache_root)
    return dataclasses.replace(task, tokenizer=tokenizer) if tokenizer else task


def _local_task(model: ModelSection, base_dir: Path, cache_root: Path) -> FetchTask:
    found = locate_local(model.source, base_dir, model.allow_pickle)
    base = found.path.parent if found.kind == "gguf" else found.path
    files = tuple(source_file(p, p.relative_to(base).as_posix(), cache_root) for p in found.files)
    converts = found.kind == "gguf" or any(f.path.endswith(PICKLE_SUFFIXES) for f in files)
    return FetchTask(
        uri=model.source,
        revision=None,
        files=files,
        allow_pickle=model.allow_pickle,
        transformers=_transformers() if converts else None,
        kind=found.kind,
        location=str(found.path),
        package=package_version(found.package) if found.package else None,
        reconstructed_from=_reconstructed_from(found.path, files[0], cache_root) if found.kind == "gguf" else None,
    )


def _synthetic_task(model: ModelSection, base_dir: Path, cache_root: Path) -> FetchTask:
    """Random weights: the key is the spec and the small files (config.json, tokenizer) written at planning time."""
    spec = synthetic.parse(model.source)
    tokenizer = tokenizer_source(model, base_dir, cache_root)
    default = resolve_pkg(synthetic.DEFAULT_TOKENIZER) if tokenizer is None else None
    origin = tokenizer.files if tokenizer else (source_file(default, "tokenizer", cache_root),) if default else ()
    inputs = {"spec": key_inputs(spec), "tokenizer": [f.to_dict() for f in origin], "transformers": _transformers()}
    head = cache_root / "synthetic-heads" / sha256_json(inputs)[:32]
    if not (head / "config.json").is_file():
        synthetic.write_head(spec, Path(tokenizer.location) if tokenizer else None, head)
    files = tuple(source_file(p, p.name, cache_root) for p in sorted(head.iterdir()) if p.is_file())
    return FetchTask(uri=model.source, revision=None, files=files, allow_pickle=False,
                     transformers=_transformers(), kind="synthetic", location=str(head), synthetic=spec)  # fmt: skip


def _reconstructed_from(gguf: Path, hashed: SourceFile, cache_root: Path) -> str:
    """ "GGUF Q4_1": the file type, read once per file (parsing a header with a vocabulary takes seconds)."""
    from edgekit.sources.gguf import describe_gguf

    described = remembered(cache_root, "gguf-headers", {"sha256": hashed.sha256}, lambda: describe_gguf(gguf))
    return f"GGUF {described['file_type']}"


def _hub_task(model: ModelSection, cache_root: Path) -> FetchTask:
    commit = hub.resolve_commit(model.source, model.revision)
    _check_local_snapshot(model, commit, cache_root)
    return FetchTask(
        uri=model.source,
        revision=commit,
        files=(),
        allow_pickle=model.allow_pickle,
        transformers=_transformers() if model.allow_pickle else None,
        allow_patterns=model.allow_patterns,
        kind="hf",
    )


def _check_local_snapshot(model: ModelSection, commit: str, cache_root: Path) -> None:
    """Files of `commit` already in the local Hugging Face cache must still have their first-fetch hashes."""
    from huggingface_hub import constants

    folder = Path(constants.HF_HUB_CACHE) / f"models--{hub.repo_id(model.source).replace('/', '--')}"
    snapshot = folder / "snapshots" / commit
    if not snapshot.is_dir() or (not list(snapshot.glob("*.safetensors")) and not model.allow_pickle):
        return
    chosen = checkpoint_files(snapshot, model.allow_pickle, model.source)
    files = tuple(source_file(p, p.relative_to(snapshot).as_posix(), cache_root) for p in chosen)
    hub.check_recorded_hashes(cache_root, model.source, commit, files)


def _transformers() -> str | None:
    found = dist_version("transformers")
    return f"transformers {found}" if found else None


def tokenizer_source(model: ModelSection, base_dir: Path, cache_root: Path) -> TokenizerSource | None:
    """`[model] tokenizer`: its files (an hf:// repository's at the pinned revision, or a folder's), hashed."""
    if model.tokenizer is None:
        return None
    if model.tokenizer.startswith("hf://"):
        folder = hub.download(model.tokenizer, model.tokenizer_revision, TOKENIZER_FILES)
        revision: str | None = folder.name  # snapshots/<commit sha>
    else:
        folder, revision = local_path(model.tokenizer, base_dir), None
    found = sorted(p for name in TOKENIZER_FILES if (p := folder / name).is_file())
    if not any(p.name in ("tokenizer.json", "tokenizer.model") for p in found):
        raise SourceError(
            f"[model] tokenizer {model.tokenizer}: no tokenizer.json or tokenizer.model in {folder}",
            "point it at the folder (or hf:// repository) that holds the model's original tokenizer files",
        )
    files = tuple(source_file(p, p.name, cache_root) for p in found)
    return TokenizerSource(model.tokenizer, revision, files, str(folder))
