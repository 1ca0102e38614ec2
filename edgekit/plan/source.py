"""The fetch task of a recipe's [model]: where the source is, and the hashes that make it content-addressed.

Local and pkg:// sources are hashed here (each file once, remembered by path, size, mtime and inode).
An hf:// source is pinned to the commit its revision names; a commit fixes every file, so the commit
is its key. When that commit is already in the local Hugging Face cache its files are checked here
against the hashes recorded the first time it was fetched, so a damaged cache stops the build before
anything is reused from it.
"""

from __future__ import annotations

from pathlib import Path

from edgekit.plan.tasks import FetchTask
from edgekit.recipe import ModelSection
from edgekit.sources import PICKLE_SUFFIXES, hub
from edgekit.sources.files import source_file
from edgekit.sources.local import checkpoint_files, locate_local
from edgekit.versions import dist_version, package_version


def fetch_task(model: ModelSection, base_dir: Path, cache_root: Path) -> FetchTask:
    if model.source.startswith("hf://"):
        return _hub_task(model, cache_root)
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
    )


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
