"""`edgekit build` of several recipes, or on a cluster (`--cluster`), or on named boxes (`--boxes`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit.cli.common import console, progress_reporter, recipe_path


def parse_boxes(boxes: str | None) -> tuple[str, ...] | None:
    if boxes is None:
        return None
    return tuple(dict.fromkeys(b.strip() for b in boxes.split(",") if b.strip()))


def build_many(
    recipes: tuple[str, ...],
    *,
    out_dir: str | None,
    cache_dir: str | None,
    threads: int | None,
    reference_dir: str | None,
    cluster: str | None,
    boxes: str | None,
    command: str,
    release: int | None = None,
) -> None:
    from edgekit.errors import GateFailure
    from edgekit.pipeline.matrix import build_matrix, plan_all
    from edgekit.recipe.load import load_recipe
    from edgekit.store.cache import StageCache

    loaded = [load_recipe(recipe_path(r)) for r in recipes or (None,)]
    if release is not None:
        loaded = [recipe.with_release(release) for recipe in loaded]
    cache = StageCache(Path(cache_dir) if cache_dir else None, verify=cluster is not None)
    with progress_reporter() as progress:
        connected = _connect(cluster, progress) if cluster else None
        try:
            plans = plan_all(loaded, cache=cache, out_dir=Path(out_dir) if out_dir else None, command=command,
                             threads=threads, offered_boxes=connected.boxes() if connected else None,
                             boxes=parse_boxes(boxes))  # fmt: skip
            if reference_dir:
                _import_reference(Path(reference_dir), cache, plans)
            result = build_matrix(plans, cache=cache, progress=progress, cluster=connected)
        finally:
            if connected is not None:
                connected.close()
    _render(result, loaded)
    failed = [name for r in result.results for name in r.failed_required]
    if result.failures:
        raise next(iter(result.failures.values()))
    if failed:
        raise GateFailure(failed, result.results[0].bundle if len(result.results) == 1 else None)


def _import_reference(folder: Path, cache: Any, plans: list[Any]) -> None:
    """The exported reference, checked against every distinct reference the plans need (a mismatch is exit 2)."""
    from edgekit.stages.reference_transfer import import_reference

    for reference in {p.reference.key: p.reference for p in plans if p.reference is not None}.values():
        import_reference(folder, cache, reference)


def _connect(cluster: str, progress: Any) -> Any:
    from edgekit.executors.cluster import RayCluster

    return RayCluster(cluster, progress)


def _render(result: Any, loaded: list[Any]) -> None:
    from edgekit.cli.verdicts import render_verdicts

    optional = {t.name for r in loaded for t in r.targets if not t.required}
    for built in result.results:
        console.print(f"[bold]{built.bundle.name}[/]")
        render_verdicts(built.verdicts, built.excluded, optional)
        console.print(f"bundle: [bold]{built.bundle}[/]; the reasons: report.md, report.html")
    ran = sum(not e.reused for e in result.events)
    console.print(f"{len(result.events)} tasks for {len(result.results)} bundle(s): {ran} ran, "
                  f"{len(result.events) - ran} reused ({result.seconds:.1f} s: tasks {result.tasks_seconds:.1f} s, "
                  f"bundles {result.seconds - result.tasks_seconds:.1f} s)")  # fmt: skip
    if result.fleet_report:
        console.print(f"fleet report: {', '.join(str(p) for p in result.fleet_report)}")
