"""The compute roof: how fast this CPU multiplies weights by a vector, with llama.cpp's own kernels.

Decode is a matrix-vector product per weight matrix. When the weights come from memory, bandwidth
bounds it (the bandwidth roof); when they are already in cache, the kernel's arithmetic does. This probe
measures that rate with ggml (the library llama-cpp-python ships), through its C API: a weight matrix
that stays in the caches, multiplied by one activation vector, many times per graph, with `n` threads.
One kernel per GGUF tensor type the artifacts multiply by (F16, Q8_0, Q4_K, Q6_K…), each in the buffer
llama.cpp would load it into (CPU_REPACK where it repacks): K-quants unpack 4- and 6-bit values in
registers, and that can beat Q8_0's kernel, so one int8 rate for every quantized type misplaces the roof.

The rate is operations per second (one multiply-add = 2 operations). A model's compute roof is
1 ÷ Σ(operations per token of each weight type ÷ that type's rate): an upper bound, like the bandwidth roof.
"""

from __future__ import annotations

import ctypes
import functools
import time
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.runtime.bench.stats import summary

DEFAULT_TYPES = ("F16", "Q8_0")  # measured when no artifact says which types it multiplies by
# A 2048 × 2048 matrix, a 1B model's attention projection: 8 MiB in F16, 2.3 MiB in Q4_K, in the last-level
# cache of any current server CPU. Smaller matrices measure the threads' barrier at every product instead of
# the kernel (256 rows: Q4_K at 110 GOP/s with 2 threads on an AMD EPYC; 2048 rows: 141, as in decode).
ROWS, COLS = 2048, 2048
NODES = 64  # products per graph, so thread start-up is a small share of each graph


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


class _Plan(ctypes.Structure):  # struct ggml_cplan
    _fields_ = [("work_size", ctypes.c_size_t), ("work_data", ctypes.c_void_p), ("n_threads", ctypes.c_int),
                ("threadpool", ctypes.c_void_p), ("abort_callback", ctypes.c_void_p),
                ("abort_callback_data", ctypes.c_void_p), ("use_ref", ctypes.c_bool)]  # fmt: skip


@functools.cache  # the prototypes are declared and the CPU backend initialised once per process
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
        ("ggml_quantize_requires_imatrix", ctypes.c_bool, [ctypes.c_int]),
        ("ggml_backend_reg_dev_get", p, [p, ctypes.c_size_t]),
        ("ggml_backend_reg_get_proc_address", p, [p, ctypes.c_char_p]),
        ("ggml_backend_dev_supports_op", ctypes.c_bool, [p, p]),
        ("ggml_backend_cpu_buffer_type", p, []),
        ("ggml_backend_alloc_ctx_tensors_from_buft", p, [p, p]),
        ("ggml_backend_buffer_free", None, [p]),
        ("ggml_backend_tensor_set", None, [p, p, ctypes.c_size_t, ctypes.c_size_t]),
    ):
        fn = getattr(base, name)
        fn.restype, fn.argtypes = restype, argtypes
    cpu.ggml_graph_plan.restype, cpu.ggml_graph_plan.argtypes = _Plan, [p, ctypes.c_int, p]
    cpu.ggml_graph_compute.restype, cpu.ggml_graph_compute.argtypes = ctypes.c_int, [p, ctypes.POINTER(_Plan)]
    cpu.ggml_cpu_init.restype, cpu.ggml_cpu_init.argtypes = None, []
    cpu.ggml_backend_cpu_reg.restype, cpu.ggml_backend_cpu_reg.argtypes = p, []
    cpu.ggml_cpu_init()
    return base, cpu


def _type_id(name: str) -> int:
    import gguf

    return int(gguf.GGMLQuantizationType[name].value)


def _extra_buffer_types(base: Any, cpu: Any) -> tuple[Any, list[int]]:
    """The CPU device and its extra weight buffer types (CPU_REPACK…), in the order llama.cpp tries them."""
    reg = cpu.ggml_backend_cpu_reg()
    device = base.ggml_backend_reg_dev_get(reg, 0)
    address = base.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_dev_get_extra_bufts")
    if not address:
        return device, []
    listing = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)(address)(device)
    found: list[int] = []
    while listing and listing[len(found)]:
        found.append(listing[len(found)])
    return device, found


