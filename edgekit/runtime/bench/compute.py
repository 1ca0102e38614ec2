"""The compute roof: how fast this CPU multiplies weights by a vector, with llama.cpp's own kernels.

Decode is a matrix-vector product per weight matrix. When the weights come from memory, bandwidth
bounds it (the bandwidth roof); when they are already in cache, the dot-product rate does. This probe
measures that rate with ggml (the library llama-cpp-python ships), through its C API: a weight matrix
small enough to stay in the caches (1 MiB or less), multiplied by one activation vector, many times
per graph, with `n` threads. Two kernels:

    fp16   F16 weights × F16 activations (ggml's float path: F16C conversion and FMA on x86)
    int8   Q8_0 weights × Q8_0 activations (ggml's int8 dot products: AVX2/AVX512-VNNI on x86)

The rate is operations per second (one multiply-add = 2 operations). A model's compute roof is
1 ÷ Σ(operations per token of each weight type ÷ its rate): float weights at the fp16 rate, quantized
ones at the int8 rate (K-quants unpack 4- and 6-bit values to int8 first, so they reach less of it:
the roof is an upper bound, like the bandwidth roof).
"""

from __future__ import annotations

import ctypes
import time
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.runtime.bench.stats import summary

GGML_TYPES = {"fp16": 1, "int8": 8}  # GGML_TYPE_F16, GGML_TYPE_Q8_0
# 512K weights: 1 MiB in F16, 544 KiB in Q8_0, in the caches of any current CPU (a smaller or larger matrix
# gives the same rate on an AMD EPYC: the kernel, not the cache, sets it)
ROWS, COLS = 256, 2048
NODES = 64  # products per graph, so thread start-up is a small share of each graph
FLOAT_TYPES = ("F32", "F16", "BF16")


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


class _Plan(ctypes.Structure):  # struct ggml_cplan
    _fields_ = [("work_size", ctypes.c_size_t), ("work_data", ctypes.c_void_p), ("n_threads", ctypes.c_int),
                ("threadpool", ctypes.c_void_p), ("abort_callback", ctypes.c_void_p),
                ("abort_callback_data", ctypes.c_void_p), ("use_ref", ctypes.c_bool)]  # fmt: skip


def _libraries() -> tuple[Any, Any]:
    import llama_cpp

    folder = Path(llama_cpp.__file__).parent / "lib"
    base = ctypes.CDLL(str(next(folder.glob("libggml-base.*"))))
    cpu = ctypes.CDLL(str(next(folder.glob("libggml-cpu.*"))))
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    for name, restype, argtypes in (
        ("ggml_init", p, [_InitParams]),
        ("ggml_free", None, [p]),
        ("ggml_new_tensor_2d", p, [p, ctypes.c_int, i64, i64]),
        ("ggml_get_data", p, [p]),
        ("ggml_nbytes", ctypes.c_size_t, [p]),
        ("ggml_mul_mat", p, [p, p, p]),
        ("ggml_new_graph", p, [p]),
        ("ggml_build_forward_expand", None, [p, p]),
        ("ggml_quantize_chunk", ctypes.c_size_t, [ctypes.c_int, p, p, i64, i64, i64, p]),
    ):
        fn = getattr(base, name)
        fn.restype, fn.argtypes = restype, argtypes
    cpu.ggml_graph_plan.restype, cpu.ggml_graph_plan.argtypes = _Plan, [p, ctypes.c_int, p]
    cpu.ggml_graph_compute.restype, cpu.ggml_graph_compute.argtypes = ctypes.c_int, [p, ctypes.POINTER(_Plan)]
    cpu.ggml_cpu_init.restype, cpu.ggml_cpu_init.argtypes = None, []
    cpu.ggml_cpu_init()
    return base, cpu


def _rate(base: Any, cpu: Any, kind: str, threads: int, seconds: float) -> float:
    """Operations per second of one F16 or Q8_0 matrix-vector product, measured for about `seconds`."""
    ctx = base.ggml_init(_InitParams(16 * 2**20, None, False))
    if not ctx:
        raise MemoryError("ggml_init could not allocate its 16 MiB context")
    try:
        weights = base.ggml_new_tensor_2d(ctx, GGML_TYPES[kind], COLS, ROWS)
        values = np.random.default_rng(0).standard_normal((ROWS, COLS), dtype=np.float32)
        if kind == "fp16":
            halves = values.astype(np.float16)  # kept alive until the copy is done
            ctypes.memmove(base.ggml_get_data(weights), halves.ctypes.data, halves.nbytes)
        else:
            base.ggml_quantize_chunk(GGML_TYPES[kind], values.ctypes.data, base.ggml_get_data(weights), 0, ROWS, COLS,
                                     None)  # fmt: skip
        graph = base.ggml_new_graph(ctx)
        for node in range(NODES):
            vector = base.ggml_new_tensor_2d(ctx, 0, COLS, 1)  # GGML_TYPE_F32
            x = np.random.default_rng(node + 1).standard_normal(COLS, dtype=np.float32)
            ctypes.memmove(base.ggml_get_data(vector), x.ctypes.data, 4 * COLS)
            base.ggml_build_forward_expand(graph, base.ggml_mul_mat(ctx, weights, vector))
        plan = cpu.ggml_graph_plan(graph, threads, None)
        work = ctypes.create_string_buffer(max(1, plan.work_size))  # the activations, converted for the kernel
        plan.work_data = ctypes.cast(work, ctypes.c_void_p)
        cpu.ggml_graph_compute(graph, ctypes.byref(plan))  # warm-up: caches and threads
        runs, start = 0, time.perf_counter()
        while True:
            cpu.ggml_graph_compute(graph, ctypes.byref(plan))
            runs += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                return 2.0 * ROWS * COLS * NODES * runs / elapsed
    finally:
        base.ggml_free(ctx)


def probe(threads: int, runs: int, seconds: float = 0.25) -> dict[str, dict[str, Any]]:
    """{fp16|int8: {median, min, max, n}} in GOP/s with `threads` threads."""
    base, cpu = _libraries()
    out: dict[str, list[float]] = {kind: [] for kind in GGML_TYPES}
    for _ in range(runs):
        for kind in GGML_TYPES:
            out[kind].append(_rate(base, cpu, kind, threads, seconds) / 1e9)
    return {kind: summary(values) for kind, values in out.items()}


def compute_roof(ops_by_type: dict[str, int], rates_gops: dict[str, float]) -> float | None:
    """Tokens per second if only the dot-product rate limited decode: float weights at the fp16 rate,
    quantized ones at the int8 rate. `ops_by_type`: operations per token of each GGUF tensor type."""
    if not ops_by_type or not rates_gops.get("fp16") or not rates_gops.get("int8"):
        return None
    seconds = sum(ops / (rates_gops["fp16" if t in FLOAT_TYPES else "int8"] * 1e9) for t, ops in ops_by_type.items())
    return 1.0 / seconds if seconds else None
