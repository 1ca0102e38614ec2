#!/usr/bin/env python3
"""edgekit's runtime against llama.cpp's llama-bench on the same GGUF files, alternated many times.

    scripts/peer_ab.py MODEL.gguf [MODEL.gguf ...] [--alternations 8] [--threads 2] [--repeats 3]

The bench's peer row pairs one edgekit perf job with one llama-bench run per bench run, among many other
jobs, so five runs give a wide interval on a shared box. This runs only that pair, back to back, with the
bench's own jobs (`job_perf` at one sequence in a fresh worker process, `peer.measure`) and its settings
(prompt 128, 64 tokens after 128 of context, each timing repeated `--repeats` times), and alternates which
side goes first, so a slow spell of the box weighs on both. Prints each pair's edgekit ÷ llama-bench for
decode and prompt, then per file the median and range over the pairs, as JSON lines and a summary.
Run it on a quiet machine; `edgekit toolchain --tools` builds llama-bench.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from edgekit.runtime.bench import peer
from edgekit.runtime.bench.benchmark import engine_job
from edgekit.runtime.bench.jobs import run_job
from edgekit.runtime.bench.results import BenchTarget
from edgekit.runtime.bench.settings import BenchSettings
from edgekit.runtime.bench.stats import summary

METRICS = ("decode_tok_s", "prompt_tok_s")


def _job(path: Path, settings: BenchSettings, threads: int) -> dict[str, Any]:
    target = BenchTarget(path.stem, path, "gguf", "as written")
    return {**engine_job(settings, target, threads, threads), "kind": "perf", "concurrency": 1}


def _pair(tool: Path, job: dict[str, Any], timeout: float, edgekit_first: bool) -> dict[str, float]:
    if edgekit_first:
        ours = run_job(job, timeout)
        theirs = peer.measure(tool, job, timeout)
    else:
        theirs = peer.measure(tool, job, timeout)
        ours = run_job(job, timeout)
    return {metric: ours[metric] / theirs[metric] for metric in METRICS}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--alternations", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=BenchSettings().repeats)
    args = parser.parse_args()
    tool, described = peer.find_tool()
    if tool is None:
        raise SystemExit(described)
    settings = BenchSettings(repeats=args.repeats)
    summaries = {}
    for path in args.models:
        job = _job(path, settings, args.threads)
        pairs = []
        for i in range(args.alternations):
            pairs.append(_pair(tool, job, settings.job_timeout_s, edgekit_first=i % 2 == 0))
            print(json.dumps({"model": path.name, "pair": i, **pairs[-1]}), flush=True)
        summaries[path.name] = {metric: summary([p[metric] for p in pairs]) for metric in METRICS}
    print(json.dumps({"peer": described, "threads": args.threads, "summary": summaries}))
    for name, metrics in summaries.items():
        cells = [f"{m.split('_')[0]} {v['median']:.3f} ({v['min']:.2f}–{v['max']:.2f})" for m, v in metrics.items()]
        print(f"{name}: edgekit ÷ llama-bench, " + ", ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
