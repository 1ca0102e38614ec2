#!/usr/bin/env python3
"""How far the logprobs `serve` reports lie from what validation scored, per artifact of a bundle.

    scripts/logprob_paths.py dist/smollm2-135m-all-backends
    scripts/logprob_paths.py BUNDLE --artifact openvino-INT8 --set inference_precision=f32 \
        --set kv_cache_precision=f32 --set dynamic_quantization_group_size=0

For each prompt, the artifact's engine generates greedily through the serving API (`admit`, `advance`: a
prompt prefilled in chunks, then one decode step per token, as `serve` runs it) with `logprobs` on. Each
generated token's reported log-probability, and its top alternatives', are compared with the sign-off's
scoring of the same tokens: `edgekit.signoff.metrics.log_softmax` of `logits()` over the prompt and the
generated text in one call (the path validation takes). Prints JSON per artifact: the first generated token's
difference, the median and max over the later ones, and on how many tokens both paths' argmax agree.
`--set KEY=VALUE` overrides runtime.toml keys (as runtime.local.toml would). `--speed RUNS` also times
a 256-token prompt and 48 decoded tokens with the overrides and without, interleaved in one process, and
prints the medians' ratios (overrides ÷ defaults).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.runtime.engines.base import Sampling
from edgekit.runtime.loader import open_bundle
from edgekit.signoff.metrics import log_softmax

PROMPTS = (
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "To make a cup of tea, first",
    "The three primary colours are",
)
TOP = 3


def compare(engine: Any, prompt: str, steps: int) -> dict[str, Any]:
    """One prompt: the reported vs scored |Δ logprob| per generated token (the largest over token and top-k)."""
    prompt_ids = list(engine.tokenize(prompt))
    engine.admit(0, prompt_ids, Sampling(logprobs=TOP))
    token = None
    while token is None:
        token = engine.advance(engine.n_batch).get(0)
    generated = []
    for step in range(steps):
        generated.append((token, engine.take_logprobs(0)))
        if step + 1 < steps:
            token = engine.advance(engine.n_batch)[0]
    engine.finish(0)  # logits() needs an idle engine
    scored = log_softmax(engine.logits([*prompt_ids, *(t for t, _ in generated)])[len(prompt_ids) - 1 : -1])
    diffs = [
        max([abs(reported.logprob - logp[token])] + [abs(logp[t] - v) for t, v in reported.top])
        for (token, reported), logp in zip(generated, scored, strict=True)
    ]
    agree = sum(int(np.argmax(logp)) == token for (token, _), logp in zip(generated, scored, strict=True))
    return {"diffs": diffs, "agree": agree}


def measure(bundle: Path, artifact: str, overrides: dict[str, Any], steps: int) -> dict[str, Any]:
    loaded = open_bundle(bundle, artifact=artifact, overrides=overrides or None)
    engine = loaded.engine
    try:
        runs = [compare(engine, prompt, steps) for prompt in PROMPTS]
        properties = dict(getattr(engine, "properties", {}) or {})
    finally:
        engine.close()
    firsts = [r["diffs"][0] for r in runs]
    decoded = [d for r in runs for d in r["diffs"][1:]]
    return {
        "artifact": artifact,
        "overrides": overrides,
        "properties": properties,
        "tokens": len(PROMPTS) * steps,
        "first_token_max_abs": max(firsts),
        "decoded_median_abs": statistics.median(decoded),
        "decoded_max_abs": max(decoded),
        "greedy_agree": sum(r["agree"] for r in runs),
    }


def speed(bundle: Path, artifact: str, overrides: dict[str, Any], runs: int) -> dict[str, Any]:
    """Prompt and decode tokens/s with the overrides ÷ without: medians of `runs` interleaved timings."""
    engines = {name: open_bundle(bundle, artifact=artifact, overrides=o).engine
               for name, o in (("defaults", None), ("overrides", overrides))}  # fmt: skip
    prompt = list(range(1000, 1256))
    timings: dict[str, list[tuple[float, float]]] = {name: [] for name in engines}
    try:
        for _ in range(runs):
            for name, engine in engines.items():
                started = time.perf_counter()
                engine.start(0, prompt, Sampling())
                prefilled = time.perf_counter()
                for _ in range(48):
                    engine.step()
                timings[name].append((len(prompt) / (prefilled - started), 48 / (time.perf_counter() - prefilled)))
                engine.finish(0)
    finally:
        for engine in engines.values():
            engine.close()
    medians = {name: [statistics.median(t[i] for t in values) for i in (0, 1)] for name, values in timings.items()}
    return {
        "artifact": artifact,
        "runs": runs,
        "prompt_ratio": medians["overrides"][0] / medians["defaults"][0],
        "decode_ratio": medians["overrides"][1] / medians["defaults"][1],
    }


def _override(text: str) -> tuple[str, Any]:
    key, _, value = text.partition("=")
    return key, tomllib.loads(f"v = {value}")["v"] if value[:1].isdigit() or value in ("true", "false") else value


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--artifact", action="append", help="this artifact only (repeatable; default: all)")
    parser.add_argument("--set", action="append", default=[], type=_override, help="a runtime.toml KEY=VALUE")
    parser.add_argument("--steps", type=int, default=12, help="tokens generated per prompt")
    parser.add_argument("--speed", type=int, default=0, metavar="RUNS", help="also time with and without --set")
    args = parser.parse_args(argv)
    manifest = json.loads((args.bundle / "manifest.json").read_text())
    names = args.artifact or [a["name"] for a in manifest["artifacts"]]
    results = [measure(args.bundle, name, dict(args.set), args.steps) for name in names]
    if args.speed:
        results += [speed(args.bundle, name, dict(args.set), args.speed) for name in names]
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
