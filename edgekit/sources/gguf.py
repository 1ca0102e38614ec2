"""A GGUF file as a source: dequantize it into a Hugging Face FP16 safetensors checkpoint.

transformers loads GGUF weights (dequantizing them) and rebuilds a tokenizer from the GGUF
vocabulary, but refuses `save_pretrained` on such a model, and its rebuilt tokenizer carries
Llama-SentencePiece defaults (adds BOS, a byte-fallback decoder, a copy of the GGUF as
`tokenizer.model`). We rebuild a clean model from the config and a tokenizer that follows the
GGUF's own metadata (BOS/EOS ids, add_bos, chat template), so that llama.cpp's converter
recognises it and the tokenization check downstream compares like with like.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from edgekit._util.gguf_file import libraries_share_readers, read_gguf

FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 32: "BF16",
}  # fmt: skip


def gguf_field_reader(path: Path) -> Callable[..., Any]:
    """field(key, default=None) → the value of a GGUF metadata key."""
    reader = read_gguf(path)

    def field(key: str, default: Any = None) -> Any:
        value = reader.fields.get(key)
        return value.contents() if value is not None else default

    return field


def describe_gguf(path: Path) -> dict[str, Any]:
    field = gguf_field_reader(path)
    file_type = field("general.file_type")
    return {
        "architecture": field("general.architecture"),
        "name": field("general.name"),
        "file_type": FILE_TYPES.get(file_type, f"type {file_type}"),
        "tokenizer_model": field("tokenizer.ggml.model"),
        "tokenizer_pre": field("tokenizer.ggml.pre"),
    }


def gguf_to_hf_checkpoint(gguf_path: Path, out: Path) -> dict[str, Any]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    info = describe_gguf(gguf_path)
    folder, name = gguf_path.parent, gguf_path.name
    with libraries_share_readers():
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
        config = AutoConfig.from_pretrained(folder, gguf_file=name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    follow_llama_cpp(config, gguf_field_reader(gguf_path))
    config.dtype = torch.float16
    model = type(loaded)(config)
    model.load_state_dict(loaded.state_dict())
    model = model.to(torch.float16)  # type: ignore[arg-type]  # transformers types .to()'s wrapper as taking the model
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)

    hf_tokenizer_from_gguf(gguf_path).save_pretrained(out)
    return info


def follow_llama_cpp(config: Any, field: Callable[..., Any]) -> None:
    """Settings llama.cpp reads from a GGUF (or derives, when a key is absent) that transformers' GGUF loader
    drops: the reconstructed model must compute what the GGUF means, or the reference is another model."""
    arch = field("general.architecture")
    if arch in ("gemma2", "gemma3"):
        for key in ("final_logit_softcapping", "attn_logit_softcapping"):
            if (value := field(f"{arch}.{key}")) is not None:
                setattr(config, key, float(value))
    if arch == "gemma3":
        # llama.cpp scales queries by 1/sqrt(head_dim) (hidden/heads for the 62-layer 27B), and takes the
        # sliding-window pattern from the file or, without one, every sixth layer full.
        heads, hidden = config.num_attention_heads, config.hidden_size
        config.query_pre_attn_scalar = hidden // heads if config.num_hidden_layers == 62 else config.head_dim
        pattern = field(f"{arch}.attention.sliding_window_pattern")
        layers = range(config.num_hidden_layers)
        if isinstance(pattern, list):
            config.layer_types = ["sliding_attention" if p else "full_attention" for p in pattern]
        else:
            every = int(pattern or 6)
            config.layer_types = ["sliding_attention" if (i % every) < every - 1 else "full_attention" for i in layers]


def hf_tokenizer_from_gguf(gguf_path: Path) -> Any:
    """A transformers fast tokenizer that follows the GGUF's own tokenizer metadata."""
    from transformers import AutoTokenizer

    field = gguf_field_reader(gguf_path)
    with libraries_share_readers():
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    return _clean_tokenizer(tokenizer, field, field("tokenizer.ggml.model"))


def _clean_tokenizer(tokenizer: Any, field: Any, tokenizer_model: str | None) -> Any:
    from tokenizers import decoders, processors
    from transformers import PreTrainedTokenizerFast

    tokens: list[str] = field("tokenizer.ggml.tokens")
    backend = tokenizer.backend_tokenizer
    add_bos = bool(field("tokenizer.ggml.add_bos_token", tokenizer_model == "llama"))

    def token(key: str) -> str | None:
        index = field(key)
        return tokens[index] if index is not None and 0 <= index < len(tokens) else None

    bos = token("tokenizer.ggml.bos_token_id")
    if tokenizer_model == "gpt2":
        backend.decoder = decoders.ByteLevel()
        backend.post_processor = processors.ByteLevel(trim_offsets=False)
    if add_bos and bos is not None:
        single = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[
            (bos, tokens.index(bos))
        ])  # fmt: skip
        backend.post_processor = (
            processors.Sequence([processors.ByteLevel(trim_offsets=False), single])
            if tokenizer_model == "gpt2"
            else single
        )
    elif tokenizer_model != "gpt2":
        backend.post_processor = processors.TemplateProcessing(single="$A", pair="$A $B")
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=bos,
        eos_token=token("tokenizer.ggml.eos_token_id"),
        unk_token=token("tokenizer.ggml.unknown_token_id"),
        pad_token=token("tokenizer.ggml.padding_token_id"),
        chat_template=field("tokenizer.chat_template"),
        clean_up_tokenization_spaces=False,
        add_bos_token=add_bos,
    )


@contextmanager
def _llama_cpp_vocabulary(gguf_path: Path) -> Iterator[Any]:
    """llama.cpp's vocabulary of a GGUF (no weights read, no context, no log lines), or None if it cannot load."""
    import llama_cpp
    from llama_cpp._logger import set_verbose

    set_verbose(False)
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(gguf_path).encode(), params)
    try:
        yield llama_cpp.llama_model_get_vocab(model) if model else None
    finally:
        if model:
            llama_cpp.llama_model_free(model)


def llama_cpp_tokenize(gguf_path: Path, text: str) -> list[int]:
    """The GGUF's own tokenization of `text`, by llama.cpp, special tokens parsed as the HF tokenizer does."""
    import llama_cpp

    data = text.encode("utf-8")
    with _llama_cpp_vocabulary(gguf_path) as vocab:
        if vocab is None:
            raise ValueError(f"llama.cpp cannot load {gguf_path}")
        buf = (llama_cpp.llama_token * (len(data) + 8))()
        n = llama_cpp.llama_tokenize(vocab, data, len(data), buf, len(buf), False, True)
        return list(buf[:n])


def llama_cpp_reads(gguf_path: Path) -> str | None:
    """None when llama.cpp reads the GGUF's vocabulary (its architecture and tokenizer); else why not."""
    with _llama_cpp_vocabulary(gguf_path) as vocab:
        if vocab is not None:
            return None
    return f"llama.cpp cannot load the {describe_gguf(gguf_path)['architecture']} GGUF's vocabulary"


def transformers_model_type(gguf_path: Path) -> str | None:
    """The model type transformers reads from a GGUF header, or None when its GGUF loader cannot read it."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    architecture = str(describe_gguf(gguf_path)["architecture"])
    if architecture not in GGUF_SUPPORTED_ARCHITECTURES:
        return None
    from transformers import AutoConfig

    with libraries_share_readers():
        return str(AutoConfig.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name).model_type)
