"""`edgekit bench BUNDLE`: the build's benchmark, on a built bundle, on this box (no torch, no recipe parsing).

Settings come from the bundle's recipe.toml `[bench]` table (read as plain TOML), then the command
line; n_ctx and n_batch from the bundle's runtime config.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgekit.errors import UsageError
from edgekit.runtime.benchmark import Benchmark, BenchSettings, BenchTarget
from edgekit.runtime.loader import inspect_bundle

RECIPE_KEYS = {
    "prompt_tokens",
    "gen_tokens",
    "runs",
    "threads",
    "concurrency",
    "baseline",
    "bandwidth_mib",
    "loads",
    "warmup_tokens",
}


def settings_from_bundle(bundle: Path, overrides: dict[str, Any]) -> BenchSettings:
    values: dict[str, Any] = {}
    recipe = bundle / "recipe.toml"
    if recipe.is_file():
        try:
            table = tomllib.loads(recipe.read_text(encoding="utf-8")).get("bench", {})
        except tomllib.TOMLDecodeError:
            table = {}
        values.update({k: v for k, v in table.items() if k in RECIPE_KEYS})
    values.update({k: v for k, v in overrides.items() if v is not None})
    if values.get("threads") == "auto":
        values["threads"] = None
    for key in ("threads", "concurrency"):
        if values.get(key) is not None:
            values[key] = tuple(sorted({int(v) for v in values[key]}))
    if any(not 1 <= c <= 4 for c in values.get("concurrency", ())):
        raise UsageError("concurrency values must be 1 to 4", "e.g. --concurrency 1,2,4")
    return BenchSettings(**values)


def bench_bundle(
    bundle: Path,
    *,
    artifacts: list[str] | None = None,
    overrides: dict[str, Any] | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    info = inspect_bundle(bundle)  # verifies every file first
    settings = settings_from_bundle(info.path, overrides or {})
    settings = dataclasses.replace(settings, n_ctx=info.config.n_ctx, n_batch=info.config.n_batch)
    records = info.manifest["artifacts"]
    if artifacts:
        known = {a["name"] for a in records}
        unknown = [a for a in artifacts if a not in known]
        if unknown:
            raise UsageError(
                f"no artifact named {', '.join(unknown)} in this bundle", f"choose from {', '.join(sorted(known))}"
            )
        records = [a for a in records if a["name"] in artifacts]
    targets = [
        BenchTarget(
            a["name"], info.path / a["path"], a["backend"], a["scheme"], (a.get("details") or {}).get("bytes_per_token")
        )
        for a in records
    ]
    result = Benchmark(targets, settings, log=log).run()
    result["bundle"] = {"path": str(info.path), "name": info.manifest.get("name")}
    return result
