"""The smoke test: a few fixed prompts through the engine the box runs, judged by their log-probabilities.

The build records, per artifact (stage `smoke`, into manifest.json), each prompt's ids, its greedy
continuation and the log-probability the engine gives each continuation token when the whole sequence is
fed in (teacher-forced). `edgekit install` replays that on the box, in a child process, before it switches
to the new release:

    python -m edgekit.runtime.smoke BUNDLE        prints {"artifacts": {name: {"status": ...}}} as JSON

The verdict is the log-probabilities, not the greedy ids: another CPU's kernels (ARM's NEON or i8mm,
llama.cpp's repacked Q4_0 layouts, AVX2 where the build had AVX-512) sum in another order, so the logits
move slightly and a greedy sequence may part after a few tokens with nothing wrong. Feeding the recorded
tokens keeps every position comparable. The tolerance comes from the sign-off's noise floor (the
reference against itself in a second dtype: what a harmless numeric change does to the same tokens), so
a box that computes like the build passes and a different model file (another quantization) does not.
Whether the greedy ids agree is kept as a report.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.errors import EdgekitError, MissingDependencyError
from edgekit.runtime.engines import Engine, Sampling
from edgekit.runtime.engines.sampling import log_softmax

# Short, varied and cheap: prose, code, a fact. Decoded TOKENS tokens each, after the engine's warm-up.
PROMPTS = (
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Once upon a time, in a small village by the sea,",
)
TOKENS = 16
# In the smoke task's key. 3: MARGIN 3; 2: teacher-forced log-probabilities are the verdict; 1: greedy ids.
METHOD = 3

# The tolerance is MARGIN × the noise floor's mean and 99th percentile of |Δ log p| per token, and never
# below FLOOR (float32 noise alone, on a model whose noise floor is tiny). Without a noise floor
# (validation off, or noise_floor_dtype = "none") it is DEFAULT: about the bf16 noise floor of a 1B model.
# MARGIN from tests/e2e/test_arm64_box.py on SmolLM2-135M: an aarch64 box's NEON kernels put Q4_K_M's recorded
# tokens 2.0× the noise floor's mean (0.070 nats, at most 0.31) from an AVX-512 build's; Q4_K_M's file in
# Q8_0's place is 5.0× (0.17, at most 0.92). 3 sits between.
MARGIN = 3.0
FLOOR = (1e-3, 1e-2)
DEFAULT = (0.05, 0.5)


@dataclass(frozen=True)
class Tolerance:
    """How far, in nats, the box's log-probabilities of the recorded tokens may be from the build's."""

    mean_abs: float  # of |Δ log p| over every recorded token of an artifact
    max_abs: float  # of any one token
    source: str

    @classmethod
    def from_noise_floor(cls, nll: np.ndarray, nll_ref: np.ndarray, dtype: str) -> Tolerance:
        """MARGIN × what the reference's second dtype moved the same text's tokens by."""
        moved = np.abs(np.asarray(nll, np.float64) - np.asarray(nll_ref, np.float64))
        mean, p99 = float(moved.mean()), float(np.quantile(moved, 0.99))
        return cls(round(max(FLOOR[0], MARGIN * mean), 6), round(max(FLOOR[1], MARGIN * p99), 6),
                   f"{MARGIN:g} × the noise floor ({dtype} reference against float32, {moved.size} tokens: "
                   f"mean |Δ log p| {mean:.3g}, p99 {p99:.3g})")  # fmt: skip

    @classmethod
    def default(cls) -> Tolerance:
        return cls(*DEFAULT, "the default: the build measured no noise floor")

    @classmethod
    def of(cls, stored: dict[str, Any] | None) -> Tolerance:
        return cls(**stored) if stored else cls.default()


def greedy(engine: Engine, prompt_ids: Sequence[int], tokens: int) -> list[int]:
    """Up to `tokens` greedy token ids after `prompt_ids` (fewer when an end-of-sequence token comes first)."""
    token = engine.start(0, prompt_ids, Sampling())
    out = [token]
    try:
        while len(out) < tokens and token not in engine.eos_ids:
            token = engine.step()[0]
            out.append(token)
    finally:
        engine.finish(0)
    return out


def forced_logprobs(engine: Engine, prompt_ids: Sequence[int], continuation: Sequence[int]) -> list[float]:
    """The log-probability of each `continuation` token after `prompt_ids` and the tokens before it."""
    ids = [*prompt_ids, *continuation]
    logp = log_softmax(engine.logits(ids[:-1])[len(prompt_ids) - 1 :])
    return [round(float(logp[i, token]), 6) for i, token in enumerate(continuation)]


def record(engine: Engine, prompts: Sequence[str], tokens: int) -> list[dict[str, Any]]:
    out = []
    for text in prompts:
        ids = engine.tokenize(text)
        continuation = greedy(engine, ids, tokens)
        out.append({"text": text, "prompt_ids": ids, "greedy_ids": continuation,
                    "logprobs": forced_logprobs(engine, ids, continuation)})  # fmt: skip
    return out


def replay(engine: Engine, recorded: list[dict[str, Any]], tolerance: Tolerance) -> dict[str, Any]:
    """The recorded prompts on this engine: the verdict, the log-probability distance, and every difference."""
    differences: list[dict[str, Any]] = []
    moved: list[float] = []
    greedy_same = True
    for item in recorded:
        ids = engine.tokenize(item["text"])
        if ids != item["prompt_ids"]:
            differences.append({"text": item["text"], "what": "prompt ids", "expected": item["prompt_ids"], "got": ids})
            continue
        got = greedy(engine, ids, len(item["greedy_ids"]))
        greedy_same &= got == item["greedy_ids"]
        if "logprobs" not in item:  # recorded by edgekit before METHOD 2: the greedy ids are all there is
            if got != item["greedy_ids"]:
                differences.append({"text": item["text"], "what": "greedy ids", "expected": item["greedy_ids"],
                                    "got": got})  # fmt: skip
            continue
        here = forced_logprobs(engine, ids, item["greedy_ids"])
        moved += [abs(a - b) for a, b in zip(here, item["logprobs"], strict=True)]
    distance = {"mean_abs": float(np.mean(moved)), "max_abs": float(np.max(moved))} if moved else None
    if distance and (distance["mean_abs"] > tolerance.mean_abs or distance["max_abs"] > tolerance.max_abs):
        differences.append({"what": "log-probabilities", "expected": asdict(tolerance), "got": distance})
    return {"status": "mismatch" if differences else "match", "prompts": len(recorded), "differences": differences,
            "logprob_distance": distance, "tolerance": asdict(tolerance), "greedy_ids_same": greedy_same}  # fmt: skip


def check_bundle(bundle: Path) -> dict[str, Any]:
    """Replay every artifact's record in `bundle` (already verified by the caller) on this box."""
    from edgekit.manifest import load_manifest
    from edgekit.runtime.loader import inspect_bundle, load

    manifest = load_manifest(bundle)
    results: dict[str, Any] = {}
    for artifact in manifest.get("artifacts", []):
        smoke = artifact.get("smoke") or {}
        if not smoke.get("prompts"):
            results[artifact["name"]] = {"status": "unrecorded", "reason": smoke.get("skipped", "no record")}
            continue
        try:
            info = inspect_bundle(bundle, artifact=artifact["name"], overrides=smoke["settings"], verify=False)
            loaded = load(info, warm_up=True)
        except MissingDependencyError as exc:
            results[artifact["name"]] = {"status": "skipped", "reason": f"{exc.message} ({exc.hint})"}
            continue
        try:
            results[artifact["name"]] = replay(loaded.engine, smoke["prompts"], Tolerance.of(smoke.get("tolerance")))
        finally:
            loaded.engine.close()
    return {"default_artifact": manifest.get("default_artifact"), "artifacts": results}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m edgekit.runtime.smoke BUNDLE_DIR", file=sys.stderr)
        return 2
    try:
        result = check_bundle(Path(args[0]))
    except EdgekitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
