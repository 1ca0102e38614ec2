"""Does optimum export this transformers model type as a decoder with past key values? (OpenVINO and ONNX)

Importing optimum's exporters takes seconds (torch, transformers), so the answer is remembered per
model type and optimum version.
"""

from __future__ import annotations

from pathlib import Path

from edgekit._util.versions import dist_version
from edgekit.store.memo import remembered

TASK = "text-generation-with-past"


def exporter_reason(model_type: str, exporter: str, cache_root: Path) -> str | None:
    """None when optimum's `exporter` ("openvino" or "onnx") exports `model_type` for text generation."""
    inputs = {"model_type": model_type, "exporter": exporter, "optimum": dist_version("optimum"),
              "optimum-intel": dist_version("optimum-intel"), "optimum-onnx": dist_version("optimum-onnx")}  # fmt: skip
    return remembered(cache_root, "support-checks", inputs, lambda: _ask(model_type, exporter))


def _ask(model_type: str, exporter: str) -> str | None:
    import importlib

    from optimum.exporters.tasks import TasksManager

    importlib.import_module(f"optimum.exporters.{exporter}.model_configs")  # registers the exporter's configs
    try:
        tasks = TasksManager.get_supported_tasks_for_model_type(model_type, exporter, library_name="transformers")
    except KeyError:
        return f"optimum's {exporter} exporter does not know the model type {model_type!r}"
    if TASK not in tasks:
        return f"optimum's {exporter} exporter has no {TASK} export for {model_type!r} (only {', '.join(tasks)})"
    return None
