"""Read what a GGUF file really contains: tensor types, sizes, bits per weight, metadata.

Shared by the build side (manifest details) and the runtime (bytes read per token for the
roofline), so it depends on `gguf` and numpy only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit._util.gguf_file import read_gguf
from edgekit.runtime.gguf_tensors import EMBEDDING_TENSOR, OUTPUT_TENSOR


def tensor_summary(path: Path) -> dict[str, Any]:
    reader = read_gguf(path)
    types: dict[str, dict[str, int]] = {}
    total_bytes = total_params = 0
    per_token_bytes = 0
    names = {t.name for t in reader.tensors}
    tied = OUTPUT_TENSOR not in names
    embedding_bytes = 0
    for tensor in reader.tensors:
        name = tensor.tensor_type.name
        entry = types.setdefault(name, {"tensors": 0, "params": 0, "bytes": 0})
        entry["tensors"] += 1
        entry["params"] += int(tensor.n_elements)
        entry["bytes"] += int(tensor.n_bytes)
        total_bytes += int(tensor.n_bytes)
        total_params += int(tensor.n_elements)
        if tensor.name == EMBEDDING_TENSOR:
            embedding_bytes = int(tensor.n_bytes)
            if tied:
                per_token_bytes += int(tensor.n_bytes)
        else:
            per_token_bytes += int(tensor.n_bytes)

    def field(key: str) -> Any:
        value = reader.fields.get(key)
        return value.contents() if value is not None else None

    return {
        "tensor_types": dict(sorted(types.items(), key=lambda kv: -kv[1]["params"])),
        "tensor_count": len(reader.tensors),
        "params": total_params,
        "tensor_bytes": total_bytes,
        "bits_per_weight": round(8 * total_bytes / total_params, 3) if total_params else None,
        "bytes_per_token": per_token_bytes,
        "tied_embeddings": tied,
        "embedding_bytes": embedding_bytes,
        "file_type": field("general.file_type"),
        "architecture": field("general.architecture"),
    }


def metadata(path: Path, prefix: str | tuple[str, ...] = "") -> dict[str, Any]:
    reader = read_gguf(path)
    out: dict[str, Any] = {}
    for name, value in reader.fields.items():
        if not name.startswith(prefix) or name.startswith("GGUF.") or name.startswith("tokenizer.ggml.t"):
            continue
        try:
            out[name] = value.contents()
        except Exception:  # an exotic field type: not worth failing a summary for
            out[name] = "?"
    return out
