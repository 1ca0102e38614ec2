"""A recipe, resolved once into a plan: a DAG of tasks, each holding exactly its inputs.

Resolving checks everything that can be checked without work (preflight), hashes the source, loads
and tokenizes the eval text, and asks each backend for the tool versions its output depends on. No
stage function ever sees the recipe.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.backends.base import BuildEnv
from edgekit.evaldata import CalibrationSet, EvalPlan, load_text
from edgekit.gates import Gates
from edgekit.hashing import sha256_json
from edgekit.plan.architecture import buildable_targets
from edgekit.plan.boxes import Box, boxes_to_bench
from edgekit.plan.calibration import calibration_sets
from edgekit.plan.evaluation import eval_plan
from edgekit.plan.reference import reference_task
from edgekit.plan.source import fetch_task
from edgekit.plan.tasks import (
    STAGE_ORDER,
    BenchTask,
    Bootstrap,
    BundleTask,
    ConvertTask,
    Decide,
    EngineSettings,
    Exclusion,
    FetchTask,
    QuantizeTask,
    ReferenceTask,
    ReportTask,
    SmokeTask,
    TargetPlan,
    Task,
    ValidateTask,
)
from edgekit.plan.tokenizer_check import check_gguf_tokenizer
from edgekit.preflight import preflight
from edgekit.recipe import DEFAULT_RECIPE, Recipe, Target
from edgekit.registry import build_backend
from edgekit.runtime import machine
from edgekit.runtime.bench import peer
from edgekit.runtime.bench.benchmark import BENCH_METHOD, BENCH_SCHEMA
from edgekit.runtime.bench.settings import BenchSettings
from edgekit.sources.synthetic import is_synthetic
from edgekit.sources.synthetic import parse as parse_synthetic
from edgekit.versions import dist_version, tool_versions

BENCH_VERSIONS = {"bench_schema": BENCH_SCHEMA, "bench_method": BENCH_METHOD}
GATE_NAMES = tuple(Gates.model_fields)


@dataclass(frozen=True)
class Plan:
    name: str
    recipe: Path
    tasks: tuple[Task, ...]  # every cached task, dependencies first
    bundle: BundleTask
    reference: ReferenceTask | None
    llama_cpp_dir: str | None = None  # [toolchain] llama_cpp_dir: where convert finds llama.cpp's converter

    def closure(self, *roots: Task) -> tuple[Task, ...]:
        """`roots` and everything they depend on, dependencies first."""
        return dependency_order(roots)


def dependency_order(roots: tuple[Task, ...] | list[Task]) -> tuple[Task, ...]:
    seen: dict[str, Task] = {}

    def visit(task: Task) -> None:
        if task.key in seen:
            return
        for dep in task.deps():
            visit(dep)
        seen[task.key] = task

    for root in roots:
        visit(root)
    # Each stage depends only on earlier stages, so ordering by stage keeps dependencies first and runs
    # like with like (every quantization before the reference loads torch).
    return tuple(sorted(seen.values(), key=lambda t: STAGE_ORDER.index(t.stage)))


def output_path(recipe: Recipe, out_dir: Path | None, project: Path) -> Path:
    base = out_dir if out_dir is not None else project / recipe.spec.bundle.output_dir
    return base.expanduser().absolute() / recipe.name


def make_plan(
    recipe: Recipe,
    *,
    cache_root: Path,
    final: Path | None = None,
    out_given: bool = False,
    threads: int | None = None,
    command: str = "edgekit build",
    reproduce: str | None = None,
    offered_boxes: Mapping[str, Box] | None = None,
    boxes: tuple[str, ...] | None = None,
) -> Plan:
    """The plan of `recipe`. `offered_boxes`: what the cluster offers; `boxes` replaces `[[bench.boxes]]`."""
    preflight(recipe, final, out_given=out_given)
    bench = recipe.spec.bench
    asked = boxes if boxes is not None else tuple(b.name for b in bench.boxes)
    bench_boxes = boxes_to_bench(asked, offered_boxes) if bench.enabled else ()
    threads = threads or machine.physical_cores()
    env = BuildEnv(cache_root=cache_root, llama_cpp_dir=recipe.spec.toolchain.llama_cpp_dir, threads=threads)
    fetch = fetch_task(recipe.spec.model, recipe.base_dir, cache_root)
    kept, skipped = buildable_targets(recipe, fetch, env)
    backend_versions = {b: build_backend(b).versions(env) for b in dict.fromkeys(t.backend for t in kept)}
    if fetch.kind == "gguf" and _reads_hf_tokenizer(recipe, kept):
        check_gguf_tokenizer(fetch, load_text(recipe.spec.validation.text, recipe.base_dir), cache_root)
    cfg = recipe.spec.validation
    evaluation = eval_plan(cfg, recipe.base_dir, fetch, cache_root) if cfg.enabled else None
    reference = reference_task(cfg, fetch, evaluation) if evaluation is not None else None
    provenance = _provenance(fetch, sha256_json(recipe.spec.model.model_dump(mode="json")))
    converts = {b: _convert(fetch, b, v, provenance) for b, v in backend_versions.items()}
    calibration = calibration_sets(recipe, kept, fetch, cache_root, evaluation)
    targets = tuple(_target(recipe, t, converts[t.backend], reference, threads, calibration.get(t.name)) for t in kept)
    bundle = BundleTask(
        name=recipe.name,
        final=str(final or ""),
        recipe_text=recipe.text,
        checkpoint=fetch,
        targets=targets,
        reference=reference,
        bench=_bench(recipe, targets) if bench.enabled and not bench_boxes else None,
        runtime_defaults=recipe.spec.bundle.runtime.model_dump(),
        threads=threads,
        versions=tool_versions({k: v for versions in backend_versions.values() for k, v in versions.items()}),
        report=_report(recipe, Path(final).name if final else recipe.name, command, evaluation, reproduce),
        skipped=skipped,
        release=recipe.spec.bundle.release,
        box_benches=tuple(_bench(recipe, targets, box) for box in bench_boxes),
    )
    tasks = dependency_order(list(bundle.deps()))
    return Plan(recipe.name, recipe.path, tasks, bundle, reference, recipe.spec.toolchain.llama_cpp_dir)


def _reads_hf_tokenizer(recipe: Recipe, targets: list[Target]) -> bool:
    """The reference, and any backend that exports from the dequantized checkpoint, read its HF tokenizer."""
    return recipe.spec.validation.enabled or any(not build_backend(t.backend).converts_gguf for t in targets)


def _convert(fetch: FetchTask, backend: str, versions: dict[str, Any], provenance: dict[str, str]) -> ConvertTask:
    direct = fetch.kind == "gguf" and build_backend(backend).converts_gguf
    return ConvertTask(fetch, backend, versions, provenance, direct=direct)


def _bootstrap(recipe: Recipe) -> Bootstrap:
    cfg = recipe.spec.validation
    return Bootstrap(cfg.bootstrap_resamples, cfg.bootstrap_block_tokens, cfg.seed)


def _engine_settings(recipe: Recipe, threads: int) -> EngineSettings:
    """What runtime.toml will hold before the bench tunes the threads: validation runs the engine that way."""
    runtime = recipe.spec.bundle.runtime
    return EngineSettings(n_ctx=runtime.n_ctx, n_batch=runtime.n_batch, n_threads=threads)


def _target(
    recipe: Recipe,
    target: Target,
    convert: ConvertTask,
    reference: ReferenceTask | None,
    threads: int,
    calibration: CalibrationSet | None,
) -> TargetPlan:
    backend = build_backend(target.backend)
    quantize = QuantizeTask(
        converted=convert,
        backend=target.backend,
        scheme=target.scheme,
        options=backend.resolve_options(target.scheme, target.options).model_dump(mode="json"),
        versions=convert.versions,
        calibration=calibration,
        name=target.name,
    )
    gates = backend.default_gates(target.scheme).merged(recipe.spec.validation.gates, target.gates)
    validate = None
    if reference is not None:
        cfg = recipe.spec.validation
        decide = Decide(gates, cfg.looks) if cfg.decide else None
        validate = ValidateTask(quantize, reference, _bootstrap(recipe), _engine_settings(recipe, threads), decide)
    return TargetPlan(
        name=target.name,
        backend=target.backend,
        scheme=target.scheme,
        required=target.required,
        note=target.note,
        gates=gates,
        gate_sources=_gate_sources(recipe, target),
        quantize=quantize,
        validate=validate,
        smoke=_smoke(recipe, quantize),
    )


def _smoke(recipe: Recipe, quantize: QuantizeTask) -> SmokeTask:
    from edgekit.runtime import smoke

    runtime = recipe.spec.bundle.runtime
    settings = {"n_ctx": runtime.n_ctx, "n_batch": runtime.n_batch, "max_concurrent": 1,
                "warmup_tokens": runtime.warmup_tokens}  # fmt: skip
    return SmokeTask(quantize, smoke.PROMPTS, smoke.TOKENS, settings)


def _gate_sources(recipe: Recipe, target: Target) -> dict[str, str]:
    """Where each threshold came from: the backend's per-scheme default, [validation.gates] or the target."""
    section = recipe.spec.validation.gates
    overridden = set(section.model_fields_set) if section is not None else set()
    own = set(target.gates.model_fields_set) if target.gates is not None else set()

    def source(gate: str) -> str:
        if gate in own:
            return f"recipe [[targets]] {target.name}"
        return "recipe [validation.gates]" if gate in overridden else f"default for {target.backend} {target.scheme}"

    return {gate: source(gate) for gate in GATE_NAMES}


