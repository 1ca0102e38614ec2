"""bench: measure every artifact on this CPU; GGUF ones against the memory-bandwidth roofline.

The measurements run in fresh worker processes (`edgekit.runtime.bench.benchmark`, no torch), and are
cached in the stage cache under a key made of the artifacts' keys, the bench settings, the
llama-cpp-python version and a machine fingerprint (CPU model, core counts, NUMA nodes): a rebuild
on the same machine reuses them, another machine measures again.

report["bench"] — every figure is a median over `settings.runs` runs unless it is a {median, min,
max, n} summary; units are in the key names (tok_s = tokens per second, ms, mib = MiB, gib_s = GiB/s):

    schema_version          1
    machine                 cpu_model, arch, physical_cores, logical_cores, numa_nodes, memory_total_mib,
                            fingerprint
    bandwidth               array_mib, kernels_gib_s_by_processes {P: {copy|add|triad|read: summary}},
                            best_gib_s_by_processes {P: GiB/s}  (STREAM-style probe, P processes at once)
    compute                 kernels_gops_by_threads {T: {type: summary}}, best_gops_by_threads {T: {type: GOP/s}}:
                            ggml's matrix × vector rate for each GGUF weight type (F16, Q8_0, Q4_K…) on
                            cache-resident weights, repacked where llama.cpp repacks them
                            (or {skipped: reason})
    peer                    tool ("llama-bench"), available, what (its llama.cpp commit), settings (what
                            llama-bench reported it ran with), missing (why there is no peer row), failed
                            {artifact: why}
    settings                the [bench] recipe section as run, n_ctx/n_batch, threads_swept
    artifacts {name: ...}   per artifact. GGUF: everything below. Other backends are measured through their
                            runtime engine (threads, TTFT, decode by sequences, RSS); the load modes, the
                            Llama() baseline and the roofline (bytes per token from the tensor table) are
                            GGUF-only and null/absent. An artifact whose engine cannot run on this machine
                            is {backend, scheme, skipped: reason}.
        backend, scheme, file_mib, bytes_per_token (weights read per generated token), tensor_types {type: params}
        n_threads, n_threads_batch          tuned: the sweep's best decode / prompt thread counts
        decode_tok_s, prompt_tok_s, ttft_ms, peak_rss_mib
                                            tuned settings, one sequence, prompt of settings.prompt_tokens
        decode_tok_s_by_sequences {c: tok/s}          aggregate decode speed of c sequences in one batch
        per_sequence_tok_s_by_sequences {c: tok/s}    what each of the c sequences sees
        batch_speedup_by_sequences {c: ratio}         aggregate at c ÷ one sequence, per run, median
        peak_rss_mib_by_sequences {c: MiB}            peak RSS of the process serving c sequences
        decode_tok_s_by_threads, prompt_tok_s_by_threads {t: tok/s}    the thread sweep
        bandwidth_gib_s     best measured bandwidth with up to n_threads processes
        roofline_tok_s      bandwidth_gib_s × 2^30 ÷ bytes_per_token: decode speed if only memory limited it
        roofline_ratio      decode_tok_s ÷ roofline_tok_s
        ops_per_token, compute_gops {type: GOP/s}   2 × weights multiplied per token; the rates at n_threads
        compute_roof_tok_s  1 ÷ Σ(ops per token of each tensor type ÷ its rate): decode if only compute limited it
        compute_roof_ratio  decode_tok_s ÷ compute_roof_tok_s
        roof_tok_s, roof_ratio, bound_by    the lower roof, decode ÷ it, and which one it is
        peer_decode_tok_s, peer_prompt_tok_s        llama-bench on the same file and threads
        decode_over_peer, prompt_over_peer          edgekit ÷ llama-bench, within each run, median
        decode_over_peer_runs, prompt_over_peer_runs    [min, max] of those ratios over the runs
        load_ms_<mode>_<cache>, first_token_ms_<mode>_<cache>
                            mode: mmap | no_mmap | mlock; cache: cold (file evicted from the page cache
                            with posix_fadvise) | warm. load_ms: llama_model_load_from_file alone;
                            first_token_ms: from the start of the load to the first token of a short prompt
        no_mmap_over_mmap_cold_first_token, no_mmap_over_mmap_warm_first_token    ratios within each run
        baseline_decode_tok_s, baseline_ttft_ms, baseline_prompt_tok_s, baseline_peak_rss_mib,
        baseline_settings   plain `llama_cpp.Llama(model_path)` with llama-cpp-python's defaults (n_threads =
                            CPUs/2), same prompt, greedy: a first try with the bindings, not llama.cpp's best
        tuned_over_baseline_decode          decode_tok_s ÷ baseline_decode_tok_s, within each run
        baseline_over_tuned_ttft            baseline_ttft_ms ÷ ttft_ms (> 1: tuned answers sooner)
        load {mode: {cache: {load_ms, context_ms, first_token_ms, peak_rss_mib, rss_anon_mib,
              rss_file_mib, locked_mib: summary}}}     (mmap keeps weights in file-backed pages, no_mmap
                                                        in anonymous ones; locked_mib shows mlock held)
        load_skipped {mode: reason}         e.g. mlock without RLIMIT_MEMLOCK or CAP_IPC_LOCK
        spread {"<section> <key…>": summary}          every raw measurement's median, min, max, n
    comparisons
        q4_over_highest_precision_decode    {numerator, denominator, ratio: summary, bytes_per_token_ratio}:
                                            Q4_K_M decode ÷ F16 (else Q8_0) decode, within each run
    jobs, seconds, created  worker processes run, wall time, when
    cache                   {key, reused}: the stage cache entry these figures came from
"""

from __future__ import annotations

from pathlib import Path

from edgekit.plan.tasks import BenchTask, QuantizeTask
from edgekit.runtime import machine
from edgekit.runtime.bench.benchmark import Benchmark
from edgekit.runtime.bench.results import BenchResult, BenchTarget
from edgekit.runtime.bench.settings import BenchSettings
from edgekit.signoff.gates import counts_as_failed, judge_artifact
from edgekit.stages import quantize
from edgekit.stages.context import StageContext
from edgekit.store.results import ValidateResult


def run(task: BenchTask, ctx: StageContext, out: Path) -> BenchResult:
    settings = BenchSettings(**task.settings)
    targets = []
    for q in _measured(task, ctx):
        a = quantize.artifact(q, ctx.entry(q))
        details = a.details
        targets.append(BenchTarget(a.name, a.path, a.backend, a.scheme, details.get("bytes_per_token"),
                                   details.get("tensor_types")))  # fmt: skip
    if not targets:
        return BenchResult(artifacts={}, skipped="every artifact failed its gates (exclude_failed)")
    bench = Benchmark(targets, settings)
    with ctx.progress.task(f"bench  {len(targets)} artifacts on {machine.cpu_model()}", total=bench.planned_jobs(),
                           unit="jobs") as shown:  # fmt: skip
        bench.log, bench.advance = shown.update, shown.advance
        return bench.run()


def _measured(task: BenchTask, ctx: StageContext) -> list[QuantizeTask]:
    """The artifacts to measure: all of them, or with `exclude_failed` those whose gates did not fail."""
    if task.exclusion is None:
        return list(task.artifacts)
    kept = []
    exclusion = task.exclusion
    for q, v, gates in zip(task.artifacts, exclusion.validations, exclusion.gates, strict=True):
        verdict = judge_artifact(ValidateResult.of(ctx.entry(v)), gates).verdict
        if not counts_as_failed(verdict, exclusion.on_inconclusive):
            kept.append(q)
    return kept
