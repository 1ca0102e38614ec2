"""The build side of every registered backend: `build_backend("gguf")` is its `BuildBackend`.

The registry (`edgekit.registry`) is box-safe: a `BackendSpec` names where a backend's build side lives
but never imports it. This module imports it, on a build machine only (the plan, the stages, the recipe's
checks, doctor): the runtime never imports it (import contracts in pyproject.toml).
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

from edgekit.backends.base import BuildBackend
from edgekit.errors import UsageError
from edgekit.registry import BackendSpec, spec, specs

DECLARED = ("name", "schemes", "extra", "options_model")  # what a BuildBackend subclass must set (see base)


@cache
def build_backend(name: str) -> BuildBackend[Any]:
    """The build side of the backend registered as `name` (an unknown name: UsageError with "did you mean")."""
    return load_build(spec(name))


def build_backends() -> dict[str, BuildBackend[Any]]:
    """The build side of every registered backend, by name."""
    return {name: build_backend(name) for name in specs()}


def load_build(found: BackendSpec) -> BuildBackend[Any]:
    """Import the class `found.build` names and make one; refuse one that is not a complete `BuildBackend`."""
    module, _, attr = found.build.partition(":")
    cls = getattr(importlib.import_module(module), attr, None)
    fix = "fix or uninstall the package that registers it"
    if not (isinstance(cls, type) and issubclass(cls, BuildBackend)):
        raise UsageError(f"backend {found.name!r}: {found.build!r} is not a BuildBackend subclass", fix)
    missing = [a for a in DECLARED if not hasattr(cls, a)]
    if missing:
        raise UsageError(f"backend {found.name!r}: {found.build} does not set {', '.join(missing)}", fix)
    if cls.name != found.name:
        raise UsageError(f"backend {found.name!r}: {found.build} is named {cls.name!r}", fix)
    return cls()
