"""The backend registry, shared by the build side and the box: one entry point per backend in `edgekit.backends`.

An entry point names a `BackendSpec`: the backend's name, where its build side lives (convert,
quantize, default gates: imported only on a build machine) and where its engine lives (what runs
on the box: imported by `run`, `serve`, `bench`, and by validation). Loading a spec imports nothing
heavy, so the runtime can find an engine without the build side; the build side's own lookup
(`build_backend`) is `edgekit.backends.catalog`, which only build machines import:

    [project.entry-points."edgekit.backends"]
    mybackend = "mypackage.edgekit_backend:SPEC"
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

from edgekit._util.suggest import did_you_mean
from edgekit.errors import MissingDependencyError, UsageError

ENTRY_POINT_GROUP = "edgekit.backends"


@dataclass(frozen=True)
class BackendSpec:
    name: str
    build: str  # "package.module:BuildClass"
    engine: str  # "package.module:open_engine", called as open_engine(artifact, bundle, RuntimeConfig)
    runtime_extra: str  # the pip extra a box installs to run this backend's artifacts

    def engine_module(self) -> ModuleType:
        """The module of the engine (imported now: a box without the backend's packages hears which extra)."""
        try:
            return importlib.import_module(self.engine.partition(":")[0])
        except ImportError as exc:
            raise MissingDependencyError(f"the {self.name} runtime ({exc.name})", self.runtime_extra) from None

    def open_engine(self, artifact: Path, bundle: Path | None, config: Any) -> Any:
        """The engine over `artifact` (a RuntimeConfig configures it): `edgekit.runtime.engines.load_engine`."""
        return getattr(self.engine_module(), self.engine.partition(":")[2])(artifact, bundle, config)


@cache
def specs() -> dict[str, BackendSpec]:
    found: dict[str, BackendSpec] = {}
    for point in entry_points(group=ENTRY_POINT_GROUP):
        spec = point.load()
        if not isinstance(spec, BackendSpec) or spec.name != point.name:
            raise UsageError(
                f"entry point {point.name} = {point.value!r} in group {ENTRY_POINT_GROUP!r} is not a BackendSpec "
                f"named {point.name!r}",
                "fix or uninstall the package that declares it",
            )
        found.setdefault(spec.name, spec)
    if not found:
        raise UsageError(
            f"no backends are registered (entry point group {ENTRY_POINT_GROUP!r} is empty)",
            "install edgekit itself (scripts/install.sh, or pip install -e .), not only its source folder",
        )
    return found


def spec(name: str) -> BackendSpec:
    known = specs()
    if name not in known:
        hint = did_you_mean(name, known)
        raise UsageError(
            f"unknown backend {name!r}" + (f" (did you mean {hint!r}?)" if hint else ""),
            f"choose one of: {', '.join(sorted(known))}",
        )
    return known[name]
