"""Read back what an OpenVINO IR really holds: each weight's stored precision, group size, bytes.

NNCF writes a compressed weight as a small decompression subgraph in front of its consumer:

    Constant(u8|i8|u4|i4 [out, in] or [out, groups, group_size]) → Convert → (Subtract zero point)
        → Multiply scale → (Reshape) → (Convert) → MatMul / Gather

and an uncompressed one as Constant(f16) → Convert(f32) → MatMul. A weight is a Constant whose data
reaches a MatMul or Gather through such nodes (entering Subtract/Multiply as their data input);
its scale and zero point are the constants those nodes take as their other input, and their bytes
are counted with the weight's, as GGUF block scales are. Like the GGUF tensor types, this is read
from the artifact itself, not from what the compression was asked to do.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WEIGHT_USERS = frozenset({"MatMul", "Gather", "Convolution"})
DECOMPRESSION = frozenset({"Convert", "Subtract", "Multiply", "Reshape", "Transpose"})
MIN_WEIGHT_ELEMENTS = 4096  # smaller constants (rotary tables, masks) are not weights
INTEGER_BITS = {"u8": "int8", "i8": "int8", "u4": "int4", "i4": "int4", "u2": "int2", "u1": "int1"}


@dataclass(frozen=True)
class Weight:
    name: str
    label: str  # "int8_asym", "int4_sym_g32", "f16", ...
    element_type: str  # as stored: "u8", "u4", "f16", ...
    params: int
    bytes: int  # the weight plus its scales and zero points
    users: frozenset[str]  # op types that read it: {"Gather"} for an embedding table, {"Gather", "MatMul"} tied
    group_size: int | None  # None: per output channel (or not quantized)


def _source_constant(output: Any) -> Any | None:
    node = output.get_node()
    while node.get_type_name() == "Convert":
        node = node.input_value(0).get_node()
    return node if node.get_type_name() == "Constant" else None


def _follow(constant: Any) -> tuple[set[str], list[Any], bool]:
    """(op types reached, scale/zero-point constants on the way, whether a zero point was subtracted)."""
    users: set[str] = set()
    aux: list[Any] = []
    asym = False
    queue = deque([constant])
    seen: set[int] = set()
    while queue:
        node = queue.popleft()
        for target in node.output(0).get_target_inputs():
            user = target.get_node()
            kind, port = user.get_type_name(), target.get_index()
            if kind in WEIGHT_USERS:
                users.add(kind)
                continue
            if kind not in DECOMPRESSION or (kind in ("Subtract", "Multiply", "Reshape", "Transpose") and port != 0):
                continue
            if id(user) in seen:
                continue
            seen.add(id(user))
            if kind in ("Subtract", "Multiply"):
                other = _source_constant(user.input_value(1))
                if other is not None:
                    aux.append(other)
                    asym = asym or kind == "Subtract"
            queue.append(user)
    return users, aux, asym


def read_weights(model: Any) -> list[Weight]:
    """Every weight of an `openvino.Model`, in graph order."""
    weights = []
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Constant":
            continue
        shape = [int(d) for d in op.get_output_shape(0)]
        params = 1
        for d in shape:
            params *= d
        if len(shape) < 2 or params < MIN_WEIGHT_ELEMENTS:
            continue
        users, aux, asym = _follow(op)
        if not users:
            continue
        element = op.get_element_type().get_type_name()
        group = shape[-1] if element in INTEGER_BITS and len(shape) == 3 else None
        if element in INTEGER_BITS:
            label = f"{INTEGER_BITS[element]}_{'asym' if asym else 'sym'}" + (f"_g{group}" if group else "")
        else:
            label = element
        size = int(op.get_byte_size()) + sum(int(a.get_byte_size()) for a in aux)
        weights.append(Weight(op.get_friendly_name(), label, element, params, size, frozenset(users), group))
    return weights


def summarise(weights: list[Weight]) -> dict[str, Any]:
    """The manifest details: a precision histogram like GGUF's `tensor_types`, bits per weight, bytes per token."""
    types: dict[str, dict[str, int]] = {}
    total_params = total_bytes = per_token = 0
    groups: dict[str, int] = {}
    tied = False
    for w in weights:
        entry = types.setdefault(w.label, {"tensors": 0, "params": 0, "bytes": 0})
        entry["tensors"] += 1
        entry["params"] += w.params
        entry["bytes"] += w.bytes
        total_params += w.params
        total_bytes += w.bytes
        # A Gather-only table (token embeddings) is read one row per token; anything a MatMul reads, in full.
        if w.users != {"Gather"}:
            per_token += w.bytes
        if {"Gather", "MatMul"} <= w.users:
            tied = True
        if w.group_size:
            groups[str(w.group_size)] = groups.get(str(w.group_size), 0) + 1
    return {
        "tensor_types": dict(sorted(types.items(), key=lambda kv: -kv[1]["params"])),
        "tensor_count": len(weights),
        "params": total_params,
        "tensor_bytes": total_bytes,
        "bits_per_weight": round(8 * total_bytes / total_params, 3) if total_params else None,
        "bytes_per_token": per_token,
        "tied_embeddings": tied,
        "group_sizes": groups,
    }


def ir_summary(xml: Path) -> dict[str, Any]:
    import openvino as ov

    return summarise(read_weights(ov.Core().read_model(xml)))
