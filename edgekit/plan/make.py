"""A recipe, resolved once into a plan: a DAG of tasks, each holding exactly its inputs.

Resolving checks everything that can be checked without work (preflight), hashes the source, loads
and tokenizes the eval text (with llama.cpp's reading of a GGUF source whose every target is a GGUF, else with
the Hugging Face tokenizer: `edgekit.plan.eval_tokenizer`), and asks each backend for the tool versions its
output depends on. No stage function ever sees the recipe.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit._util.hashing import sha256_json
from edgekit._util.versions import dist_version, tool_versions
from edgekit.backends.base import BuildEnv
from edgekit.backends.catalog import build_backend
from edgekit.errors import UsageError
from edgekit.plan.architecture import buildable_targets
from edgekit.plan.boxes import Box, boxes_to_bench
from edgekit.plan.calibration import calibration_source
from edgekit.plan.eval_tokenizer import ids_tokenizer
from edgekit.plan.evaluation import eval_plan
from edgekit.plan.preflight import preflight
from edgekit.plan.reference import reference_task
from edgekit.plan.source import fetch_task
from edgekit.plan.targets import TargetInputs, plan_target
from edgekit.plan.task_base import STAGE_ORDER
from edgekit.plan.tasks import (
    AutoTarget,
    BenchTask,
    Bootstrap,
    BundleTask,
    ConvertTask,
    Exclusion,
    FetchTask,
    ReferenceTask,
    ReportTask,
    TargetPlan,
    Task,
)
from edgekit.recipe.load import DEFAULT_RECIPE, Recipe
from edgekit.runtime import machine
from edgekit.runtime.bench import peer
from edgekit.runtime.bench.benchmark import BENCH_METHOD, BENCH_SCHEMA
from edgekit.runtime.bench.box_results import BoxResults
from edgekit.runtime.bench.settings import BenchSettings
from edgekit.signoff.evaldata import EvalPlan
from edgekit.sources.synthetic import is_synthetic
from edgekit.sources.synthetic import parse as parse_synthetic

BENCH_VERSIONS = {"bench_schema": BENCH_SCHEMA, "bench_method": BENCH_METHOD}


@dataclass(frozen=True)
class Plan:
    name: str
    recipe: Path
    tasks: tuple[Task, ...]  # every cached task, dependencies first
    bundle: BundleTask
    reference: ReferenceTask | None
    env: BuildEnv  # what its stages and backends are given: the cache root, threads, [toolchain] llama_cpp_dir

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
    box_results: BoxResults | None = None,
) -> Plan:
    """The plan of `recipe`. `offered_boxes`: what the cluster offers; `boxes` replaces `[[bench.boxes]]`;
    `box_results`: the target box's figures, by which "fastest" ladders rank their candidates."""
    threads = threads or machine.physical_cores()
    env = BuildEnv(cache_root=cache_root, llama_cpp_dir=recipe.spec.toolchain.llama_cpp_dir, threads=threads)
    preflight(recipe, final, out_given=out_given, env=env)
    asked = boxes if boxes is not None else tuple(b.name for b in recipe.spec.bench.boxes)
    bench_boxes = boxes_to_bench(asked, offered_boxes) if recipe.spec.bench.enabled else ()
    fetch = fetch_task(recipe.spec.model, recipe.base_dir, cache_root)
    kept, skipped = buildable_targets(recipe, fetch, env)
    backend_versions = {b: build_backend(b).versions(env) for b in dict.fromkeys(t.backend for t in kept)}
    tokenizer = ids_tokenizer(fetch, kept)  # a kept target that reads the HF tokenizer agrees with llama.cpp
    cfg = recipe.spec.validation
    evaluation = eval_plan(cfg, recipe.base_dir, fetch, cache_root, tokenizer) if cfg.enabled else None
    reference = reference_task(cfg, fetch, evaluation) if evaluation is not None else None
    provenance = _provenance(fetch, sha256_json(recipe.spec.model.model_dump(mode="json")))
    converts = {b: _convert(fetch, b, v, provenance) for b, v in backend_versions.items()}
    calibration = calibration_source(recipe, kept, fetch, cache_root, evaluation, tokenizer)
    inputs = TargetInputs(recipe, converts, reference, _bootstrap(recipe), calibration, threads)
    planned = [plan_target(inputs, t, i) for i, t in enumerate(kept)]
    targets = tuple(t for t in planned if isinstance(t, TargetPlan))
    auto = tuple(t for t in planned if isinstance(t, AutoTarget))
    tokenized = tokenizer.label if evaluation is not None or calibration is not None else None
    report = _report(recipe, Path(final).name if final else recipe.name, command, evaluation, reproduce, tokenized)
    bench = _bench(recipe, targets) if recipe.spec.bench.enabled else None  # "fastest" ladders: on this machine
    auto = tuple(dataclasses.replace(a, bench=fastest_bench(bench, a, report)) if a.objective == "fastest" and bench
                 else a for a in auto)  # fmt: skip
    if box_results is not None:
        auto = _ranked_on_the_box(auto, box_results)
    bundle = BundleTask(
        name=recipe.name,
        final=str(final or ""),
        recipe_text=recipe.text,
        checkpoint=fetch,
        targets=targets,
        reference=reference,
        bench=bench if not bench_boxes else None,
        runtime_defaults=recipe.spec.bundle.runtime.model_dump(),
        threads=threads,
        versions=tool_versions({k: v for versions in backend_versions.values() for k, v in versions.items()}),
        report=report,
        skipped=skipped,
        auto=auto,
        release=recipe.spec.bundle.release,
        box_benches=tuple(_bench(recipe, targets, box) for box in bench_boxes),
    )
    tasks = dependency_order(list(bundle.deps()))
    return Plan(recipe.name, recipe.path, tasks, bundle, reference, env)


