"""Build-machine commands: build, plan, reference, probe."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from edgekit.cli.common import (
    cache_option,
    command_line,
    console,
    emit_json,
    json_option,
    open_cache,
    progress_reporter,
    recipe_argument,
    recipe_path,
)
from edgekit.cli.verdicts import render_verdicts as _render_verdicts

threads_option = click.option(
    "--threads", type=click.IntRange(1, 1024), help="Threads for each stage (default: physical cores)."
)


@click.command()
@click.argument("recipes", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Write the bundle under DIR/<name>/.")
@cache_option
@threads_option
@click.option("--reference", "reference_dir", type=click.Path(exists=True, file_okay=False),
              help="Import a reference exported by `edgekit reference --export` first.")  # fmt: skip
@click.option("--release", type=click.IntRange(0), help="The bundle's release number (overrides [bundle] release).")
@click.option(
    "--cluster",
    envvar="EDGEKIT_CLUSTER",
    help="Run the tasks on a Ray cluster: auto, HOST:PORT or ray://HOST:PORT (needs edgekit[cluster]).",
)
@click.option("--boxes", help="Benchmark on these boxes (a,b) instead of the recipe's [[bench.boxes]]; "
              "`local`: on this machine.")  # fmt: skip
@click.option(
    "--box-results",
    "box_results",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help='`edgekit bench BUNDLE --json` from the target box: "fastest" ladders rank by it (repeatable).',
)
@json_option("build")
@click.pass_context
def build(
    ctx: click.Context,
    recipes: tuple[str, ...],
    out_dir: str | None,
    cache_dir: str | None,
    threads: int | None,
    reference_dir: str | None,
    release: int | None,
    cluster: str | None,
    boxes: str | None,
    box_results: tuple[str, ...],
    as_json: bool,
) -> None:
    """Build the bundle of each RECIPE (default: the embedded SmolLM2-135M recipe); tasks they share run once."""
    from edgekit.errors import GateFailure, UsageError
    from edgekit.pipeline.build import build as run_build
    from edgekit.recipe.load import load_recipe
    from edgekit.runtime.bench.box_results import BoxResults

    if len(recipes) > 1 or cluster or boxes is not None:
        from edgekit.cli.matrix import build_many

        if box_results:
            raise UsageError("--box-results ranks one recipe's ladders: give one recipe, without --cluster or --boxes")
        if as_json:
            raise UsageError("--json describes one bundle: give one recipe, without --cluster or --boxes")
        return build_many(recipes, out_dir=out_dir, cache_dir=cache_dir, threads=threads, reference_dir=reference_dir,
                          cluster=cluster, boxes=boxes, command=command_line(ctx), release=release)  # fmt: skip
    loaded = load_recipe(recipe_path(recipes[0] if recipes else None))
    if release is not None:
        loaded = loaded.with_release(release)
    cache = open_cache(cache_dir)
    measured = BoxResults.load([Path(p) for p in box_results]) if box_results else None
    with progress_reporter() as progress:
        result = run_build(loaded, cache=cache, progress=progress, out_dir=Path(out_dir) if out_dir else None,
                           command=command_line(ctx), threads=threads,
                           reference_dir=Path(reference_dir) if reference_dir else None,
                           box_results=measured)  # fmt: skip
    if as_json:
        emit_json("build", _build_document(result))
    else:
        optional = {t.name for t in loaded.targets if not t.required}
        _render_verdicts(result.verdicts, result.excluded, optional)
        for name, reason in result.skipped.items():
            console.print(f"[yellow]{escape(name)}: not built[/] (required = false): {escape(reason)}", highlight=False)
        for name, reason in result.ladders.items():
            console.print(escape(f"{name}: {reason}"), highlight=False)
        console.print(f"bundle: [bold]{escape(str(result.bundle))}[/]  ({result.seconds:.1f} s); the reasons: "
                      "report.md, report.html; what other libraries printed: logs/", highlight=False)  # fmt: skip
    if result.failed_required:
        notes = [f"{n}: {result.ladders[n]}" for n in result.failed_required if n in result.ladders]
        raise GateFailure(result.failed_required, result.bundle, notes)


def _build_document(result: Any) -> dict[str, Any]:
    bundle = Path(result.bundle)
    return {
        "bundle": str(bundle),
        "outcome": "fail" if result.failed_required else "pass",
        "seconds": round(result.seconds, 3),
        "verdicts": result.verdicts,
        "failed_required": result.failed_required,
        "excluded": result.excluded,
        "skipped": result.skipped,
        "ladders": result.ladders,
        "stages": [
            {"id": e.label, "stage": e.stage, "key": e.key, "reused": e.reused, "seconds": round(e.seconds, 3)}
            for e in result.events
        ],
        "stage_seconds": {k: round(v, 3) for k, v in result.stage_seconds.items()},
        "reports": {kind: str(bundle / f"report.{kind}") for kind in ("json", "md", "html")},
        "logs": str(bundle / "logs"),
    }


@click.command()
@recipe_argument
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Where the bundle would go (as build).")
@cache_option
@threads_option
@json_option("plan")
def plan(recipe: str | None, out_dir: str | None, cache_dir: str | None, threads: int | None, as_json: bool) -> None:
    """Show the tasks a build of RECIPE would run: each task's key, inputs, and whether it is cached."""
    from edgekit.pipeline.build import build_log, warn_notices
    from edgekit.plan.describe import describe
    from edgekit.plan.make import make_plan, output_path
    from edgekit.recipe.load import load_recipe

    loaded = load_recipe(recipe_path(recipe))
    cache = open_cache(cache_dir)
    final = output_path(loaded, Path(out_dir) if out_dir else None, Path.cwd())
    with progress_reporter() as progress, build_log(cache) as log:
        planned = make_plan(loaded, cache_root=cache.root, final=final, out_given=out_dir is not None,
                            threads=threads)  # fmt: skip
        warn_notices(progress, "plan", log)
    described = describe(planned, cache)
    if as_json:
        emit_json("plan", described)
        return
    _render_plan(described)


