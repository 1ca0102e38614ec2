"""Hugging Face Hub sources: `hf://ORG/NAME` at a pinned revision, through huggingface_hub's own cache.

Planning resolves the revision to its commit (a commit pins every file, so it is the fetch key) and
downloads nothing but small files; the fetch stage downloads the snapshot and checks its files
against the hashes recorded the first time that commit was fetched (trust on first use).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from edgekit._util.fsutil import write_json_atomic
from edgekit.errors import RecipeProblem, SourceError
from edgekit.sources.local import pick_weights
from edgekit.store.records import SourceFile

SAFE_PATTERNS = ("*.json", "*.safetensors", "tokenizer.model", "*.tiktoken", "*.txt", "*.jinja")
PICKLE_PATTERNS = ("*.bin", "*.pt", "*.pth")
SMALL_PATTERNS = ("*.json", "tokenizer.model", "*.tiktoken", "*.txt", "*.jinja")  # everything but weights


def repo_id(uri: str) -> str:
    return uri.removeprefix("hf://")


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")


def check_hub_source(uri: str, revision: str | None, allow_pickle: bool, custom_patterns: bool) -> RecipeProblem | None:
    """Without downloading weights: does the pinned revision exist (in the local HF cache when offline)?

    Only definite answers are problems; an unreachable Hub is left to the fetch stage.
    """
    from huggingface_hub import HfApi, constants, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    repo = repo_id(uri)
    if constants.HF_HUB_OFFLINE:
        try:
            snapshot = Path(snapshot_download(repo, revision=revision, local_files_only=True))
        except LocalEntryNotFoundError:
            return RecipeProblem(
                "model.revision",
                f"revision {revision!r} of hf://{repo} is not in the local Hugging Face cache "
                f"({constants.HF_HUB_CACHE}) and HF_HUB_OFFLINE is set; download it once on a connected machine "
                "(`hf download`), point HF_HUB_CACHE at a cache that has it, or unset HF_HUB_OFFLINE",
            )
        if not list(snapshot.glob("*.safetensors")) and not custom_patterns:
            try:
                pick_weights(snapshot, allow_pickle, uri)
            except SourceError as exc:
                return RecipeProblem("model.source", exc.message + (f"; {exc.hint}" if exc.hint else ""))
        return None
    try:
        HfApi().repo_info(repo, revision=revision, timeout=10)
    except RevisionNotFoundError:
        return RecipeProblem("model.revision", f"revision {revision!r} does not exist in hf://{repo}")
    except (RepositoryNotFoundError, GatedRepoError) as exc:
        return RecipeProblem(
            "model.source",
            f"hf://{repo}: repository not found or not accessible ({type(exc).__name__}); check the name, "
            "and for a gated model log in with `hf auth login` or set HF_TOKEN",
        )
    except Exception:  # offline, Hub down, proxy: the fetch stage reports it with the local-cache fallback
        return None
    return None


def download(uri: str, revision: str | None, patterns: Sequence[str]) -> Path:
    """snapshot_download with edgekit's errors; honours HF_HUB_OFFLINE (then only the local cache)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    repo = repo_id(uri)
    try:
        return Path(snapshot_download(repo, revision=revision, allow_patterns=list(patterns)))
    except RevisionNotFoundError:
        raise SourceError(f"hf://{repo}: revision {revision!r} does not exist", "fix [model] revision") from None
    except (RepositoryNotFoundError, GatedRepoError) as exc:
        raise SourceError(
            f"hf://{repo}: repository not found or not accessible ({type(exc).__name__})",
            "check the name; for a gated model log in with `hf auth login` or set HF_TOKEN",
        ) from None
    except LocalEntryNotFoundError:
        raise SourceError(
            f"hf://{repo}: revision {revision!r} is not in the local Hugging Face cache and the "
            "Hub cannot be reached" + (" (HF_HUB_OFFLINE is set)" if offline() else ""),
            "download it once on a connected machine (edgekit build with network access, or "
            "`hf download`), or unset HF_HUB_OFFLINE",
        ) from None


def resolve_commit(uri: str, revision: str | None) -> str:
    """The commit a branch, tag or sha names, downloading only the small files (config, tokenizer)."""
    return download(uri, revision, SMALL_PATTERNS).name  # snapshots/<commit sha>


def snapshot(uri: str, commit: str, allow_patterns: Sequence[str] | None, allow_pickle: bool) -> Path:
    """The snapshot folder with the weights: safetensors, or pickles when allowed and nothing else exists."""
    patterns = list(allow_patterns or SAFE_PATTERNS)
    folder = download(uri, commit, patterns)
    if not list(folder.glob("*.safetensors")) and allow_patterns is None:
        if not allow_pickle:
            raise SourceError(
                f"{uri}@{commit}: no safetensors weights; the repository only has pickle checkpoints, which can "
                "run code when loaded",
                "set [model] allow_pickle = true if you trust this repository",
            )
        folder = download(uri, commit, [*patterns, *PICKLE_PATTERNS])
    return folder


def check_recorded_hashes(cache_root: Path, uri: str, commit: str, files: tuple[SourceFile, ...]) -> None:
    """Trust on first use: a revision's file hashes are recorded once; later fetches must match them."""
    repo = repo_id(uri)
    record = cache_root / "sources" / "hf" / repo.replace("/", "--") / f"{commit}.json"
    current = {f.path: f.sha256 for f in files}
    if record.is_file():
        known: dict[str, str] = json.loads(record.read_text())
        changed = sorted(p for p in current if p in known and known[p] != current[p])
        if changed:
            raise SourceError(
                f"hf://{repo}@{commit}: {', '.join(changed)} do not match the hashes recorded when this "
                f"revision was first fetched ({record})",
                "the local Hugging Face cache was modified or corrupted; delete this revision from the HF cache "
                "and download it again. If you are sure the new files are right, delete the record file",
            )
        current = {**known, **current}
    write_json_atomic(record, current)