def _ranked_on_the_box(auto: tuple[AutoTarget, ...], box_results: BoxResults) -> tuple[AutoTarget, ...]:
    """The "fastest" ladders ranked by the box's figures: their candidates are not benchmarked here."""
    if not any(a.objective == "fastest" for a in auto):
        raise UsageError('--box-results ranks the candidates of a ladder with objective = "fastest"; this recipe has '
                         "none", 'add objective = "fastest" to a scheme = "auto" target, or leave it out')  # fmt: skip
    return tuple(dataclasses.replace(a, bench=None, box_results=box_results) if a.objective == "fastest" else a
                 for a in auto)  # fmt: skip


def _convert(fetch: FetchTask, backend: str, versions: dict[str, Any], provenance: dict[str, str]) -> ConvertTask:
    direct = fetch.kind == "gguf" and build_backend(backend).converts_gguf
    return ConvertTask(fetch, backend, versions, provenance, direct=direct)


def _bootstrap(recipe: Recipe) -> Bootstrap:
    cfg = recipe.spec.validation
    return Bootstrap(cfg.bootstrap_resamples, cfg.bootstrap_block_tokens, cfg.seed)


def _bench(recipe: Recipe, targets: tuple[TargetPlan, ...], box: Box | None = None) -> BenchTask:
    runtime = recipe.spec.bundle.runtime
    settings = BenchSettings.from_options(recipe.spec.bench, n_ctx=runtime.n_ctx, n_batch=runtime.n_batch)
    template = BenchTask(
        artifacts=(),
        settings=settings.as_dict(),
        machine=box.fingerprint if box is not None else machine.fingerprint(),
        versions={
            "llama-cpp-python": dist_version("llama-cpp-python"),
            **BENCH_VERSIONS,
            **({"peer": peer.identity()} if settings.peer else {}),
        },
        box=box.name if box is not None else None,
        box_labels=dict(box.labels) if box is not None else {},
    )
    cfg = recipe.spec.validation
    return bench_over(template, targets, recipe.spec.bundle.exclude_failed, cfg.on_inconclusive)


def bench_over(template: BenchTask, targets: Sequence[TargetPlan], exclude_failed: bool, on_inconclusive: str
               ) -> BenchTask:  # fmt: skip
    """The bench of `targets` with `template`'s settings; with `exclude_failed`, only those that pass are measured."""
    validated = [t for t in targets if t.validate is not None]
    exclusion = None
    if exclude_failed and validated:
        exclusion = Exclusion(
            validations=tuple(t.validate for t in validated if t.validate is not None),
            gates=tuple(t.gates for t in validated),
            on_inconclusive=on_inconclusive,
        )
    artifacts = tuple(t.quantize for t in targets)
    return dataclasses.replace(template, artifacts=artifacts, names=tuple(a.name for a in artifacts),
                               exclusion=exclusion)  # fmt: skip


def fastest_bench(bench: BenchTask, auto: AutoTarget, report: ReportTask) -> BenchTask:
    """Objective "fastest": every candidate of the ladder that passes its gates, measured on this box."""
    return bench_over(bench, auto.candidates, True, report.on_inconclusive)


def _report(recipe: Recipe, bundle_name: str, command: str, evaluation: EvalPlan | None, reproduce: str | None,
            tokenizer: str | None) -> ReportTask:  # fmt: skip
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
        tokenizer=tokenizer,
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
