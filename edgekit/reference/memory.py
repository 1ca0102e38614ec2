"""How much memory the reference will take, whole or streamed, and which of the two to run.

The whole-model reference holds every parameter in the reference dtype (4 bytes each in FP32, the CPU
default); the streamed one (`edgekit.reference.streamed`) holds one decoder layer, or the embedding or head when
that is larger. Both add what one window's forward pass and its scoring take (logits, the float64
log-softmax behind the stored top-k, a layer's activations) and some slack. The sizes come from the
checkpoint's config.json and its safetensors headers, read without loading a tensor. `choose` compares
them with what this process may still allocate (`edgekit.observe.memwatch.available_memory`) before the
reference starts, and stops with the numbers and the ways out rather than letting the kernel kill the
build halfway.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.errors import ReferenceMemoryError
from edgekit.observe.memwatch import Available
from edgekit.sources.weights import CheckpointTensors

GIB = 2**30
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
# Beyond the weights and one window: allocator slack, the tokenizer, Python objects. (torch and transformers are
# imported before the check, so what they take is already out of the available memory.)
RUNTIME_BYTES = 256 * 2**20
# `auto` takes the whole model only with this much of the available memory to spare (other processes move).
AUTO_MARGIN = 0.8
MODES = ("auto", "stream", "full")


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs of a checkpoint, from config.json and the safetensors headers."""

    params: int
    largest_layer: int  # parameters of the largest decoder layer
    largest_outside: int  # of the largest tensor outside the layers (embedding, head)
    vocab: int
    hidden: int
    intermediate: int
    heads: int

    @classmethod
    def of(cls, folder: Path) -> ModelShape:
        config = json.loads((folder / "config.json").read_text())
        config = config.get("text_config", config)
        tensors = CheckpointTensors(folder)
        outside = tensors.outside_layers()
        hidden = int(config.get("hidden_size", 0))
        return cls(
            params=sum(t.numel for t in tensors.tensors.values()),
            largest_layer=max(tensors.layer_numels().values(), default=0),
            largest_outside=max(outside.values(), default=0),
            vocab=int(config.get("vocab_size", 0)),
            hidden=hidden,
            intermediate=int(config.get("intermediate_size", 4 * hidden)),
            heads=int(config.get("num_attention_heads", 1)),
        )


def activation_bytes(shape: ModelShape, context: int, scored: int, dtype_bytes: int) -> int:
    """One window: its logits (and their float32 copy), scoring in float64, one layer's activations."""
    logits = context * shape.vocab * (dtype_bytes + 4)
    scoring = scored * shape.vocab * 8 * 4
    layer = context * (3 * shape.intermediate + 8 * shape.hidden) * 4 + shape.heads * context * context * 4
    return logits + scoring + layer


@dataclass(frozen=True)
class MemoryPlan:
    requested: str
    mode: str  # "full" or "stream"
    full_bytes: int
    stream_bytes: int
    available: Available

    def as_record(self) -> dict[str, Any]:
        mib = 2**20
        return {
            "requested": self.requested,
            "mode": self.mode,
            "estimate_full_mib": round(self.full_bytes / mib),
            "estimate_stream_mib": round(self.stream_bytes / mib),
            "available_mib": round(self.available.bytes / mib),
            "limited_by": self.available.limited_by,
        }


def estimates(shape: ModelShape, dtypes: list[str], context: int, scored: int) -> dict[str, int]:
    """Peak bytes the reference adds to this process, whole and streamed, for these dtypes (run one after the
    other: the reference's, then the noise floor's)."""
    widest = max(DTYPE_BYTES[d] for d in dtypes)
    common = activation_bytes(shape, context, scored, widest) + RUNTIME_BYTES
    return {
        "full": shape.params * widest + common,
        "stream": max(shape.largest_layer, shape.largest_outside) * widest + common,
    }


def choose(
    requested: str, device: str, needs: dict[str, int], available: Available, streamable: str | None
) -> MemoryPlan:
    """The mode to run: `requested`, or for `auto` the whole model when it fits with room to spare (and always on a
    GPU, or when the model cannot be streamed), else one layer at a time.

    `streamable` is None when the model can be streamed, else why not. Raises ReferenceMemoryError when the mode
    cannot run or does not fit in what this process may allocate.
    """
    if requested == "auto":
        whole = device != "cpu" or streamable is not None or needs["full"] <= AUTO_MARGIN * available.bytes
        mode = "full" if whole else "stream"
    else:
        mode = requested
    plan = MemoryPlan(requested, mode, needs["full"], needs["stream"], available)
    sizes = (mode, plan.full_bytes, plan.stream_bytes, available.bytes, available.limited_by)
    if mode == "stream" and streamable is not None:
        raise ReferenceMemoryError(*sizes, reason=f"this model cannot be streamed: {streamable}")
    if device == "cpu" and needs[mode] > available.bytes:
        raise ReferenceMemoryError(*sizes, can_stream=streamable is None)
    return plan