def _bench(recipe: Recipe, targets: tuple[TargetPlan, ...], box: Box | None = None) -> BenchTask:
    runtime = recipe.spec.bundle.runtime
    settings = BenchSettings.from_options(recipe.spec.bench, n_ctx=runtime.n_ctx, n_batch=runtime.n_batch)
    exclusion = None
    validated = [t for t in targets if t.validate is not None]
    if recipe.spec.bundle.exclude_failed and validated:
        exclusion = Exclusion(
            validations=tuple(t.validate for t in validated if t.validate is not None),
            gates=tuple(t.gates for t in validated),
            on_inconclusive=recipe.spec.validation.on_inconclusive,
        )
    return BenchTask(
        artifacts=tuple(t.quantize for t in targets),
        settings=settings.as_dict(),
        machine=box.fingerprint if box is not None else machine.fingerprint(),
        versions={
            "llama-cpp-python": dist_version("llama-cpp-python"),
            **BENCH_VERSIONS,
            **({"peer": peer.identity()} if settings.peer else {}),
        },
        exclusion=exclusion,
        box=box.name if box is not None else None,
        box_labels=dict(box.labels) if box is not None else {},
    )


def _report(
    recipe: Recipe, bundle_name: str, command: str, evaluation: EvalPlan | None, reproduce: str | None
) -> ReportTask:
    cfg = recipe.spec.validation
    default = Path(recipe.path).resolve() == DEFAULT_RECIPE.resolve()
    return ReportTask(
        bundle_name=bundle_name,
        recipe_path=str(recipe.path),
        recipe_sha256=recipe.sha256,
        eval_origin=cfg.text if cfg.enabled else None,
        tasks_files=tuple(cfg.tasks),
        bootstrap=_bootstrap(recipe),
        on_inconclusive=cfg.on_inconclusive,
        exclude_failed=recipe.spec.bundle.exclude_failed,
        command=command,
        reproduce=reproduce or ("edgekit build" if default else f"edgekit build {shlex.quote(str(recipe.path))}"),
        scored_range=(0, len(evaluation.ids)) if evaluation is not None else None,
        scored_sha256=str(evaluation.ids.key_form()["sha256"]) if evaluation is not None else None,
    )


