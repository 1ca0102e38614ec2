"""What a GGUF's tensors cost per generated token, read from its header with `gguf` (the box has it).

Tensors read once per generated token: every weight matrix except the token embedding table (a lookup
reads one row). With tied embeddings the table doubles as the output projection and is then read in full.
"""

from __future__ import annotations

import functools
from pathlib import Path

from edgekit._util.gguf_file import read_gguf

EMBEDDING_TENSOR = "token_embd.weight"
OUTPUT_TENSOR = "output.weight"


def matmul_params_by_type(path: Path) -> dict[str, int]:
    """{tensor type: weights multiplied per generated token}: every matrix but the embedding lookup (which is
    the output projection too when tied). Norms and biases are vectors and left out: a rounding error here."""
    stat = path.stat()  # the bench asks twice per file (which kernels to time, then the roof): read it once
    return dict(_matmul_params(path.resolve(), stat.st_size, stat.st_mtime_ns))


@functools.cache
def _matmul_params(path: Path, size: int, mtime_ns: int) -> dict[str, int]:
    reader = read_gguf(path)
    tied = OUTPUT_TENSOR not in {t.name for t in reader.tensors}
    out: dict[str, int] = {}
    for tensor in reader.tensors:
        if sum(int(d) > 1 for d in tensor.shape) < 2 or (tensor.name == EMBEDDING_TENSOR and not tied):
            continue
        out[tensor.tensor_type.name] = out.get(tensor.tensor_type.name, 0) + int(tensor.n_elements)
    return out
