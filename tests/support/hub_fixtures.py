"""A tiny Llama model in a local Hugging Face Hub cache, made in the test (no network)."""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path
from typing import Any


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
    kv_heads: int, seed: int = 0, tied: bool = True, shard_bytes: int | None = None,
) -> Path:  # fmt: skip
    """A random-weight Llama of any size (numpy normal(0, 0.02) in FP16), SmolLM2's tokenizer.

    Tensors are drawn one at a time and written with `safetensors.numpy`, without torch: a 1B model takes
    about half a minute. `tied=False` adds an output head (`lm_head`, as Mistral-7B has); `shard_bytes` splits
    the weights into shards of about that size with an index, as the Hub's large checkpoints are, and holds
    one shard in memory at a time.
    """
    from transformers import LlamaConfig

    from edgekit.sources.gguf import hf_tokenizer_from_gguf

    vocab = 49152
    shapes = _llama_shapes(vocab, hidden, layers, intermediate, heads, kv_heads, tied)
    folder.mkdir(parents=True, exist_ok=True)
    _write_shards(folder, shapes, seed, shard_bytes)
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=8192, tie_word_embeddings=tied, bos_token_id=1, eos_token_id=2,
                         dtype="float16")  # fmt: skip
    config.architectures = ["LlamaForCausalLM"]
    config.save_pretrained(folder)
    hf_tokenizer_from_gguf(gguf_for_tokenizer).save_pretrained(folder)
    return folder


def _llama_shapes(
    vocab: int, hidden: int, layers: int, intermediate: int, heads: int, kv_heads: int, tied: bool
) -> dict[str, tuple[int, ...]]:
    """Every tensor's name and shape, in checkpoint order; norms are (hidden,)."""
    head_dim = hidden // heads
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({f"{p}self_attn.q_proj.weight": (heads * head_dim, hidden),
                       f"{p}self_attn.k_proj.weight": (kv_heads * head_dim, hidden),
                       f"{p}self_attn.v_proj.weight": (kv_heads * head_dim, hidden),
                       f"{p}self_attn.o_proj.weight": (hidden, heads * head_dim),
                       f"{p}mlp.gate_proj.weight": (intermediate, hidden),
                       f"{p}mlp.up_proj.weight": (intermediate, hidden),
                       f"{p}mlp.down_proj.weight": (hidden, intermediate),
                       f"{p}input_layernorm.weight": (hidden,),
                       f"{p}post_attention_layernorm.weight": (hidden,)})  # fmt: skip
    shapes["model.norm.weight"] = (hidden,)
    if not tied:
        shapes["lm_head.weight"] = (vocab, hidden)
    return shapes


def _write_shards(folder: Path, shapes: dict[str, tuple[int, ...]], seed: int, shard_bytes: int | None) -> None:
    import json

    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    shards: list[list[str]] = [[]]
    size = 0
    for name, shape in shapes.items():
        nbytes = 2 * int(np.prod(shape))
        if shard_bytes and shards[-1] and size + nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    files = ["model.safetensors"] if len(shards) == 1 else [
        f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))
    ]  # fmt: skip
    for file, names in zip(files, shards, strict=True):
        tensors = {n: _random_tensor(rng, shapes[n]) for n in names}
        save_file(tensors, str(folder / file), metadata={"format": "pt"})
        del tensors
    if len(files) > 1:
        total = sum(2 * int(np.prod(s)) for s in shapes.values())
        weight_map = {n: f for f, names in zip(files, shards, strict=True) for n in names}
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def _random_tensor(rng: Any, shape: tuple[int, ...]) -> Any:
    import numpy as np

    if len(shape) == 1:
        return np.ones(shape, np.float16)
    return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)


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
