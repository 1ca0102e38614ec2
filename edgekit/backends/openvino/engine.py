"""The OpenVINO engine: the stateful IR on an `ov.Core` CPU compiled model, tokenized by openvino-tokenizers.

Why not `openvino_genai.LLMPipeline`: it owns the generation loop (a prompt in, a streamer callback
out), so it cannot be stepped one token at a time across several sequences as `start/step/finish`
requires, and it exposes no logits — validation would then measure a different code path (GenAI
applies its own model transformations: logits slicing, and on CPU a paged-attention
continuous-batching backend) from the one serving requests. One path here serves both: an infer
request per prompt, whose model state *is* that sequence's KV cache, reset when the sequence finishes
(a served one keeps it for prefix reuse: `edgekit.runtime.engines.stepwise_serving`).
Streaming is `step()` itself; the chat template comes from the artifact folder (the same Jinja text
GenAI would apply).

Several sequences decode as the rows of one infer request: their states are read out
(`query_state`), left-padded into one batch and written back (only when the batch's membership
changes), and each step feeds one token per row, with per-row position ids, an attention mask of 0
over each row's padding and `beam_idx` = 0…rows-1 (the IR gathers its state rows by it).

Runtime properties (from runtime.toml): INFERENCE_NUM_THREADS = n_threads, PERFORMANCE_HINT =
LATENCY, NUM_STREAMS, ENABLE_CPU_PINNING, SCHEDULING_CORE_TYPE, INFERENCE_PRECISION_HINT, KV_CACHE_PRECISION,
DYNAMIC_QUANTIZATION_GROUP_SIZE, and the Core property ENABLE_MMAP = use_mmap. Unset ones keep the CPU plugin's
defaults (on a CPU with AVX512_BF16 or AMX that means bf16 inference; a u8 KV cache; activations quantized in
groups of 32 for compressed weights; the effective values are in `engine.properties`).

Those defaults make a token's logits depend on how it was computed: a decode step (one token a row) rounds
differently from a prompt chunk, so the logprobs `serve` reports for generated tokens differ from what
validation scored over the whole text (docs/box.md#logprobs-and-the-engines-numerics has the figures).
`inference_precision = "f32"`, `kv_cache_precision = "f32"` and `dynamic_quantization_group_size = 0` make
the two agree to float rounding, at about half the prompt speed.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import openvino as ov
import openvino_tokenizers  # noqa: F401  (registers the tokenizer operations with OpenVINO)

from edgekit.backends.folder_engine import FolderEngine
from edgekit.errors import EngineError
from edgekit.runtime.config import RuntimeConfig
from edgekit.runtime.engines.hf_files import HFFiles

MODEL_FILE = "openvino_model.xml"
TOKENIZER_FILE = "openvino_tokenizer.xml"
DETOKENIZER_FILE = "openvino_detokenizer.xml"
REQUIRED_INPUTS = ("input_ids", "attention_mask", "position_ids", "beam_idx")
REPORTED_PROPERTIES = ("INFERENCE_NUM_THREADS", "NUM_STREAMS", "PERFORMANCE_HINT", "ENABLE_CPU_PINNING",
                       "SCHEDULING_CORE_TYPE", "INFERENCE_PRECISION_HINT", "KV_CACHE_PRECISION",
                       "DYNAMIC_QUANTIZATION_GROUP_SIZE")  # fmt: skip


def compile_properties(
    n_threads: int,
    num_streams: int | None = None,
    cpu_pinning: bool | None = None,
    scheduling_core_type: str | None = None,
    inference_precision: str | None = None,
    kv_cache_precision: str | None = None,
    dynamic_quantization_group_size: int | None = None,
) -> dict[str, Any]:
    """CPU plugin properties for a RuntimeConfig; None leaves the plugin's default."""
    props: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": int(n_threads)}
    if num_streams is not None:
        props["NUM_STREAMS"] = int(num_streams)
    if cpu_pinning is not None:
        props["ENABLE_CPU_PINNING"] = bool(cpu_pinning)
    if scheduling_core_type is not None:
        props["SCHEDULING_CORE_TYPE"] = scheduling_core_type
    if inference_precision is not None:
        props["INFERENCE_PRECISION_HINT"] = inference_precision
    if kv_cache_precision is not None:
        props["KV_CACHE_PRECISION"] = kv_cache_precision
    if dynamic_quantization_group_size is not None:
        props["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = int(dynamic_quantization_group_size)
    return props


class OpenVINOEngine(FolderEngine):
    backend = "openvino"
    batched = True
    prefix_reuse = True
    files = (MODEL_FILE, TOKENIZER_FILE, DETOKENIZER_FILE)
    kind = "OpenVINO"

    def _load_model(self, config: RuntimeConfig) -> None:
        self._core = ov.Core()
        self._core.set_property({"ENABLE_MMAP": bool(config.use_mmap)})
        try:
            self._model = self._core.read_model(self.path / MODEL_FILE)
        except RuntimeError as exc:
            raise EngineError(
                f"OpenVINO could not read {self.path / MODEL_FILE}: {exc}", "run `edgekit verify`"
            ) from None
        names = {n for port in self._model.inputs for n in port.get_names()}
        missing = [n for n in REQUIRED_INPUTS if n not in names]
        if missing or not self._model.get_sinks():
            raise EngineError(
                f"{self.path / MODEL_FILE} is not a stateful text-generation IR (missing inputs {missing} or "
                "its KV-cache state)",
                "export with task text-generation-with-past (what edgekit's openvino backend does)",
            )
        self.n_vocab = int(self._model.output("logits").get_partial_shape()[-1].get_length())
        self._compile(config.n_threads)

    def _load_tokenizer(self) -> None:
        self._tokenizer = self._core.compile_model(self.path / TOKENIZER_FILE, "CPU")
        self._detokenizer = self._core.compile_model(self.path / DETOKENIZER_FILE, "CPU")
        self._detok_request = self._detokenizer.create_infer_request()
        self._read_vocabulary(
            HFFiles(self.path), lambda: frozenset(self._rt_int("eos_token_id")), lambda: self._rt_str("chat_template")
        )
        specials = sorted((t for t in self._special.values() if t), key=len, reverse=True)
        self._special_pattern = re.compile("|".join(re.escape(t) for t in specials)) if specials else None

    def _compile(self, n_threads: int) -> None:
        self.n_threads = self.n_threads_batch = int(n_threads)
        c = self._config
        props = compile_properties(
            n_threads,
            c.num_streams,
            c.cpu_pinning,
            c.scheduling_core_type,
            c.inference_precision,
            c.kv_cache_precision,
            c.dynamic_quantization_group_size,
        )
        try:
            self._compiled = self._core.compile_model(self._model, "CPU", props)
        except RuntimeError as exc:
            raise EngineError(
                f"OpenVINO could not compile {self.path / MODEL_FILE} for the CPU: {exc}",
                "check the OpenVINO properties in runtime.toml (num_streams, inference_precision, ...)",
            ) from None
        self.properties = {}
        for key in REPORTED_PROPERTIES:
            with contextlib.suppress(RuntimeError, TypeError):
                self.properties[key] = _shown(self._compiled.get_property(key))

    def _rt_str(self, key: str) -> str | None:
        model = self._tokenizer_model()
        return model.get_rt_info(key).astype(str) if model is not None and model.has_rt_info(key) else None

    def _rt_int(self, key: str) -> set[int]:
        value = self._rt_str(key)
        return {int(value)} if value is not None and value.lstrip("-").isdigit() else set()

    def _tokenizer_model(self) -> Any:
        return self._core.read_model(self.path / TOKENIZER_FILE)

    # --- slots: one infer request (and its model state) per sequence ------------------------------

    def _new_slot(self) -> Any:
        return self._compiled.create_infer_request()

    def _reset(self, slot: Any) -> None:
        slot.reset_state()

    def _infer(self, slot: Any, ids: np.ndarray, positions: np.ndarray, mask: np.ndarray) -> np.ndarray:
        slot.infer(
            {
                "input_ids": ids,
                "attention_mask": mask,
                "position_ids": positions,
                "beam_idx": np.arange(len(ids), dtype=np.int32),  # each row keeps its own state
            }
        )
        return slot.get_tensor("logits").data

    # --- batching and prefix reuse: the model state, read and written as ([batch, heads, time, dim]) ---

    def _snapshot(self, slot: Any) -> dict[str, np.ndarray]:
        return {state.name: np.array(state.state.data, copy=True) for state in slot.query_state()}

    def _restore(self, slot: Any, state: dict[str, np.ndarray]) -> None:
        for variable in slot.query_state():
            variable.state = ov.Tensor(np.ascontiguousarray(state[variable.name]))

    def _truncate(self, slot: Any, n: int) -> None:
        if n == 0:
            slot.reset_state()
            return
        for state in slot.query_state():
            kept = state.state.data[:, :, :n, :]
            state.state = ov.Tensor(np.ascontiguousarray(kept))

    # --- tokens -----------------------------------------------------------------------------------

    def tokenize(self, text: str, *, special: bool = False) -> list[int]:
        """Token ids of `text`; with special=False, special-token text in it stays plain text."""
        if not text:
            return []
        if special or self._special_pattern is None or not self._special_pattern.search(text):
            return self._encode(text)
        # openvino-tokenizers always parses special tokens: tokenize around them, and split each
        # occurrence so that it can never become its control token.
        ids: list[int] = []
        begin = 0
        for match in self._special_pattern.finditer(text):
            ids += self._encode(text[begin : match.start()])
            ids += self._encode(match.group()[:1]) + self._encode(match.group()[1:])
            begin = match.end()
        return ids + self._encode(text[begin:])

    def _encode(self, text: str) -> list[int]:
        if not text:
            return []
        result = self._tokenizer([text])
        return [int(i) for i in result[self._tokenizer.output("input_ids")][0]]

    def detokenize(self, ids: Sequence[int]) -> bytes:
        if len(ids) == 0:
            return b""
        self._detok_request.infer([ov.Tensor(np.asarray([list(ids)], dtype=np.int64))])
        return bytes(self._detok_request.get_output_tensor(0).bytes_data[0])

    def close(self) -> None:
        self._seqs.clear()
        self._drop_slots()
        self._compiled = self._tokenizer = self._detokenizer = self._detok_request = None


def _shown(value: Any) -> str:
    """'bf16' rather than "<Type: 'bfloat16'>", 'ANY_CORE' rather than 'SchedulingCoreType.ANY_CORE'."""
    if hasattr(value, "get_type_name"):
        return str(value.get_type_name())
    if hasattr(value, "name") and not isinstance(value, (str, int, bool)):
        return str(value.name)
    return str(value)


open_engine = OpenVINOEngine.open
