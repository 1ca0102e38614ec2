"""[targets.options] of a gguf target: the levers of llama.cpp's quantizer, checked before any work.

`imatrix` computes an importance matrix with `llama-imatrix` on the calibration text and quantizes with
`llama-quantize --imatrix`; `output_tensor_type`, `token_embedding_type` and `tensor_overrides` are
llama-quantize's `--output-tensor-type`, `--token-embedding-type` and `--tensor-type PATTERN=TYPE`
(PATTERN is a regular expression searched in each tensor name, the first matching override wins).
`sensitivity` measures, for the report only, which layers contribute most to the artifact's KLD.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from edgekit._util.suggest import did_you_mean
from edgekit.errors import RecipeProblem

# The ggml types llama-quantize writes for a tensor without an importance matrix (the IQ1/IQ2/IQ3
# types need one, and some cannot be chosen per tensor at all). Case does not matter, as in llama-quantize.
TENSOR_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q6_K", "Q5_K", "Q5_1", "Q5_0", "Q4_K", "Q4_1", "Q4_0", "Q3_K", "Q2_K",
                "IQ4_NL", "IQ4_XS")  # fmt: skip


def tensor_type(value: str) -> str:
    """A GGUF tensor type name, upper-cased; a ValueError that names the nearest valid one."""
    upper = value.strip().upper()
    if upper in TENSOR_TYPES:
        return upper
    hint = did_you_mean(value, TENSOR_TYPES)
    raise ValueError(
        f"{value!r} is not a GGUF tensor type llama-quantize can write; expected one of {', '.join(TENSOR_TYPES)}"
        + (f" (did you mean {hint!r}?)" if hint else "")
    )


class TensorOverride(BaseModel):
    """One `--tensor-type PATTERN=TYPE`: tensors whose name matches `pattern` are written as `type`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pattern: str = Field(min_length=1, max_length=200, description="regular expression searched in tensor names")
    type: str

    @field_validator("pattern")
    @classmethod
    def _regex(cls, value: str) -> str:
        value = value.lower()  # llama-quantize lower-cases patterns; tensor names are lower case
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"{value!r} is not a regular expression ({exc})") from None
        return value

    @field_validator("type")
    @classmethod
    def _type(cls, value: str) -> str:
        return tensor_type(value)


class GGUFOptions(BaseModel):
    """[targets.options] of a gguf target."""

    model_config = ConfigDict(extra="forbid")

    imatrix: bool = Field(False, description="quantize with an importance matrix from the calibration text")
    imatrix_chunks: int = Field(32, ge=2, le=4096, description="imatrix: windows of the calibration text")
    imatrix_context: int = Field(512, ge=32, le=32768, description="imatrix: tokens per window")
    output_tensor_type: str | None = Field(None, description="type of output.weight (--output-tensor-type)")
    token_embedding_type: str | None = Field(None, description="type of token_embd.weight (--token-embedding-type)")
    tensor_overrides: tuple[TensorOverride, ...] = Field((), max_length=256)
    sensitivity: bool = Field(False, description="report which layers contribute most to the KLD")
    sensitivity_windows: int = Field(2, ge=1, le=64, description="sensitivity: eval windows per measurement")
    sensitivity_budget_seconds: float = Field(300.0, gt=0, le=86_400, description="sensitivity: skip when longer")

    @field_validator("output_tensor_type", "token_embedding_type")
    @classmethod
    def _type(cls, value: str | None) -> str | None:
        return None if value is None else tensor_type(value)

    @property
    def uses_tools(self) -> bool:
        """Whether quantizing runs the `llama-quantize` binary (with a matrix or per-tensor types) or the bindings."""
        return self.imatrix or bool(self.output_tensor_type or self.token_embedding_type or self.tensor_overrides)


def option_problems(scheme: str, options: GGUFOptions) -> list[RecipeProblem]:
    """Options that are each valid but contradict each other or the scheme (they would be ignored)."""
    given = options.model_fields_set
    problems = []
    for flag, settings in (("imatrix", ("imatrix_chunks", "imatrix_context")),
                           ("sensitivity", ("sensitivity_windows", "sensitivity_budget_seconds"))):  # fmt: skip
        if not getattr(options, flag):
            problems += [RecipeProblem(f"options.{key}", f"is set but {flag} is not enabled; set {flag} = true or "
                                       "remove it") for key in settings if key in given]  # fmt: skip
    if scheme == "F16":
        levers = [k for k in ("imatrix", "output_tensor_type", "token_embedding_type", "tensor_overrides",
                              "sensitivity") if k in given and getattr(options, k)]  # fmt: skip
        problems += [RecipeProblem(f"options.{key}", "does nothing for scheme 'F16' (the converted model, not "
                                   "quantized); remove it or choose a quantized scheme") for key in levers]  # fmt: skip
    return problems
