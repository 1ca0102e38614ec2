"""What the gguf backend's progress steps count: tensors quantized, MiB converted.

llama.cpp's quantizer (`llama-quantize` and `llama_model_quantize` through the bindings alike) prints
`[  12/ 272] blk.0.attn_q.weight - [...], type = f16, …` as it finishes each tensor: the step's count,
read from its log as it streams. llama.cpp's converter logs every tensor's name at once, before it
writes any (they are lazy), so the conversion counts the MiB of its output file against what the
checkpoint's tensors take in F16 (F32 for 1-D ones, as the converter writes norms and biases).
"""

from __future__ import annotations

import json
import math
import re
import struct
from pathlib import Path

from edgekit.observe.tally import MIB

QUANTIZED_TENSOR = re.compile(r"^\[\s*(\d+)/\s*\d+\]")


def converted_mib(checkpoint: Path) -> int:
    """About how many MiB of tensor data the F16 conversion of a safetensors checkpoint writes (from the headers)."""
    total = 0
    for shard in sorted(checkpoint.glob("*.safetensors")):
        with open(shard, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        for name, info in header.items():
            if name != "__metadata__":
                shape = info["shape"]
                total += math.prod(shape) * (4 if len(shape) <= 1 else 2)
    return max(1, math.ceil(total / MIB))
