"""The ONNX Runtime engine: an `InferenceSession` over the exported decoder with past key values.

The model (optimum's text-generation-with-past export) takes `past_key_values.N.key/value` and
returns `present.N.key/value`; each sequence keeps its own past arrays in numpy and feeds them back
at the next step. Several sequences decode as the rows of one call (batched past arrays, left
padding hidden by the attention mask, per-row position ids: `edgekit.runtime.engines.stepwise`).
Tokenization uses `tokenizer.json` with the `tokenizers` library (no transformers).

Dynamic INT8 quantizes activations with one scale per tensor, computed at run time over every token
of the call. Many LLMs put a huge activation on the first position (an "attention sink": SmolLM2's
layer 11 MLP input peaks at 2,000× the median token's), which would set the scale for a whole
prompt chunk and wipe out the other tokens' precision. So the first token of a sequence is always
prefilled on its own (`first_chunk = 1`), for `logits()` (validation) and `start()` (serving) alike;
on a float model this changes nothing but one extra tiny call. For the same reason a batched decode
step, whose call holds one token of each sequence, quantizes their activations with one scale: a
sequence's tokens can differ slightly from decoding it alone (as its logits differ between prompt
chunkings); validation measures chunks of n_batch tokens, a harder case than 4 rows.

Session options (from runtime.toml): intra_op_num_threads = n_threads, inter_op_num_threads,
execution_mode (sequential | parallel), enable_cpu_mem_arena (memory_arena) and
`session.use_env_allocators` (env_allocators: one arena shared by every session in the process).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from edgekit.backends.folder_engine import FolderEngine
from edgekit.errors import EngineError
from edgekit.runtime.config import RuntimeConfig
from edgekit.runtime.engines.hf_files import HFFiles, token_bytes_table

MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
_NUMPY_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}
_env_allocator_registered = False


def session_options(
    n_threads: int,
    inter_op_threads: int | None = None,
    execution_mode: str | None = None,
    memory_arena: bool | None = None,
    env_allocators: bool | None = None,
) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(n_threads)
    options.inter_op_num_threads = int(inter_op_threads or 1)
    options.execution_mode = (
        ort.ExecutionMode.ORT_PARALLEL if execution_mode == "parallel" else ort.ExecutionMode.ORT_SEQUENTIAL
    )
    if memory_arena is not None:
        options.enable_cpu_mem_arena = bool(memory_arena)
    if env_allocators:
        _register_env_allocator()
        options.add_session_config_entry("session.use_env_allocators", "1")
    options.log_severity_level = 3  # errors only: ORT warns about every unused initializer otherwise
    return options


def _register_env_allocator() -> None:
    """One shared CPU arena for every session of this process (what `session.use_env_allocators` uses)."""
    global _env_allocator_registered
    if _env_allocator_registered:
        return
    info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, -1, -1, -1))
    _env_allocator_registered = True


class _Past:
    """One sequence's KV cache: the past arrays the session returned last."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] | None = None


