"""Pickle checkpoints, when the recipe allows them: loaded once, weights-only, and kept as safetensors."""

from __future__ import annotations

from pathlib import Path

from edgekit.errors import SourceError
from edgekit.sources import PICKLE_SUFFIXES


def pickle_to_safetensors(folder: Path) -> None:
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
