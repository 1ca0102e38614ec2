"""A STREAM-style memory bandwidth probe in numpy, for the decode roofline.

Each process owns three float64 arrays of `array_mib` MiB (far larger than any last-level cache)
and runs four kernels, timed between barriers so that P processes run them at the same moment:

    copy   c = a          2 arrays moved    (STREAM Copy)
    add    c = a + b      3 arrays moved    (STREAM Add)
    triad  a = b + s*c    numpy makes two passes (a = s*c; a += b): 5 arrays moved
    read   sum(a)         1 array read      (closest to decode, which only reads weights)

Bandwidth = bytes moved by all P processes ÷ (last end − first start). numpy runs one thread per
process, so P processes stand in for STREAM's OpenMP threads. The roofline uses the best kernel
(like STREAM's "best rate"), so the roofline ratio is a conservative figure.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any

import numpy as np

from edgekit.runtime.bench.stats import summary

KERNELS = ("copy", "add", "triad", "read")
ARRAYS_MOVED = {"copy": 2, "add": 3, "triad": 5, "read": 1}


def _run_kernels(array_mib: int, runs: int, barrier: Any) -> list[tuple[int, str, float, float]]:
    n = max(1, array_mib * 2**20 // 8)
    a = np.ones(n)
    b = np.full(n, 2.0)
    c = np.zeros(n)  # all three are touched here, so page faults stay out of the timings
    kernels = {
        "copy": lambda: np.copyto(c, a),
        "add": lambda: np.add(a, b, out=c),
        "triad": lambda: (np.multiply(c, 3.0, out=a), np.add(a, b, out=a)),
        "read": lambda: a.sum(),
    }
    out = []
    for run in range(runs + 1):  # run 0 warms caches and TLBs and is dropped
        for name in KERNELS:
            if barrier is not None:
                barrier.wait()
            start = time.perf_counter()
            kernels[name]()
            end = time.perf_counter()
            if run:
                out.append((run, name, start, end))
    return out


def _child(array_mib: int, runs: int, barrier: Any, queue: Any) -> None:
    queue.put(_run_kernels(array_mib, runs, barrier))


def probe(array_mib: int, runs: int, processes: int = 1) -> dict[str, dict[str, float]]:
    """{kernel: {median, min, max, n}} in GiB/s for `processes` processes running together."""
    if processes <= 1:
        timings = [_run_kernels(array_mib, runs, None)]
    else:
        ctx = mp.get_context("spawn")  # no fork: the caller may hold threads (llama.cpp, torch)
        barrier, queue = ctx.Barrier(processes), ctx.Queue()
        workers = [ctx.Process(target=_child, args=(array_mib, runs, barrier, queue)) for _ in range(processes)]
        for w in workers:
            w.start()
        timings = [queue.get(timeout=600) for _ in workers]
        for w in workers:
            w.join(timeout=60)
    bytes_per_array = max(1, array_mib * 2**20 // 8) * 8
    result: dict[str, dict[str, float]] = {}
    for name in KERNELS:
        rates = []
        for run in range(1, runs + 1):
            spans = [(s, e) for t in timings for (r, k, s, e) in t if r == run and k == name]
            elapsed = max(e for _, e in spans) - min(s for s, _ in spans)
            moved = ARRAYS_MOVED[name] * bytes_per_array * len(spans)
            rates.append(moved / elapsed / 2**30)
        result[name] = summary(rates)
    return result


def best_rate(kernels: dict[str, dict[str, float]]) -> float:
    """The roofline bandwidth: the best median among the kernels (GiB/s)."""
    return max(k["median"] for k in kernels.values())
