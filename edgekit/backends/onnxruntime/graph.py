"""Read back what an ONNX model really holds: which weights are quantized, to what, and which ops run them.

ONNX Runtime's dynamic quantizer replaces `MatMul(x, W)` with `DynamicQuantizeLinear(x)` →
`MatMulInteger(x_q, W_quantized)` → rescale, storing `W_quantized` (int8) with `W_scale` and
`W_zero_point`; a quantized embedding table becomes `Gather(W_quantized)` → `DequantizeLinear`.
Weights it left alone stay float initializers read by `MatMul`. The histogram below is read from
the saved graph, like GGUF's tensor types.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

WEIGHT_USERS = {"MatMul": 1, "MatMulInteger": 1, "Gather": 0, "DequantizeLinear": 0}  # op → weight input index
MIN_WEIGHT_ELEMENTS = 4096
TYPE_NAMES = {1: "f32", 10: "f16", 16: "bf16", 3: "int8", 2: "uint8", 22: "int4", 21: "uint4"}


def _itemsize(data_type: int) -> float:
    from onnx.helper import tensor_dtype_to_np_dtype

    if data_type in (21, 22):  # 4-bit types pack two per byte
        return 0.5
    return float(tensor_dtype_to_np_dtype(data_type).itemsize)


def _size(init: Any) -> tuple[int, int]:
    n = 1
    for d in init.dims:
        n *= int(d)
    return n, int(n * _itemsize(init.data_type))


def graph_summary(model: Any) -> dict[str, Any]:
    """The manifest details of a loaded `onnx.ModelProto` (external data need not be loaded)."""
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    users: dict[str, set[str]] = {}
    for node in graph.node:
        index = WEIGHT_USERS.get(node.op_type)
        if index is None or len(node.input) <= index or node.input[index] not in inits:
            continue
        kind = node.op_type
        if kind == "DequantizeLinear":  # a quantized Gather table: DequantizeLinear(Gather(table)) or the reverse
            kind = "Gather"
        users.setdefault(node.input[index], set()).add(kind)
    # Gather(table_quantized) feeds DequantizeLinear with the table's scale: the Gather reads the table itself.
    types: dict[str, dict[str, int]] = {}
    total_params = total_bytes = per_token = 0
    for name, kinds in users.items():
        init = inits[name]
        params, nbytes = _size(init)
        if len(init.dims) < 2 or params < MIN_WEIGHT_ELEMENTS:
            continue
        label = TYPE_NAMES.get(init.data_type, f"type{init.data_type}")
        base = name.removesuffix("_quantized")
        for suffix in ("_scale", "_zero_point"):
            aux = inits.get(base + suffix)
            if aux is not None:
                nbytes += _size(aux)[1]
                if suffix == "_scale" and _size(aux)[0] > 1:
                    label += "_per_channel"
        entry = types.setdefault(label, {"tensors": 0, "params": 0, "bytes": 0})
        entry["tensors"] += 1
        entry["params"] += params
        entry["bytes"] += nbytes
        total_params += params
        total_bytes += nbytes
        if kinds != {"Gather"}:
            per_token += nbytes
    ops = Counter(n.op_type for n in graph.node)
    float_matmuls = [n.name for n in graph.node if n.op_type == "MatMul" and len(n.input) > 1 and n.input[1] in users]
    return {
        "tensor_types": dict(sorted(types.items(), key=lambda kv: -kv[1]["params"])),
        "tensor_count": sum(t["tensors"] for t in types.values()),
        "params": total_params,
        "tensor_bytes": total_bytes,
        "bits_per_weight": round(8 * total_bytes / total_params, 3) if total_params else None,
        "bytes_per_token": per_token,
        "ops": {
            "MatMulInteger (int8 weights)": ops.get("MatMulInteger", 0),
            "MatMul (float weights)": len(float_matmuls),
            "DynamicQuantizeLinear": ops.get("DynamicQuantizeLinear", 0),
            "DequantizeLinear": ops.get("DequantizeLinear", 0),
        },
        "float_matmuls": float_matmuls,
    }


def onnx_summary(path: Path) -> dict[str, Any]:
    import onnx

    return graph_summary(onnx.load(str(path), load_external_data=False))
