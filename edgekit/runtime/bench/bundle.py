"""`edgekit bench BUNDLE`: the build's benchmark, on a built bundle, on this box (no torch, no recipe parsing).

Settings come from the bundle's recipe.toml `[bench]` table (read as plain TOML), then the command
line; n_ctx and n_batch from the bundle's runtime config.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from edgekit.errors import UsageError
from edgekit.runtime.bench.benchmark import Benchmark
from edgekit.runtime.bench.results import BenchResult, BenchTarget
from edgekit.runtime.bench.settings import BenchOptions, BenchSettings
from edgekit.runtime.loader import inspect_bundle


def settings_from_bundle(bundle: Path, overrides: dict[str, Any], **run: Any) -> BenchSettings:
    """The bundle's recipe.toml [bench] table (as the build ran it), then the command line's overrides."""
    values: dict[str, Any] = {}
    recipe = bundle / "recipe.toml"
    if recipe.is_file():
        try:
            table = tomllib.loads(recipe.read_text(encoding="utf-8")).get("bench", {})
        except tomllib.TOMLDecodeError:
            table = {}
        values.update({k: v for k, v in table.items() if k in BenchOptions.model_fields})
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        options = BenchOptions.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"] if not str(p).startswith(("tuple", "literal")))
        raise UsageError(f"bench setting {key}: {first['msg']}", "e.g. --concurrency 1,2,4 (each 1 to 4)") from None
    return BenchSettings.from_options(options, **run)


def bench_bundle(
    bundle: Path,
    *,
    artifacts: list[str] | None = None,
    overrides: dict[str, Any] | None = None,
    log: Callable[[str], None] | None = None,
    trusted_keys: Sequence[Path] = (),
) -> BenchResult:
    info = inspect_bundle(bundle, trusted_keys=trusted_keys)  # verifies every file (and the signature) first
    settings = settings_from_bundle(info.path, overrides or {}, n_ctx=info.config.n_ctx, n_batch=info.config.n_batch)
    records = info.manifest["artifacts"]
    if artifacts:
        known = {a["name"] for a in records}
        unknown = [a for a in artifacts if a not in known]
        if unknown:
            raise UsageError(
                f"no artifact named {', '.join(unknown)} in this bundle", f"choose from {', '.join(sorted(known))}"
            )
        records = [a for a in records if a["name"] in artifacts]
    targets = [BenchTarget.from_record(info.path / a["path"], a) for a in records]
    result = Benchmark(targets, settings, log=log).run()
    result.bundle = {"path": str(info.path), "name": info.manifest.get("name"),
                     "artifact_sha256": {a["name"]: a["sha256"] for a in records}}  # fmt: skip
    return result
