"""The smoke test: a few fixed prompts decoded greedily through the engine the box runs, as token ids.

The build records them per artifact (stage `smoke`, into manifest.json); `edgekit install` replays them
on the box, in a child process, before it switches to the new release:

    python -m edgekit.runtime.smoke BUNDLE        prints {"artifacts": {name: {"status": ...}}} as JSON

Greedy decoding of the same ids with the same engine settings is deterministic, so any difference means
the box's runtime or CPU computes differently from the build machine's (another llama.cpp build, other
kernels, bf16 where the build ran f32) and the accuracy sign-off does not describe what the box would run.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgekit.errors import EdgekitError, MissingDependencyError
from edgekit.runtime.engines import Engine, Sampling

# Short, varied and cheap: prose, code, a fact. Decoded TOKENS tokens each, after the engine's warm-up.
PROMPTS = (
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Once upon a time, in a small village by the sea,",
)
TOKENS = 16


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


def record(engine: Engine, prompts: Sequence[str], tokens: int) -> list[dict[str, Any]]:
    return [
        {"text": text, "prompt_ids": (ids := engine.tokenize(text)), "greedy_ids": greedy(engine, ids, tokens)}
        for text in prompts
    ]


def replay(engine: Engine, recorded: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every recorded prompt that this engine tokenizes or decodes differently, with both sequences."""
    differences = []
    for item in recorded:
        ids = engine.tokenize(item["text"])
        if ids != item["prompt_ids"]:
            differences.append({"text": item["text"], "what": "prompt ids", "expected": item["prompt_ids"], "got": ids})
            continue
        got = greedy(engine, item["prompt_ids"], len(item["greedy_ids"]))
        if got != item["greedy_ids"]:
            differences.append({"text": item["text"], "what": "greedy ids", "expected": item["greedy_ids"], "got": got})
    return differences


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
            differences = replay(loaded.engine, smoke["prompts"])
        finally:
            loaded.engine.close()
        results[artifact["name"]] = {
            "status": "mismatch" if differences else "match",
            "prompts": len(smoke["prompts"]),
            "differences": differences,
        }
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
