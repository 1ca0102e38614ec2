"""A tiny Llama model in a local Hugging Face Hub cache, made in the test (no network)."""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path


def save_tiny_llama(folder: Path, gguf_for_tokenizer: Path, seed: int = 0, initializer_range: float = 0.02) -> Path:
    """A 2-layer random Llama with SmolLM2's tokenizer (which llama.cpp's converter recognises).

    With the default weights (std 0.02) its next-token distributions are nearly uniform and every scheme scores a
    mean KLD near 1e-5; a larger `initializer_range` makes sharper distributions that quantization visibly moves.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from edgekit.sources.gguf import hf_tokenizer_from_gguf

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        initializer_range=initializer_range,
    )
    model = LlamaForCausalLM(config).to(torch.float16)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    hf_tokenizer_from_gguf(gguf_for_tokenizer).save_pretrained(folder)
    return folder


def publish_to_local_hub(model_dir: Path, hub_cache: Path, repo_id: str, branch: str = "main") -> str:
    """Lay `model_dir` out as huggingface_hub's cache does (blobs, snapshots/<commit>, refs/<branch>)."""
    commit = secrets.token_hex(20)
    repo = hub_cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True)
    for path in sorted(model_dir.rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / path.relative_to(model_dir)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / branch).write_text(commit)
    return commit
