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

import numpy as np

from edgekit._util.gguf_file import libraries_share_readers, read_gguf
from edgekit._util.llama_vocab import llama_piece, llama_tokenize
from edgekit.errors import SourceError

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
def _llama_cpp_model(gguf_path: Path) -> Iterator[Any]:
    """llama.cpp's vocabulary-only model of a GGUF (no weights read, no context, no log lines), or None if it
    cannot load."""
    import llama_cpp
    from llama_cpp._logger import set_verbose

    set_verbose(False)
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(gguf_path).encode(), params)
    try:
        yield model or None
    finally:
        if model:
            llama_cpp.llama_model_free(model)


class LlamaCppTokenizer:
    """The GGUF's own tokenizer, as llama.cpp reads it: what every GGUF artifact of the file tokenizes with."""

    def __init__(self, model: Any) -> None:
        import llama_cpp

        self._llama = llama_cpp
        self._vocab = llama_cpp.llama_model_get_vocab(model)
        template = llama_cpp.llama_model_chat_template(model, None)
        self.chat_template: str | None = template.decode("utf-8") if template else None
        n_vocab = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        self.eog_ids = tuple(i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(self._vocab, i))

    def _special(self, value: int) -> int | None:
        return value if value >= 0 else None

    @property
    def bos_id(self) -> int | None:
        return self._special(int(self._llama.llama_vocab_bos(self._vocab)))

    @property
    def eos_id(self) -> int | None:
        return self._special(int(self._llama.llama_vocab_eos(self._vocab)))

    def tokenize(self, text: str) -> list[int]:
        """`text` as llama.cpp cuts it, special tokens parsed (as the Hugging Face tokenizer and the engine do)."""
        return llama_tokenize(self._llama, self._vocab, text.encode("utf-8"), special=True)

    def piece(self, token: int) -> bytes:
        """The bytes token `token` stands for (a special token's text included)."""
        return llama_piece(self._llama, self._vocab, token, special=True)

    def token_text(self, token: int) -> str:
        """The vocabulary's text of a token (e.g. '<|im_end|>')."""
        text = self._llama.llama_vocab_get_text(self._vocab, int(token))
        return text.decode("utf-8", errors="replace") if text else ""

    def tokenize_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Token ids and each token's [start, end) in `text`, in characters (as a Hugging Face tokenizer gives)."""
        ids = self.tokenize(text)
        return ids, char_offsets(text, [self.piece(t) for t in ids])


def char_offsets(text: str, pieces: list[bytes]) -> list[tuple[int, int]]:
    """Character spans of `pieces`, the bytes of consecutive tokens of `text`. A SentencePiece vocabulary that adds
    a space in front of the text gives a first piece with a space the text does not have; a token inside a
    multi-byte character spans the whole character."""
    data = text.encode("utf-8")
    joined = b"".join(pieces)
    skip = len(joined) - len(data)
    if joined[skip:] != data or skip not in (0, 1) or (skip and joined[:1] != b" "):
        raise SourceError(
            "llama.cpp's tokens of the eval text do not spell the text back (its vocabulary normalises it), so "
            "token positions in the text are unknown",
            "set [validation.cloze] enabled = false, or give a text the vocabulary keeps as it is",
        )
    char_of = np.repeat(np.arange(len(text) + 1), [len(c.encode("utf-8")) for c in text] + [1])
    ends = np.maximum(np.cumsum([len(p) for p in pieces], dtype=np.int64) - skip, 0)
    starts = np.concatenate([[0], ends[:-1]]) if len(pieces) else ends
    spans = []
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        spans.append((int(char_of[a]), int(char_of[b - 1]) + 1 if b > a else int(char_of[a])))
    return spans


@contextmanager
def llama_cpp_tokenizer(gguf_path: Path) -> Iterator[LlamaCppTokenizer]:
    """The GGUF's tokenizer, open while the block runs (a vocabulary-only load: a second or two)."""
    with _llama_cpp_model(gguf_path) as model:
        if model is None:
            raise SourceError(f"llama.cpp cannot load the vocabulary of {gguf_path}",
                              "check that the file is a complete GGUF that llama.cpp reads")  # fmt: skip
        yield LlamaCppTokenizer(model)


def llama_cpp_tokenize(gguf_path: Path, text: str) -> list[int]:
    """The GGUF's own tokenization of `text`, by llama.cpp, special tokens parsed as the HF tokenizer does."""
    with llama_cpp_tokenizer(gguf_path) as tokenizer:
        return tokenizer.tokenize(text)


def llama_cpp_reads(gguf_path: Path) -> str | None:
    """None when llama.cpp reads the GGUF's vocabulary (its architecture and tokenizer); else why not."""
    with _llama_cpp_model(gguf_path) as model:
        if model is not None:
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
