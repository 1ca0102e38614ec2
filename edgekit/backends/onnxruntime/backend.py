"""ONNX Runtime backend: optimum's ONNX export, ONNX Runtime preprocessing, dynamic INT8 quantization.

convert:  HF checkpoint → ONNX decoder with past key values (optimum, text-generation-with-past) →
          `quant_pre_process` (graph optimisation + symbolic shape inference), cached once.
quantize: `quantize_dynamic` with QInt8 weights for every MatMul (per output channel by default) and
          the embedding table, activations quantized at run time. Dynamic INT8 gives each call one
          activation scale per tensor, so MatMuls whose inputs carry outlier activations can be kept
          in float: by name pattern (`keep_float`) or measured on the recipe's text (`outlier_ratio`).
          The quantized/float split of every weight and op is read back from the saved graph.

The artifact is a folder: model.onnx, tokenizer.json (for the `tokenizers` library: no transformers
on the box) and the Hugging Face side files. It runs with `edgekit.backends.onnxruntime.engine`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from edgekit._util.versions import dist_version
from edgekit.backends.base import BuildEnv, QuantizeInputs
from edgekit.backends.onnxruntime.gates import DEFAULT_GATES
from edgekit.backends.optimum_backend import ARTIFACT_DIR, OptimumBuild
from edgekit.errors import RecipeProblem
from edgekit.observe.progress import Progress
from edgekit.signoff.gates import Gates

MODEL = "model.onnx"
PROVENANCE = "edgekit-provenance.json"
SIDE_FILES = ("tokenizer.json", "config.json", "generation_config.json", "tokenizer_config.json",
              "special_tokens_map.json", "chat_template.jinja")  # fmt: skip
SUMMARY_KEYS = ("tensor_types", "bits_per_weight", "params", "bytes_per_token", "tensor_count", "ops")


class ONNXRuntimeOptions(BaseModel):
    """[targets.options] of an onnxruntime target."""

    model_config = ConfigDict(extra="forbid")

    per_channel: bool = Field(True, description="one weight scale per output channel (False: one per tensor)")
    reduce_range: bool | None = Field(
        None, description="7-bit weights; unset: when the build machine's x86 CPU has no VNNI (see docs/backends.md)"
    )
    quantize_embedding: bool = Field(True, description="store the embedding table (Gather) as uint8 too")
    keep_float: tuple[str, ...] = Field((), description="fnmatch patterns of MatMul node names to leave in float")
    outlier_ratio: float | None = Field(
        None, gt=1.0, description="leave in float the MatMuls whose input peak exceeds this × the median token's"
    )
    calibration_samples: int = Field(16, ge=1, le=1024, description="outlier_ratio: token windows")
    calibration_tokens: int = Field(128, ge=16, le=4096, description="outlier_ratio: tokens per window")


class ONNXRuntimeBuild(OptimumBuild[ONNXRuntimeOptions]):
    name = "onnxruntime"
    schemes = ("INT8",)
    # An FP32 export; INT8 weights with their scales
    bytes_per_param: ClassVar[dict[str, float]] = {"convert": 4.0, "INT8": 1.05}
    extra = "onnx"
    exporter = "onnx"
    child = "edgekit.backends.onnxruntime.child"
    checkpoint_files = artifact_files = SIDE_FILES
    required_modules = ("onnxruntime", "onnx", "optimum.exporters.onnx", "tokenizers", "torch", "transformers")
    options_model = ONNXRuntimeOptions
    default_scheme_gates: ClassVar[dict[str, Gates]] = DEFAULT_GATES

    def check_target(self, scheme: str, options: ONNXRuntimeOptions) -> list[RecipeProblem]:
        if options.outlier_ratio is not None:
            return []
        return [
            RecipeProblem(
                f"options.{key}",
                "only applies with outlier_ratio (the calibration that finds outlier activations); "
                "set outlier_ratio or remove it",
            )
            for key in ("calibration_samples", "calibration_tokens")
            if key in options.model_fields_set
        ]

    def needs_calibration(self, scheme: str, options: ONNXRuntimeOptions) -> bool:
        return options.outlier_ratio is not None

    def resolve_options(self, scheme: str, options: ONNXRuntimeOptions) -> ONNXRuntimeOptions:
        """`reduce_range` unset: 7-bit weights on an x86 CPU without VNNI, where ONNX Runtime's u8×s8 kernels
        (pmaddubsw) saturate 8-bit products and wreck the model (measured: mean KLD 7.0 instead of 0.17)."""
        if options.reduce_range is not None:
            return options
        from edgekit.runtime.machine import has_int8_dot_product

        return options.model_copy(update={"reduce_range": not has_int8_dot_product()})

    def versions(self, env: BuildEnv) -> dict[str, str | None]:
        return {
            "onnxruntime": dist_version("onnxruntime"),
            "onnx": dist_version("onnx"),
            "optimum-onnx": dist_version("optimum-onnx"),
            "optimum": dist_version("optimum"),
            "tokenizers": dist_version("tokenizers"),
            "transformers": dist_version("transformers"),
            "torch": dist_version("torch"),
        }

    # --- build -----------------------------------------------------------------------------------

    def convert(
        self, checkpoint: Path, out_dir: Path, env: BuildEnv, progress: Progress, provenance: dict[str, str]
    ) -> None:
        weights = sum(p.stat().st_size for p in checkpoint.glob("*.safetensors"))
        label = "convert  HF → ONNX with past key values (optimum) + ONNX Runtime preprocessing"
        # FP32 export (2× an FP16 checkpoint) and its preprocessed copy, which may add a transposed embedding.
        self.export_in_child(checkpoint, out_dir, env, progress, label, 6 * weights + 2**26, {})
        (out_dir / PROVENANCE).write_text(json.dumps(provenance, indent=1, sort_keys=True), encoding="utf-8")

    def quantize(self, inputs: QuantizeInputs[ONNXRuntimeOptions]) -> tuple[str, dict[str, Any]]:
        from edgekit.backends.onnxruntime.graph import onnx_summary

        options, converted = inputs.options, inputs.converted
        source_bytes = sum(p.stat().st_size for p in converted.glob("model.onnx*"))
        free = source_bytes // 2 + (2 * source_bytes if options.outlier_ratio else 0) + 2**26
        summary = {"weights": "int8", "activations": "uint8, dynamic per tensor", **options.model_dump(mode="json")}
        spec: dict[str, Any] = {
            "task": "quantize",
            "provenance": json.loads((converted / PROVENANCE).read_text(encoding="utf-8")),
            "summary": summary,
            **options.model_dump(mode="json"),
        }
        calibrate = None
        if options.outlier_ratio is not None:
            calibrate = (options.calibration_samples, options.calibration_tokens, "outlier_ratio")
        layout = "per channel" if options.per_channel else "per tensor"
        label = f"quantize  ONNX Runtime dynamic INT8 ({layout}; quantize_dynamic)"
        artifact, _, record = self.quantize_in_child(inputs, label, free, spec, calibrate)
        graph = onnx_summary(artifact / MODEL)
        excluded = json.loads((inputs.out_dir / "excluded.json").read_text(encoding="utf-8"))
        details: dict[str, Any] = {
            "format": "onnx",
            "quantization": summary,
            **{k: graph[k] for k in SUMMARY_KEYS},
            "kept_float": excluded,
            "calibration": record,
        }
        if any("transposed" in name for name in _initializer_names(artifact / MODEL)):
            details["note"] = (
                "the tied embedding is stored twice: ONNX Runtime's preprocessing gives lm_head a transposed "
                "copy (params above count both)"
            )
        return ARTIFACT_DIR, details


def _initializer_names(path: Path) -> list[str]:
    import onnx

    return [i.name for i in onnx.load(str(path), load_external_data=False).graph.initializer]
