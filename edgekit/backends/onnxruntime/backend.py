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
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from edgekit._util.fsutil import ensure_free_space
from edgekit._util.versions import dist_version
from edgekit.backends.base import BuildBackend, BuildEnv, ModelInfo
from edgekit.backends.calibration import add_calibration, remove_calibration
from edgekit.backends.child import run_child
from edgekit.backends.onnxruntime.gates import DEFAULT_GATES
from edgekit.errors import RecipeProblem
from edgekit.observe.progress import Progress
from edgekit.signoff.gates import Gates
from edgekit.store.records import Checkpoint

MODEL = "model.onnx"
ARTIFACT_DIR = "model"
PROVENANCE = "edgekit-provenance.json"
SIDE_FILES = ("tokenizer.json", "config.json", "generation_config.json", "tokenizer_config.json",
              "special_tokens_map.json", "chat_template.jinja")  # fmt: skip
SUMMARY_KEYS = ("tensor_types", "bits_per_weight", "params", "bytes_per_token", "tensor_count", "ops")


class ONNXRuntimeOptions(BaseModel):
    """[targets.options] of an onnxruntime target."""

    model_config = ConfigDict(extra="forbid")

    per_channel: bool = Field(True, description="one weight scale per output channel (False: one per tensor)")
    reduce_range: bool | None = Field(
        None, description="7-bit weights; unset: when the build machine's x86 CPU has no VNNI (see the README)"
    )
    quantize_embedding: bool = Field(True, description="store the embedding table (Gather) as uint8 too")
    keep_float: tuple[str, ...] = Field((), description="fnmatch patterns of MatMul node names to leave in float")
    outlier_ratio: float | None = Field(
        None, gt=1.0, description="leave in float the MatMuls whose input peak exceeds this × the median token's"
    )
    calibration_samples: int = Field(16, ge=1, le=1024, description="outlier_ratio: token windows")
    calibration_tokens: int = Field(128, ge=16, le=4096, description="outlier_ratio: tokens per window")


class ONNXRuntimeBuild(BuildBackend):
    name = "onnxruntime"
    schemes = ("INT8",)
    extra = "onnx"
    required_modules = ("onnxruntime", "onnx", "optimum.exporters.onnx", "tokenizers", "torch", "transformers")
    options_model = ONNXRuntimeOptions
    default_scheme_gates: ClassVar[dict[str, Gates]] = DEFAULT_GATES

    def check_target(self, scheme: str, options: BaseModel) -> list[RecipeProblem]:
        assert isinstance(options, ONNXRuntimeOptions)
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

    def needs_calibration(self, scheme: str, options: BaseModel) -> bool:
        return isinstance(options, ONNXRuntimeOptions) and options.outlier_ratio is not None

    def unsupported(self, model: ModelInfo, env: BuildEnv) -> str | None:
        from edgekit.backends.optimum_support import exporter_reason

        if model.model_type is None:
            return super().unsupported(model, env)
        return exporter_reason(model.model_type, "onnx", env.cache_root)

    def resolve_options(self, scheme: str, options: BaseModel) -> BaseModel:
        """`reduce_range` unset: 7-bit weights on an x86 CPU without VNNI, where ONNX Runtime's u8×s8 kernels
        (pmaddubsw) saturate 8-bit products and wreck the model (measured: mean KLD 7.0 instead of 0.17)."""
        assert isinstance(options, ONNXRuntimeOptions)
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
        self, checkpoint: Checkpoint, out_dir: Path, env: BuildEnv, progress: Progress, provenance: dict[str, str]
    ) -> None:
        weights = sum(p.stat().st_size for p in checkpoint.path.glob("*.safetensors"))
        # FP32 export (2× an FP16 checkpoint) and its preprocessed copy, which may add a transposed embedding.
        ensure_free_space(out_dir, 6 * weights + 2**26)
        spec = {"task": "export", "checkpoint": str(checkpoint.path), "out": str(out_dir)}
        with progress.task("convert  HF → ONNX with past key values (optimum) + ONNX Runtime preprocessing"):
            run_child(
                "edgekit.backends.onnxruntime.child", spec, out_dir / "convert.log", "convert onnxruntime", env.threads
            )
        for name in SIDE_FILES:
            if (checkpoint.path / name).is_file() and not (out_dir / name).exists():
                shutil.copyfile(checkpoint.path / name, out_dir / name)
        (out_dir / PROVENANCE).write_text(json.dumps(provenance, indent=1, sort_keys=True), encoding="utf-8")

    def quantize(
        self,
        converted: Path,
        scheme: str,
        options: Any,
        out_dir: Path,
        env: BuildEnv,
        progress: Progress,
        calibration: Sequence[int] | None = None,
    ) -> tuple[str, dict[str, Any]]:
        from edgekit.backends.onnxruntime.graph import onnx_summary

        assert isinstance(options, ONNXRuntimeOptions)
        artifact = out_dir / ARTIFACT_DIR
        artifact.mkdir()
        source_bytes = sum(p.stat().st_size for p in converted.glob("model.onnx*"))
        ensure_free_space(out_dir, source_bytes // 2 + (2 * source_bytes if options.outlier_ratio else 0) + 2**26)
        summary = {"weights": "int8", "activations": "uint8, dynamic per tensor", **options.model_dump(mode="json")}
        spec: dict[str, Any] = {
            "task": "quantize",
            "converted": str(converted),
            "out": str(artifact),
            "provenance": json.loads((converted / PROVENANCE).read_text(encoding="utf-8")),
            "summary": summary,
            **options.model_dump(mode="json"),
        }
        record = None
        if options.outlier_ratio is not None:
            record = add_calibration(spec, out_dir, calibration, options.calibration_samples,
                                          options.calibration_tokens, "outlier_ratio")  # fmt: skip
        layout = "per channel" if options.per_channel else "per tensor"
        with progress.task(f"quantize  ONNX Runtime dynamic INT8 ({layout}; quantize_dynamic)"):
            try:
                run_child("edgekit.backends.onnxruntime.child", spec, out_dir / "quantize.log",
                          f"quantize onnxruntime {scheme}", env.threads)  # fmt: skip
            finally:
                remove_calibration(out_dir)
        for name in SIDE_FILES:
            if (converted / name).is_file():
                shutil.copyfile(converted / name, artifact / name)
        graph = onnx_summary(artifact / MODEL)
        excluded = json.loads((out_dir / "excluded.json").read_text(encoding="utf-8"))
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
