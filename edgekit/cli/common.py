"""What every command module shares: the consoles, the recipe and cache arguments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import Console

console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

cache_option = click.option(
    "--cache-dir",
    type=click.Path(file_okay=False),
    envvar="EDGEKIT_CACHE",
    help="Stage cache (default ~/.cache/edgekit).",
)
recipe_argument = click.argument("recipe", required=False, type=click.Path(dir_okay=False))


def recipe_path(recipe: str | None) -> Path:
    from edgekit.recipe import DEFAULT_RECIPE

    return Path(recipe) if recipe else DEFAULT_RECIPE


def open_cache(cache_dir: str | None) -> Any:
    from edgekit.cache import StageCache

    return StageCache(Path(cache_dir) if cache_dir else None)
