"""Can the libraries a backend converts with take this model? Asked at planning time, before any weights are read.

transformers must know a model type as a causal LM for the reference and for every backend that converts a
Hugging Face checkpoint; optimum must export it as a decoder with past key values for OpenVINO and ONNX.
Importing either takes seconds (torch), so each answer is remembered per model type and library versions.
"""

from __future__ import annotations

from pathlib import Path

from edgekit._util.versions import dist_version
from edgekit.store.memo import remembered

TASK = "text-generation-with-past"


def transformers_reason(model_type: str | None, architecture: str, from_gguf: bool, cache_root: Path) -> str | None:
    """Why transformers cannot build this model as a causal LM, or None (`from_gguf`: read from a GGUF header)."""
    if model_type is None:
        if from_gguf:
            return f"transformers' GGUF loader does not read the {architecture} architecture"
        return f"its config.json names no model_type ({architecture})"
    inputs = {"model_type": model_type, "transformers": dist_version("transformers")}
    if not remembered(cache_root, "support-checks", inputs, lambda: _causal_lm(model_type)):
        return f"transformers has no causal LM for model type {model_type!r} ({architecture})"
    return None


def _causal_lm(model_type: str) -> bool:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES


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
