"""The build pipeline: recipe → fetch → convert → quantize → validate → bench → bundle → report.

Each stage's output is cached by the hash of its inputs (see `edgekit.cache`), so a rerun of an
unchanged recipe reuses everything and a changed target rebuilds only what depends on it. The
bundle is written to a temp folder and renamed into place at the end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgekit.backends import get_backend
from edgekit.backends.base import Artifact, BuildEnv, Checkpoint
from edgekit.cache import StageCache
from edgekit.errors import GateFailure
from edgekit.hashing import sha256_json
from edgekit.preflight import preflight
from edgekit.progress import Progress
from edgekit.recipe import Recipe
from edgekit.runtime.config import default_threads
from edgekit.stages import bundle, convert, fetch, quantize, report, validate


@dataclass
class BuildResult:
    bundle: Path
    verdicts: dict[str, str]
    failed_required: list[str]
    excluded: list[str]
    seconds: float
    stage_seconds: dict[str, float] = field(default_factory=dict)
    reused: dict[str, bool] = field(default_factory=dict)


def output_path(recipe: Recipe, out_dir: Path | None, project: Path) -> Path:
    base = out_dir if out_dir is not None else project / recipe.spec.bundle.output_dir
    return base.expanduser().absolute() / recipe.name


def build(
    recipe: Recipe,
    *,
    cache: StageCache,
    progress: Progress,
    out_dir: Path | None = None,
    project: Path | None = None,
    command: str = "edgekit build",
    threads: int | None = None,
) -> BuildResult:
    started = time.time()
    timings: dict[str, float] = {}
    project = project or Path.cwd()
    final = output_path(recipe, out_dir, project)
    threads = threads or default_threads()
    env = BuildEnv(cache_root=cache.root, llama_cpp_dir=recipe.spec.toolchain.llama_cpp_dir, threads=threads)
    preflight(recipe, final, out_given=out_dir is not None)
    cache.clean_partials()

    def timed(stage: str, start: float) -> None:
        timings[stage] = timings.get(stage, 0.0) + time.time() - start

    t = time.time()
    checkpoint = fetch.run(recipe, cache, progress)
    timed("fetch", t)

    t = time.time()
    artifacts = _convert_and_quantize(recipe, checkpoint, env, cache, progress)
    timed("convert+quantize", t)

    cfg = recipe.spec.validation
    results: dict[str, dict[str, Any]] = {}
    reference_meta = noise = None
    if cfg.enabled:
        t = time.time()
        ref = validate.reference(recipe, checkpoint, cache, progress, threads)
        reference_meta = {k: v for k, v in ref.meta.items() if k not in ("tasks", "noise_floor")}
        reference_meta["cache_key"] = ref.key
        reference_meta["reused"] = ref.entry.reused
        timed("reference", t)
        t = time.time()
        for target, artifact in zip(recipe.targets, artifacts, strict=True):
            measured = validate.validate_artifact(recipe, artifact, ref, cache, progress, threads)
            judged = validate.judge_artifact(measured, validate.gates_for(recipe, target))
            results[artifact.name] = {**measured, **judged, "gates": validate.gates_for(recipe, target).model_dump()}
        noise = validate.noise_floor_metrics(ref, cfg)
        timed("validate", t)

    verdicts = {name: r["verdict"] for name, r in results.items()}
    required = {t.name for t in recipe.targets if t.required}
    failed = [n for n, v in verdicts.items() if v == "fail" or (v == "inconclusive" and cfg.on_inconclusive == "fail")]
    failed_required = [n for n in failed if n in required]
    excluded: list[str] = []
    if recipe.spec.bundle.exclude_failed and failed:
        excluded = failed
        if len(excluded) == len(artifacts):
            raise GateFailure(failed, None)
    kept = [a for a in artifacts if a.name not in excluded]

    bench_results = None
    if recipe.spec.bench.enabled:
        t = time.time()
        bench_results = _bench(recipe, kept, cache, progress)
        timed("bench", t)
    runtime = _runtime_config(recipe, kept, verdicts, bench_results, threads)

    versions = bundle.tool_versions(_backend_versions(recipe, env))
    t = time.time()

    def write_reports(directory: Path, records: list[dict[str, Any]]) -> None:
        rows = []
        for record in records:
            rows.append(
                {
                    **{
                        k: record[k]
                        for k in (
                            "name",
                            "backend",
                            "scheme",
                            "path",
                            "size",
                            "sha256",
                            "tensor_types",
                            "bits_per_weight",
                        )
                    },
                    "details": record["details"],
                    "required": record["name"] in required,
                    **results.get(record["name"], {"verdict": "not validated", "metrics": None}),
                }
            )
        for name in excluded:
            left_out = next(a for a in artifacts if a.name == name)
            described = {
                "backend": left_out.backend,
                "scheme": left_out.scheme,
                "size": left_out.size,
                "tensor_types": left_out.details.get("tensor_types", {}),
                "bits_per_weight": left_out.details.get("bits_per_weight"),
                "details": left_out.details,
                "required": name in required,
            }
            rows.append({"name": name, "verdict": verdicts[name], "excluded": True, **described, **results[name]})
        data = report.build_report(
            name=final.name,
            recipe=recipe,
            checkpoint=checkpoint,
            reference=reference_meta,
            noise_floor=noise,
            artifacts=rows,
            bench=bench_results,
            versions=versions,
            command=command,
        )
        report.write_reports(directory, data)

    with progress.task(f"bundle  {final}"):
        bundle.write_bundle(final, recipe, checkpoint, kept, runtime, versions, write_reports, verdicts)
    timed("bundle+report", t)
    reused: dict[str, bool] = {}
    for stage, _, was_reused in cache.events:
        reused[stage] = reused.get(stage, True) and was_reused
    return BuildResult(
        reused=reused,
        bundle=final,
        verdicts=verdicts,
        failed_required=[] if recipe.spec.bundle.exclude_failed else failed_required,
        excluded=excluded,
        seconds=time.time() - started,
        stage_seconds=timings,
    )


def _convert_and_quantize(
    recipe: Recipe, checkpoint: Checkpoint, env: BuildEnv, cache: StageCache, progress: Progress
) -> list[Artifact]:
    model_sha = sha256_json(recipe.spec.model.model_dump(mode="json"))
    meta = convert.provenance(checkpoint, model_sha)
    converted: dict[str, Any] = {}
    artifacts = []
    calibration = None
    for target in recipe.targets:
        if target.backend not in converted:
            converted[target.backend] = convert.run(target.backend, checkpoint, env, cache, progress, meta)
        backend = get_backend(target.backend)
        wants_text = getattr(backend, "needs_calibration", lambda scheme, options: False)(target.scheme, target.options)
        if wants_text and calibration is None:
            from edgekit.evaldata import load_text

            calibration = load_text(recipe.spec.validation.text, recipe.base_dir).text
        artifacts.append(
            quantize.run(target, converted[target.backend], env, cache, progress, calibration if wants_text else None)
        )
    return artifacts


def _backend_versions(recipe: Recipe, env: BuildEnv) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for backend_name in dict.fromkeys(t.backend for t in recipe.targets):
        found.update(get_backend(backend_name).versions(env))
    return found


def _bench(recipe: Recipe, artifacts: list[Artifact], cache: StageCache, progress: Progress) -> dict[str, Any] | None:
    try:
        from edgekit.stages import bench
    except ImportError:
        return None
    return bench.run(recipe, artifacts, cache, progress)


def _runtime_config(
    recipe: Recipe,
    artifacts: list[Artifact],
    verdicts: dict[str, str],
    bench_results: dict[str, Any] | None,
    threads: int,
) -> dict[str, Any]:
    defaults = recipe.spec.bundle.runtime
    passing = [a for a in artifacts if verdicts.get(a.name, "pass") == "pass"]
    chosen = (passing or artifacts)[0]
    values: dict[str, Any] = {
        "artifact": chosen.name,
        "n_threads": threads,
        "n_threads_batch": threads,
        "use_mmap": True,
        "use_mlock": defaults.use_mlock,
        "n_ctx": defaults.n_ctx,
        "n_batch": defaults.n_batch,
        "max_concurrent": defaults.max_concurrent,
        "warmup_tokens": defaults.warmup_tokens,
        "max_queue": defaults.max_queue,
        "max_request_tokens": defaults.max_request_tokens,
        "derived_from": "recipe defaults and this machine's physical cores (bench disabled)",
    }
    if bench_results:
        from edgekit.stages import bench

        values.update(bench.derive_runtime(bench_results, chosen.name, values))
    return values
