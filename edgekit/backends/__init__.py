"""Backend registry.

Built-in backends are registered exactly like third-party ones: through the `edgekit.backends`
entry-point group, plus a tuple of defaults so a source checkout works without reinstalling.
Registering a backend must stay cheap: backend modules import their heavy libraries lazily.
"""

from __future__ import annotations

import importlib
from functools import cache
from importlib.metadata import entry_points

from edgekit.backends.base import Backend
from edgekit.errors import UsageError
from edgekit.suggest import did_you_mean

DEFAULT_BACKENDS: tuple[str, ...] = (
    "edgekit.backends.gguf:GGUFBackend",
    "edgekit.backends.openvino:OpenVINOBackend",
    "edgekit.backends.onnxruntime:ONNXRuntimeBackend",
)


def _load(spec: str) -> type[Backend]:
    module_name, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module_name), attr)


@cache
def registry() -> dict[str, Backend]:
    found: dict[str, Backend] = {}
    classes = [_load(spec) for spec in DEFAULT_BACKENDS]
    classes += [ep.load() for ep in entry_points(group="edgekit.backends")]
    for cls in classes:
        found.setdefault(cls.name, cls())
    return found


def get_backend(name: str) -> Backend:
    backends = registry()
    if name not in backends:
        hint = did_you_mean(name, backends)
        raise UsageError(
            f"unknown backend {name!r}" + (f" (did you mean {hint!r}?)" if hint else ""),
            f"choose one of: {', '.join(sorted(backends))}",
        )
    return backends[name]


__all__ = ["Backend", "get_backend", "registry"]