def _render_plan(described: dict[str, Any]) -> None:
    ids = {t["key"]: t["id"] for t in described["tasks"] if t["key"]}
    table = Table("task", "key", "state", "needs", title=f"plan of {described['recipe']}")
    for task in described["tasks"]:
        state = "[green]cached[/]" if task["cached"] else "[yellow]to run[/]"
        if ladder := task.get("ladder"):
            state += f" ({ladder['target']} candidate {ladder['position'] + 1}: {ladder['runs']})"
        needs = ", ".join(ids.get(k, k[:12]) for k in task["deps"])
        table.add_row(task["id"], (task["key"] or "—")[:12], state, needs or "—")
    console.print(table)
    for skipped in described["skipped"]:
        console.print(f"[yellow]{escape(skipped['name'])}: not built[/]: {escape(skipped['reason'])}", highlight=False)
    if described["tokenizer"]:
        console.print(f"token ids from: {described['tokenizer']}")
    summary = described["summary"]
    console.print(
        f"{summary['tasks']} tasks: {summary['cached']} cached, {summary['to_run']} to run; --json for inputs"
    )


@click.command()
@recipe_argument
@cache_option
@threads_option
@click.option("--export", "export_dir", type=click.Path(file_okay=False), help="Copy the reference to DIR.")
@json_option("reference")
def reference(
    recipe: str | None, cache_dir: str | None, threads: int | None, export_dir: str | None, as_json: bool
) -> None:
    """Compute (or reuse) the reference for RECIPE, e.g. on a GPU box, and optionally export it."""
    from edgekit.errors import UsageError
    from edgekit.executors.base import Workspace
    from edgekit.executors.local import LocalExecutor
    from edgekit.pipeline.build import build_log, warn_notices
    from edgekit.plan.make import make_plan
    from edgekit.recipe.load import load_recipe
    from edgekit.stages.reference_transfer import export_reference
    from edgekit.store.results import ReferenceResult

    loaded = load_recipe(recipe_path(recipe))
    cache = open_cache(cache_dir)
    with progress_reporter() as progress, build_log(cache) as log:
        planned = make_plan(loaded, cache_root=cache.root, threads=threads)
        warn_notices(progress, "plan", log)
        if planned.reference is None:
            raise UsageError("this recipe has [validation] enabled = false: there is no reference to compute")
        entry = LocalExecutor(Workspace(cache, planned.env), progress).run([planned.reference])[planned.reference.key]
        meta = ReferenceResult.of(entry)
    target = export_reference(entry, Path(export_dir)) if export_dir else None
    if as_json:
        keys = ("device", "dtype", "device_name", "scored_tokens")
        emit_json(
            "reference",
            {
                "key": entry.key,
                "reused": entry.reused,
                "seconds": entry.meta.get("seconds"),
                **{k: getattr(meta, k) for k in keys},
                "exported_to": str(target) if target else None,
            },
        )
        return
    streamed = meta.memory.get("mode") == "stream"
    took = f"computed in {entry.meta.get('seconds', 0):.1f} s" + (", one decoder layer at a time" if streamed else "")
    console.print(
        f"reference {entry.key[:16]}: torch {meta.device} {meta.dtype} ({meta.device_name}), "
        f"{meta.scored_tokens} scored tokens, " + (f"reused from the cache ({took})" if entry.reused else took)
    )
    if target is not None:
        console.print(f"exported to {target}; on the build box: edgekit build RECIPE --reference {target}")


@click.command()
@click.option("--params", help="Model size: 0.5B, 1B, 3B or 7B parameters (default: 1B).")
@click.option("--arch", type=click.Choice(["llama", "mistral", "qwen2"]), help="Architecture (default: llama).")
@click.option("--schemes", help="Targets, e.g. Q4_K_M,Q8_0,F16,openvino:INT8 (default: every backend installed).")
@click.option("--runs", type=click.IntRange(1, 100), help="Bench runs (medians are reported; default 5).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Write the bundle under DIR/<name>/.")
@cache_option
@threads_option
def probe(
    params: str | None,
    arch: str | None,
    schemes: str | None,
    runs: int | None,
    out_dir: str | None,
    cache_dir: str | None,
    threads: int | None,
) -> None:
    """What a model of this size does on this box: random weights, real tokenizer, every target benchmarked."""
    from edgekit.cli.runtime import render_bench
    from edgekit.diagnose.probe import probe_recipe
    from edgekit.pipeline.build import build as run_build

    items = [s.strip() for s in schemes.split(",") if s.strip()] if schemes else None
    recipe, command = probe_recipe(params, items, arch, runs)
    cache = open_cache(cache_dir)
    with progress_reporter() as progress:
        result = run_build(recipe, cache=cache, progress=progress, out_dir=Path(out_dir) if out_dir else None,
                           command=command, threads=threads, reproduce=command)  # fmt: skip
    bench = json.loads((result.bundle / "report.json").read_text(encoding="utf-8")).get("bench") or {}
    if bench.get("artifacts"):
        render_bench(bench)
    for name, reason in result.skipped.items():
        console.print(f"[yellow]{escape(name)}: not built[/]: {escape(reason)}", highlight=False)
    console.print(f"bundle: [bold]{escape(str(result.bundle))}[/] (random weights: speed only); report.md, "
                  "report.html; what other libraries printed: logs/", highlight=False)  # fmt: skip


COMMANDS = (build, plan, reference, probe)