class ONNXRuntimeEngine(FolderEngine):
    backend = "onnxruntime"
    first_chunk = 1
    batched = True
    prefix_reuse = True
    files = (MODEL_FILE, TOKENIZER_FILE)
    kind = "ONNX"

    def _load_model(self, config: RuntimeConfig) -> None:
        self._compile(config.n_threads)
        inputs = {i.name: i for i in self._session.get_inputs()}
        self._past_names = sorted((n for n in inputs if n.startswith("past_key_values.")), key=_layer_order)
        if "input_ids" not in inputs or "attention_mask" not in inputs or not self._past_names:
            raise EngineError(
                f"{self.path / MODEL_FILE} is not a decoder with past key values (inputs: {', '.join(inputs)})",
                "export with task text-generation-with-past (what edgekit's onnxruntime backend does)",
            )
        self._has_position_ids = "position_ids" in inputs
        outputs = [o.name for o in self._session.get_outputs()]
        self._outputs = ["logits"] + [n.replace("past_key_values.", "present.", 1) for n in self._past_names]
        if any(n not in outputs for n in self._outputs):
            raise EngineError(f"{self.path / MODEL_FILE} lacks present.* outputs matching its past inputs")
        first = inputs[self._past_names[0]]
        shape = first.shape  # [batch, kv_heads, past_length, head_dim]
        if len(shape) != 4 or not all(isinstance(d, int) for d in (shape[1], shape[3])):
            raise EngineError(f"{self.path / MODEL_FILE}: unexpected past key/value shape {shape}")
        self._empty_past = np.zeros((1, shape[1], 0, shape[3]), dtype=_NUMPY_TYPES.get(first.type, np.float32))
        logits_shape = self._session.get_outputs()[outputs.index("logits")].shape
        static = logits_shape[-1]
        vocab = static if isinstance(static, int) else HFFiles(self.path).config.get("vocab_size")
        if not isinstance(vocab, int):
            raise EngineError(f"{self.path}: cannot tell the vocabulary size (no static logits dim, no config.json)")
        self.n_vocab = vocab

    def _load_tokenizer(self) -> None:
        self._tokenizer = Tokenizer.from_file(str(self.path / TOKENIZER_FILE))
        self._bytes = token_bytes_table(self.path / TOKENIZER_FILE, max(self.n_vocab, self._tokenizer.get_vocab_size()))
        self._read_vocabulary(HFFiles(self.path))

    def _compile(self, n_threads: int) -> None:
        """A session with `n_threads` intra-op threads."""
        self.n_threads = self.n_threads_batch = int(n_threads)
        c = self._config
        options = session_options(n_threads, c.inter_op_threads, c.execution_mode, c.memory_arena, c.env_allocators)
        try:
            self._session = ort.InferenceSession(
                str(self.path / MODEL_FILE), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own exception types (Fail, InvalidGraph, ...)
            raise EngineError(
                f"ONNX Runtime could not load {self.path / MODEL_FILE}: {exc}", "run `edgekit verify` on the bundle"
            ) from None
        self.properties = {
            "intra_op_num_threads": str(options.intra_op_num_threads),
            "inter_op_num_threads": str(options.inter_op_num_threads),
            "execution_mode": str(options.execution_mode).rsplit(".", 1)[-1],
            "enable_cpu_mem_arena": str(options.enable_cpu_mem_arena),
            "use_env_allocators": str(bool(c.env_allocators)),
        }

    # --- slots: the past key/value arrays of each sequence ----------------------------------------

    def _new_slot(self) -> _Past:
        return _Past()

    def _reset(self, slot: _Past) -> None:
        slot.arrays = None

    def _infer(self, slot: _Past, ids: np.ndarray, positions: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feed: dict[str, np.ndarray] = {"input_ids": ids, "attention_mask": mask}
        if self._has_position_ids:
            feed["position_ids"] = positions
        past = slot.arrays
        if past is None:
            feed.update(dict.fromkeys(self._past_names, np.repeat(self._empty_past, len(ids), axis=0)))
        else:
            feed.update({name: past[name] for name in self._past_names})
        try:
            results = self._session.run(self._outputs, feed)
        except Exception as exc:
            raise EngineError(f"ONNX Runtime failed to run the model: {exc}", "set EDGEKIT_DEBUG=1") from None
        slot.arrays = dict(zip(self._past_names, results[1:], strict=True))
        return results[0]

    # --- batching and prefix reuse: past arrays are never written in place (the session returns new ones at
    # every call), so a cut is a view and a copy is a reference ---

    def _truncate(self, slot: _Past, n: int) -> None:
        if n == 0 or slot.arrays is None:
            slot.arrays = None
            return
        slot.arrays = {name: past[:, :, :n, :] for name, past in slot.arrays.items()}

    def _snapshot(self, slot: _Past) -> dict[str, np.ndarray]:
        return dict(slot.arrays) if slot.arrays is not None else {n: self._empty_past for n in self._past_names}

    def _restore(self, slot: _Past, state: dict[str, np.ndarray]) -> None:
        slot.arrays = dict(state)

    # --- tokens -----------------------------------------------------------------------------------

    def tokenize(self, text: str, *, special: bool = False) -> list[int]:
        """Token ids of `text`; with special=False, special-token text in it stays plain text."""
        if not text:
            return []
        self._tokenizer.encode_special_tokens = not special
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def detokenize(self, ids: Sequence[int]) -> bytes:
        table = self._bytes
        return b"".join(table[i] if 0 <= i < len(table) else b"" for i in (int(t) for t in ids))

    def close(self) -> None:
        self._seqs.clear()
        self._drop_slots()
        with contextlib.suppress(AttributeError):
            del self._session


def _layer_order(name: str) -> tuple[int, str]:
    parts = name.split(".")
    return (int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else 0, name)


open_engine = ONNXRuntimeEngine.open
