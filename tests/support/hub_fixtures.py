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


def save_random_llama(
    folder: Path, gguf_for_tokenizer: Path, *, hidden: int, layers: int, intermediate: int, heads: int,
    kv_heads: int, seed: int = 0,
) -> Path:  # fmt: skip
    """A random-weight Llama of any size (numpy normal(0, 0.02) in FP16, tied embeddings), SmolLM2's tokenizer.

    Tensors are drawn one at a time and written with `safetensors.numpy`, without torch: a 1B model takes
    about half a minute.
    """
    import numpy as np
    from safetensors.numpy import save_file
    from transformers import LlamaConfig

    from edgekit.sources.gguf import hf_tokenizer_from_gguf

    rng = np.random.default_rng(seed)
    vocab, head_dim = 49152, hidden // heads

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)

    tensors = {"model.embed_tokens.weight": normal(vocab, hidden), "model.norm.weight": np.ones(hidden, np.float16)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes = {"self_attn.q_proj": (heads * head_dim, hidden), "self_attn.k_proj": (kv_heads * head_dim, hidden),
                  "self_attn.v_proj": (kv_heads * head_dim, hidden), "self_attn.o_proj": (hidden, heads * head_dim),
                  "mlp.gate_proj": (intermediate, hidden), "mlp.up_proj": (intermediate, hidden),
                  "mlp.down_proj": (hidden, intermediate)}  # fmt: skip
        tensors.update({f"{p}{name}.weight": normal(*shape) for name, shape in shapes.items()})
        tensors.update(
            {f"{p}{n}.weight": np.ones(hidden, np.float16) for n in ("input_layernorm", "post_attention_layernorm")}
        )
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=8192, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
                         dtype="float16")  # fmt: skip
    config.architectures = ["LlamaForCausalLM"]
    config.save_pretrained(folder)
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
