"""Tiny random-weight models of five architectures, each with a real tokenizer of its family trained here.

Every model is a few MB: hidden size 64, two layers (six for Gemma 3's sliding-window pattern),
grouped-query attention, a vocabulary of about a thousand tokens trained on the bundled public-domain
text. Each exercises what is special about its
architecture: tied embeddings and linear RoPE scaling (llama), attention biases with untied embeddings
(qwen2, with a byte-level BPE tokenizer trained with `tokenizers`), sliding-window and full layers, a
query scale and final-logit soft-capping (gemma3_text), fused projections (phi3) and a plain
SentencePiece BPE Llama-family model (mistral).

`make_model(arch, folder)` writes a Hugging Face folder; tests/support/hub_fixtures.py lays a folder out as a
local Hub cache; `to_gguf(folder, out)` converts it with llama.cpp's own converter.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TEXT = Path(__file__).resolve().parents[2] / "edgekit" / "data" / "botchan.txt"
VOCAB = 1000
SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "max_position_embeddings": 1024}  # fmt: skip
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class Arch:
    model_type: str
    tokenizer: str  # "spm-bpe", "spm-unigram" or "byte-bpe"
    config: dict[str, Any] = field(default_factory=dict)
    # What makes the architecture itself (the matrix in docs/models.md lists these).
    special: str = ""
    specials: tuple[str, ...] = ("<|im_start|>", "<|im_end|>")  # control tokens of the family's chat format


ARCHES: dict[str, Arch] = {
    "llama": Arch(
        "llama",
        "spm-bpe",
        {"tie_word_embeddings": True, "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
        "tied embeddings, GQA, linear RoPE scaling",
    ),
    "qwen2": Arch("qwen2", "byte-bpe", {"tie_word_embeddings": False}, "attention biases, untied embeddings, GQA"),
    # Six layers: Gemma 3's pattern of five sliding-window layers then a full one (llama.cpp assumes it).
    "gemma3_text": Arch(
        "gemma3_text",
        "spm-bpe",
        {
            "num_hidden_layers": 6,
            "head_dim": 16,
            "query_pre_attn_scalar": 16,
            "sliding_window": 16,
            "final_logit_softcapping": 30.0,
            "tie_word_embeddings": True,
        },
        "sliding-window and full layers, query scale, final-logit soft-capping, no space prefix",
    ),
    # llama.cpp's Phi-3 vocabulary sets attributes on <|endoftext|>: the family's tokens must be there.
    "phi3": Arch(
        "phi3",
        "spm-bpe",
        {"tie_word_embeddings": False},
        "fused qkv and gate-up projections",
        ("<|endoftext|>", "<|user|>", "<|assistant|>", "<|end|>", "<|system|>"),
    ),
    "mistral": Arch(
        "mistral", "spm-bpe", {"tie_word_embeddings": False, "sliding_window": None}, "untied embeddings, GQA"
    ),
}


def train_sentencepiece(folder: Path, kind: str, specials: tuple[str, ...]) -> Path:
    import sentencepiece as spm

    folder.mkdir(parents=True, exist_ok=True)
    prefix = folder / "spm"
    spm.SentencePieceTrainer.train(
        input=str(TEXT), model_prefix=str(prefix), vocab_size=VOCAB, model_type=kind, byte_fallback=True,
        character_coverage=1.0, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2,
        user_defined_symbols=list(specials),
    )  # fmt: skip
    return prefix.with_suffix(".model")


def hf_tokenizer(arch: Arch, work: Path) -> Any:
    from transformers import GemmaTokenizerFast, LlamaTokenizerFast

    if arch.tokenizer == "byte-bpe":
        return _byte_level_bpe()
    model = train_sentencepiece(work, "unigram" if arch.tokenizer == "spm-unigram" else "bpe", arch.specials)
    if arch.model_type.startswith("gemma"):  # Gemma's tokenizer adds no space in front of the text; Llama's does
        tokenizer = GemmaTokenizerFast(vocab_file=str(model), add_bos_token=True, add_eos_token=False)
    else:
        tokenizer = LlamaTokenizerFast(vocab_file=str(model), legacy=False, add_prefix_space=True,
                                       add_bos_token=True, add_eos_token=False)  # fmt: skip
        if "<|endoftext|>" in arch.specials:  # Phi-3 pads with it
            tokenizer.pad_token = "<|endoftext|>"
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _byte_level_bpe() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import Qwen2TokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tok.train([str(TEXT)], trainer)
    return Qwen2TokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                              bos_token=None, unk_token=None, chat_template=CHAT_TEMPLATE)  # fmt: skip


def make_model(name: str | Arch, folder: Path, seed: int = 0) -> Path:
    """A random-weight FP16 checkpoint of architecture `name` (of the zoo, or one given) with its trained tokenizer,
    in `folder`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    arch = ARCHES[name] if isinstance(name, str) else name
    tokenizer = hf_tokenizer(arch, folder.parent / f"{folder.name}-tokenizer")
    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
           "pad_token_id": tokenizer.pad_token_id}  # fmt: skip
    config = AutoConfig.for_model(arch.model_type, vocab_size=len(tokenizer), **{**SHAPE, **arch.config, **ids})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).to(torch.float16)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def to_gguf(folder: Path, out: Path, outtype: str = "q8_0") -> Path:
    """The checkpoint as a GGUF file, written by llama.cpp's converter (what users download)."""
    from edgekit.toolchain import get_converter

    converter = get_converter()
    command = [sys.executable, str(converter.script), str(folder), "--outfile", str(out), "--outtype", outtype]
    proc = subprocess.run(command, capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin"})
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return out