def _weights(base: Any, cpu: Any, type_name: str) -> tuple[Any, Any, Any]:
    """(context, buffer, tensor): ROWS × COLS weights of `type_name` in the buffer type llama.cpp would load
    them into: the first extra buffer type whose kernel takes a matrix × vector of them (CPU_REPACK
    interleaves Q4_0, Q4_K, Q8_0… rows for its own kernels), else plain CPU memory."""
    values = np.random.default_rng(0).standard_normal((ROWS, COLS), dtype=np.float32)
    device, extras = _extra_buffer_types(base, cpu)
    for buffer_type in [*extras, base.ggml_backend_cpu_buffer_type()]:
        ctx = base.ggml_init(_InitParams(1 * 2**20, None, True))
        weights = base.ggml_new_tensor_2d(ctx, _type_id(type_name), COLS, ROWS)
        buffer = base.ggml_backend_alloc_ctx_tensors_from_buft(ctx, buffer_type)
        probe_op = base.ggml_mul_mat(ctx, weights, base.ggml_new_tensor_2d(ctx, 0, COLS, 1))
        if buffer and (buffer_type not in extras or base.ggml_backend_dev_supports_op(device, probe_op)):
            data = ctypes.create_string_buffer(base.ggml_nbytes(weights))
            base.ggml_quantize_chunk(_type_id(type_name), values.ctypes.data, data, 0, ROWS, COLS, None)
            base.ggml_backend_tensor_set(weights, data, 0, len(data))  # the buffer type repacks here
            return ctx, buffer, weights
        if buffer:
            base.ggml_backend_buffer_free(buffer)
        base.ggml_free(ctx)
    raise MemoryError(f"ggml could not allocate {type_name} weights")


def _rate(base: Any, cpu: Any, type_name: str, threads: int, seconds: float) -> float:
    """Operations per second of one matrix-vector product with `type_name` weights, measured for `seconds`."""
    weights_ctx, buffer, weights = _weights(base, cpu, type_name)
    ctx = base.ggml_init(_InitParams(16 * 2**20, None, False))  # the vectors and products
    if not ctx:
        raise MemoryError("ggml_init could not allocate its 16 MiB context")
    try:
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
        base.ggml_backend_buffer_free(buffer)
        base.ggml_free(weights_ctx)


def measurable(type_name: str) -> bool:
    """Whether the probe can time `type_name`'s kernel: a ggml type that quantizes without an imatrix."""
    import gguf

    if type_name not in gguf.GGMLQuantizationType.__members__:
        return False
    base, _ = _libraries()
    return not base.ggml_quantize_requires_imatrix(_type_id(type_name))


def probe(threads: int, runs: int, types: tuple[str, ...] = DEFAULT_TYPES,
          seconds: float = 0.25) -> dict[str, dict[str, Any]]:  # fmt: skip
    """{GGUF tensor type: {median, min, max, n}} in GOP/s with `threads` threads; types it cannot time are
    left out (their roof is then unknown)."""
    base, cpu = _libraries()
    timed = [t for t in types if measurable(t)]
    out: dict[str, list[float]] = {t: [] for t in timed}
    for _ in range(runs):
        for type_name in timed:
            out[type_name].append(_rate(base, cpu, type_name, threads, seconds) / 1e9)
    return {t: summary(values) for t, values in out.items()}


def compute_roof(ops_by_type: dict[str, int], rates_gops: dict[str, float]) -> float | None:
    """Tokens per second if only the kernels' arithmetic limited decode: each weight type at its own rate.
    `ops_by_type`: operations per token of each GGUF tensor type. None when a type's rate is unknown."""
    if not ops_by_type or any(not rates_gops.get(t) for t in ops_by_type):
        return None
    seconds = sum(ops / (rates_gops[t] * 1e9) for t, ops in ops_by_type.items())
    return 1.0 / seconds if seconds else None