def model_name(uri: str) -> str:
    """A model name from the source alone, so renaming a bundle does not invalidate conversions."""
    if is_synthetic(uri):
        return parse_synthetic(uri).name
    stem = uri.rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"\.(gguf|safetensors)$", "", stem, flags=re.I) or "model"


def _provenance(fetch: FetchTask, model_section_sha256: str) -> dict[str, str]:
    """Metadata written into converted models (GGUF keys; other backends keep it in their config)."""
    from edgekit import __version__

    values = {
        "name": model_name(fetch.uri),
        "general.source.url": fetch.uri,
        "general.quantized_by": f"edgekit {__version__}",
        "edgekit.version": __version__,
        "edgekit.source.uri": fetch.uri,
        "edgekit.source.revision": fetch.revision or "",
        "edgekit.source.checkpoint_key": fetch.key,
        "edgekit.recipe.model_sha256": model_section_sha256,
    }
    if fetch.uri.startswith("hf://"):
        values["general.source.repo_url"] = "https://huggingface.co/" + fetch.uri.removeprefix("hf://")
    if fetch.reconstructed_from is not None:
        values["edgekit.source.reconstructed_from"] = fetch.reconstructed_from
    return values


def iter_tasks(plan: Plan) -> Iterator[Task]:
    yield from plan.tasks
    yield plan.bundle
