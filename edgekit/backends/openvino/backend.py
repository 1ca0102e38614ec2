"""OpenVINO IR backend: optimum-intel export, NNCF weight compression, openvino-tokenizers.

convert:  HF checkpoint → one stateful FP16 IR (optimum-intel `OVModelForCausalLM`, export=True,
          task text-generation-with-past) plus openvino_tokenizer.xml / openvino_detokenizer.xml.
          Exporting is the slow part (torch tracing, ~30 s for 135M parameters); every scheme and
          option set compresses this one cached export, so adding INT4 next to INT8, or trying
          another group size, costs a compression and not another trace.
quantize: FP16 IR → NNCF `compress_weights`: INT8 (INT8_ASYM per output channel, OpenVINO's default
          for LLM weights) or INT4 (group-wise, `ratio` of the weights in INT4 and the rest INT8,
          optional data-aware AWQ / scale estimation calibrated on the recipe's text). The stored
          precision of every weight is read back from the IR (`_openvino_ir`).

The artifact is a folder: the IR, the tokenizer IRs and the Hugging Face side files the engine reads
(config, generation config, tokenizer config, chat template). It runs with `edgekit.backends.openvino.engine`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from edgekit._util.versions import dist_version
from edgekit.backends.base import BuildEnv, QuantizeInputs
from edgekit.backends.openvino.gates import DEFAULT_GATES
from edgekit.backends.optimum_backend import ARTIFACT_DIR, OptimumBuild
from edgekit.errors import RecipeProblem
from edgekit.observe.progress import Progress
from edgekit.signoff.gates import Gates

MODEL_XML = "openvino_model.xml"
SIDE_FILES = ("config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json",
              "chat_template.jinja")  # fmt: skip
TOKENIZER_IRS = ("openvino_tokenizer.xml", "openvino_tokenizer.bin", "openvino_detokenizer.xml",
                 "openvino_detokenizer.bin")  # fmt: skip
INT4_ONLY = ("group_size", "ratio", "awq", "scale_estimation", "calibration_samples", "calibration_tokens")
SUMMARY_KEYS = ("tensor_types", "bits_per_weight", "params", "bytes_per_token", "tied_embeddings", "tensor_count")


class OpenVINOOptions(BaseModel):
    """[targets.options] of an openvino target."""

    model_config = ConfigDict(extra="forbid")

    sym: bool = Field(False, description="symmetric (no zero point): INT8_SYM / INT4_SYM instead of *_ASYM")
    group_size: int = Field(128, description="INT4: weights per scale; -1 = one scale per output channel")
    ratio: float = Field(1.0, gt=0.0, le=1.0, description="INT4: share of weights in INT4, the rest in INT8")
    awq: bool = Field(False, description="INT4: activation-aware weight scaling (data-aware)")
    scale_estimation: bool = Field(False, description="INT4: fit the scales on calibration data (data-aware)")
    calibration_samples: int = Field(64, ge=1, le=1024, description="INT4 data-aware: token windows")
    calibration_tokens: int = Field(128, ge=16, le=4096, description="INT4 data-aware: tokens per window")

    @field_validator("group_size")
    @classmethod
    def _group(cls, value: int) -> int:
        if value != -1 and not (16 <= value <= 4096 and value & (value - 1) == 0):
            raise ValueError("must be -1 (per output channel) or a power of two from 16 to 4096")
        return value


def data_aware(options: OpenVINOOptions) -> bool:
    """INT4 compression that reads activations: AWQ, scale estimation, or choosing which weights stay INT8."""
    return options.awq or options.scale_estimation or options.ratio < 1.0


class OpenVINOBuild(OptimumBuild[OpenVINOOptions]):
    name = "openvino"
    schemes = ("INT8", "INT4")
    # FP16 IR; INT8 weights with a scale per channel; INT4 groups with the embedding and head kept in INT8
    bytes_per_param: ClassVar[dict[str, float]] = {"convert": 2.0, "INT8": 1.05, "INT4": 0.7}
    extra = "openvino"
    exporter = "openvino"
    child = "edgekit.backends.openvino.child"
    checkpoint_files = SIDE_FILES
    artifact_files = (*TOKENIZER_IRS, *SIDE_FILES)
    required_modules = ("openvino", "openvino_tokenizers", "nncf", "optimum.intel", "torch", "transformers")
    options_model = OpenVINOOptions
    default_scheme_gates: ClassVar[dict[str, Gates]] = DEFAULT_GATES
    # scheme = "auto": INT4 with 100%, 80%, 60% of the weights in INT4 (the rest INT8), each data-free and then
    # with AWQ + scale estimation, then INT8 — cheapest (smallest) first.
    default_ladder: ClassVar[tuple[tuple[str, dict[str, Any]], ...]] = (
        *(
            step
            for ratio in (1.0, 0.8, 0.6)
            for step in (("INT4", {"ratio": ratio}), ("INT4", {"ratio": ratio, "awq": True, "scale_estimation": True}))
        ),
        ("INT8", {}),
    )

    def check_target(self, scheme: str, options: OpenVINOOptions) -> list[RecipeProblem]:
        given = options.model_fields_set
        problems = []
        if scheme == "INT8":
            for key in INT4_ONLY:
                if key in given:
                    problems.append(
                        RecipeProblem(
                            f"options.{key}",
                            "only applies to scheme 'INT4' (INT8 has one scale per output channel and no "
                            "calibration); remove it or use scheme = 'INT4'",
                        )
                    )
        elif not data_aware(options):
            for key in ("calibration_samples", "calibration_tokens"):
                if key in given:
                    problems.append(
                        RecipeProblem(
                            f"options.{key}",
                            "is set but nothing uses calibration data; enable awq or scale_estimation, "
                            "set ratio below 1, or remove it",
                        )
                    )
        return problems

    def needs_calibration(self, scheme: str, options: OpenVINOOptions) -> bool:
        return scheme == "INT4" and data_aware(options)

    def versions(self, env: BuildEnv) -> dict[str, str | None]:
        return {
            "openvino": dist_version("openvino"),
            "openvino-tokenizers": dist_version("openvino-tokenizers"),
            "nncf": dist_version("nncf"),
            "optimum-intel": dist_version("optimum-intel"),
            "optimum": dist_version("optimum"),
            "transformers": dist_version("transformers"),
            "torch": dist_version("torch"),
        }

    # --- build -----------------------------------------------------------------------------------

    def convert(
        self, checkpoint: Path, out_dir: Path, env: BuildEnv, progress: Progress, provenance: dict[str, str]
    ) -> None:
        weights = sum(p.stat().st_size for p in checkpoint.glob("*.safetensors"))
        label = "convert  HF → OpenVINO IR FP16 (optimum-intel) + tokenizer (openvino-tokenizers)"
        # FP16 IR (≤ FP16 checkpoint) + tokenizer + slack
        self.export_in_child(checkpoint, out_dir, env, progress, label, 2 * weights + 2**26, {"provenance": provenance})

    def quantize(self, inputs: QuantizeInputs[OpenVINOOptions]) -> tuple[str, dict[str, Any]]:
        from edgekit.backends.openvino.ir import ir_summary

        scheme, options = inputs.scheme, inputs.options
        mode = f"{scheme}_{'SYM' if options.sym else 'ASYM'}"
        calibrate = None
        if scheme == "INT4" and data_aware(options):
            calibrate = (options.calibration_samples, options.calibration_tokens, "data-aware INT4 compression")
        what = mode + (f" g{options.group_size} ratio {options.ratio:g}" if scheme == "INT4" else "")
        extras = [n for n, on in (("AWQ", options.awq), ("scale estimation", options.scale_estimation)) if on]
        label = f"quantize  OpenVINO {what}{' + ' + ', '.join(extras) if extras else ''} (NNCF)"
        free = (inputs.converted / "openvino_model.bin").stat().st_size // 2 + 2**26
        spec = {"task": "compress", "mode": mode, **options.model_dump()}
        artifact, log, record = self.quantize_in_child(inputs, label, free, spec, calibrate)
        summary = ir_summary(artifact / MODEL_XML)
        details: dict[str, Any] = {
            "format": "openvino-ir",
            "compression": {
                "mode": mode,
                **(options.model_dump(include=set(INT4_ONLY[:4])) if scheme == "INT4" else {}),
            },
            **{k: summary[k] for k in SUMMARY_KEYS},
            "calibration": record,
        }
        if summary["group_sizes"]:
            details["group_sizes"] = summary["group_sizes"]
            asked = str(options.group_size)
            if scheme == "INT4" and options.group_size != -1 and set(summary["group_sizes"]) != {asked}:
                details["note"] = (
                    f"group size {asked} does not divide every weight's input channels; NNCF used "
                    f"{', '.join(sorted(summary['group_sizes'], key=int))} where it had to (the tensor types above "
                    "are what was written)"
                )
        if "calibration:" in log:
            details["calibration_log"] = next(line for line in log.splitlines() if line.startswith("calibration:"))
        return ARTIFACT_DIR, details
