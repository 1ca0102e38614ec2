"""Build-machine commands: build, plan, reference."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from edgekit.cli.common import cache_option, console, err_console, open_cache, recipe_argument, recipe_path

threads_option = click.option(
    "--threads", type=click.IntRange(1, 1024), help="Threads for each stage (default: physical cores)."
)


@click.command()
@recipe_argument
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Write the bundle under DIR/<name>/.")
@cache_option
@threads_option
@click.option("--reference", "reference_dir", type=click.Path(exists=True, file_okay=False),
              help="Import a reference exported by `edgekit reference --export` first.")  # fmt: skip
def build(
    recipe: str | None, out_dir: str | None, cache_dir: str | None, threads: int | None, reference_dir: str | None
) -> None:
    """Build the bundle described by RECIPE (default: the embedded SmolLM2-135M recipe)."""
    from edgekit.errors import GateFailure
    from edgekit.pipeline import build as run_build
    from edgekit.progress import RichProgressReporter
    from edgekit.recipe import load_recipe

    loaded = load_recipe(recipe_path(recipe))
    cache = open_cache(cache_dir)
    if reference_dir:
        from edgekit.stages.reference import import_reference

        import_reference(Path(reference_dir), cache)
    command = "edgekit build " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    with RichProgressReporter(err_console) as progress:
        result = run_build(
            loaded,
            cache=cache,
            progress=progress,
            out_dir=Path(out_dir) if out_dir else None,
            command=command.strip(),
            threads=threads,
        )
    optional = {t.name for t in loaded.targets if not t.required}
    _render_verdicts(result.verdicts, result.excluded, optional)
    for name, reason in result.skipped.items():
        console.print(f"[yellow]{name}: not built[/] (required = false): {reason}", highlight=False)
    for name, reason in result.ladders.items():
        console.print(f"{name}: {reason}", highlight=False)
    console.print(f"bundle: [bold]{result.bundle}[/]  ({result.seconds:.1f} s); the reasons: report.md, report.html")
    if result.failed_required:
        notes = [f"{n}: {result.ladders[n]}" for n in result.failed_required if n in result.ladders]
        raise GateFailure(result.failed_required, result.bundle, notes)


def _render_verdicts(verdicts: dict[str, str], excluded: list[str], optional: set[str]) -> None:
    if not verdicts:
        return
    table = Table("artifact", "verdict", title="accuracy sign-off")
    colours = {"pass": "green", "fail": "red", "inconclusive": "yellow"}
    for name, verdict in verdicts.items():
        note = " (left out of the bundle)" if name in excluded else ""
        if name in optional and verdict != "pass":
            note += " (required = false: does not fail the build)"
        table.add_row(name, f"[{colours.get(verdict, 'white')}]{verdict}[/]{note}")
    console.print(table)


@click.command()
@recipe_argument
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Where the bundle would go (as build).")
@cache_option
@threads_option
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON (schema: edgekit.plan.describe).")
def plan(recipe: str | None, out_dir: str | None, cache_dir: str | None, threads: int | None, as_json: bool) -> None:
    """Show the tasks a build of RECIPE would run: each task's key, inputs, and whether it is cached."""
    from edgekit.plan import make_plan, output_path
    from edgekit.plan.describe import describe
    from edgekit.recipe import load_recipe

    loaded = load_recipe(recipe_path(recipe))
    cache = open_cache(cache_dir)
    final = output_path(loaded, Path(out_dir) if out_dir else None, Path.cwd())
    described = describe(make_plan(loaded, cache_root=cache.root, final=final, out_given=out_dir is not None,
                                   threads=threads), cache)  # fmt: skip
    if as_json:
        click.echo(json.dumps(described, indent=2))
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
    summary = described["summary"]
    console.print(
        f"{summary['tasks']} tasks: {summary['cached']} cached, {summary['to_run']} to run; --json for inputs"
    )


@click.command()
@recipe_argument
@cache_option
@threads_option
@click.option("--export", "export_dir", type=click.Path(file_okay=False), help="Copy the reference to DIR.")
def reference(recipe: str | None, cache_dir: str | None, threads: int | None, export_dir: str | None) -> None:
    """Compute (or reuse) the reference for RECIPE, e.g. on a GPU box, and optionally export it."""
    from edgekit.errors import UsageError
    from edgekit.executors.base import Tools
    from edgekit.executors.local import LocalExecutor
    from edgekit.plan import make_plan
    from edgekit.progress import RichProgressReporter
    from edgekit.recipe import load_recipe
    from edgekit.stages.reference import export_reference, load_reference

    loaded = load_recipe(recipe_path(recipe))
    cache = open_cache(cache_dir)
    planned = make_plan(loaded, cache_root=cache.root, threads=threads)
    if planned.reference is None:
        raise UsageError("this recipe has [validation] enabled = false: there is no reference to compute")
    with RichProgressReporter(err_console) as progress:
        tools = Tools(cache, planned.bundle.threads, planned.llama_cpp_dir)
        entry = LocalExecutor(tools, progress).run([planned.reference])[planned.reference.key]
    meta = load_reference(planned.reference, entry).meta
    took = f"computed in {entry.meta.get('seconds', 0):.1f} s"
    console.print(
        f"reference {entry.key[:16]}: torch {meta['device']} {meta['dtype']} ({meta['device_name']}), "
        f"{meta['scored_tokens']} scored tokens, " + (f"reused from the cache ({took})" if entry.reused else took)
    )
    if export_dir:
        target = export_reference(entry, Path(export_dir))
        console.print(f"exported to {target}; on the build box: edgekit build RECIPE --reference {target}")


COMMANDS = (build, plan, reference)
