"""The recipe's schema: every section of a recipe as a pydantic model (`extra="forbid"`).

Everything wrong with a recipe is reported at once, before any work starts: the file, the key,
what was expected and, for a misspelt key or value, the nearest valid one.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from edgekit._util.suggest import did_you_mean
from edgekit.errors import SourceError
from edgekit.recipe.problems import NAME_PATTERN
from edgekit.runtime.bench.settings import BenchOptions
from edgekit.signoff.gates import Gates
from edgekit.sources.synthetic import SCHEME as SYNTHETIC
from edgekit.sources.synthetic import parse as synthetic_spec

SOURCE_SCHEMES = ("hf://", "pkg://", "file://", "synthetic://")
AUTO = "auto"  # the scheme of a target that picks the first candidate of its ladder that passes


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSection(_Section):
    source: str = Field(
        description="hf://ORG/NAME, pkg://PACKAGE/PATH, a local folder or file, or synthetic://ARCH?params=1B"
    )
    revision: str | None = Field(None, description="branch, tag or commit sha (hf:// only)")
    allow_pickle: bool = False
    allow_patterns: tuple[str, ...] | None = None
    trust_remote_code: Literal[False] = False
    tokenizer: str | None = Field(
        None, description="the model's original tokenizer files: hf://ORG/NAME (with tokenizer_revision) or a folder"
    )
    tokenizer_revision: str | None = Field(None, description="branch, tag or commit sha of an hf:// tokenizer")

    @field_validator("source")
    @classmethod
    def _source_form(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        if "://" in value and not value.startswith(SOURCE_SCHEMES):
            scheme = value.split("://", 1)[0] + "://"
            hint = did_you_mean(scheme, SOURCE_SCHEMES)
            raise ValueError(
                f"unknown source scheme {scheme!r}; expected hf://ORG/NAME, pkg://PACKAGE/PATH, a path or "
                "synthetic://ARCH?params=SIZE" + (f" (did you mean {hint!r}?)" if hint else "")
            )
        if value.startswith("hf://") and not re.fullmatch(r"hf://[\w.-]+/[\w.-]+", value):
            raise ValueError("expected hf://ORG/NAME")
        if value.startswith("pkg://") and not re.fullmatch(r"pkg://[A-Za-z_][\w.]*/.+", value):
            raise ValueError("expected pkg://PACKAGE/PATH/INSIDE/IT")
        if value.startswith(SYNTHETIC):
            try:
                synthetic_spec(value)
            except SourceError as exc:
                raise ValueError(f"{exc.message}; {exc.hint}" if exc.hint else exc.message) from None
        return value

    @model_validator(mode="after")
    def _revision_for_hub(self) -> ModelSection:
        if self.source.startswith("hf://") and not self.revision:
            raise ValueError(
                "an hf:// source needs a pinned `revision` (a commit sha, or a branch or tag "
                "whose resolved commit is recorded)"
            )
        if self.revision and not self.source.startswith("hf://"):
            raise ValueError("`revision` only applies to hf:// sources; remove it")
        hub_tokenizer = (self.tokenizer or "").startswith("hf://")
        if hub_tokenizer and not self.tokenizer_revision:
            raise ValueError("an hf:// `tokenizer` needs a pinned `tokenizer_revision` (a commit sha, branch or tag)")
        if self.tokenizer_revision and not hub_tokenizer:
            raise ValueError("`tokenizer_revision` only applies to an hf:// `tokenizer`; remove it")
        return self

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer_form(cls, value: str | None) -> str | None:
        if value is not None and value.startswith("hf://") and not re.fullmatch(r"hf://[\w.-]+/[\w.-]+", value):
            raise ValueError("expected hf://ORG/NAME or a local folder")
        return value


class LadderStep(_Section):
    """One candidate of a `scheme = "auto"` target: a scheme, and options over the target's own."""

    scheme: str
    options: dict[str, Any] = Field(default_factory=dict)


class TargetSpec(_Section):
    backend: str
    scheme: str = Field(description='a scheme of the backend, or "auto": the first of `ladder` that passes')
    name: Annotated[str, Field(pattern=NAME_PATTERN)] | None = None
    required: bool = True  # a failing required artifact fails the build
    options: dict[str, Any] = Field(default_factory=dict)
    gates: Gates | None = None
    note: str | None = Field(None, max_length=4000, description="shown beside this artifact in the report")
    ladder: tuple[str | LadderStep, ...] | None = Field(None, min_length=1, max_length=32)
    objective: Literal["smallest", "fastest"] | None = None

    @model_validator(mode="after")
    def _ladder_only_for_auto(self) -> TargetSpec:
        if self.scheme != AUTO:
            for key in ("ladder", "objective"):
                if getattr(self, key) is not None:
                    raise ValueError(f'`{key}` only applies to scheme = "{AUTO}"; remove it or set scheme = "{AUTO}"')
        return self


class ClozeTask(_Section):
    enabled: bool = True
    items: int = Field(400, ge=10, le=100_000, description="at most this many sentence-final words")
    min_word_chars: int = Field(3, ge=1, le=20)


DEFAULT_PROMPTS = (
    "What is the capital of France?",
    "Name three colours of the rainbow.",
    "Write one sentence about the sea.",
    "What is 12 plus 7?",
    "Give a word that means the same as happy.",
)


class ValidationSection(_Section):
    enabled: bool = True
    text: str = "pkg://edgekit/data/botchan.txt"
    max_tokens: int = Field(8192, ge=256, le=10_000_000)
    context_length: int = Field(512, ge=32, le=131072)
    reference_device: Literal["auto", "cpu", "cuda"] = "auto"
    reference_dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    noise_floor_dtype: Literal["none", "float32", "float16", "bfloat16"] = "bfloat16"
    reference_memory: Literal["auto", "stream", "full"] = Field(
        "auto", description="stream: one decoder layer at a time (same figures, bounded memory); full: whole model"
    )
    top_k: int = Field(64, ge=1, le=1024, description="reference probabilities kept per token")
    tail_samples: int = Field(64, ge=0, le=1024, description="tokens sampled from the reference's tail")
    bootstrap_resamples: int = Field(1000, ge=100, le=100_000)
    bootstrap_block_tokens: int = Field(64, ge=1, le=4096)
    seed: int = 0
    cloze: ClozeTask = ClozeTask()
    tasks: tuple[str, ...] = Field((), description="JSONL multiple-choice task files")
    prompts: tuple[Annotated[str, Field(min_length=1, max_length=1000)], ...] = Field(
        DEFAULT_PROMPTS,
        max_length=20,
        description="short prompts: for a chat model, the report compares greedy completions of the reference and "
        "each artifact",
    )
    gates: Gates | None = None
    on_inconclusive: Literal["warn", "fail"] = "warn"
    decide: bool = Field(
        False,
        description="evaluate in looks, up to max_tokens, until every gate is decided (intervals widened for the "
        "repeated looks)",
    )
    looks: int = Field(4, ge=2, le=64, description="decide: the most looks; each interval is at level 1 - 0.05/looks")

    @model_validator(mode="after")
    def _context_fits(self) -> ValidationSection:
        if self.context_length > self.max_tokens:
            raise ValueError(f"context_length ({self.context_length}) is larger than max_tokens ({self.max_tokens})")
        if "looks" in self.model_fields_set and not self.decide:
            raise ValueError("`looks` only applies with decide = true; set decide = true or remove looks")
        return self


class CalibrationSection(_Section):
    text: str | None = Field(
        None,
        description="text for data-aware quantization; default: the end of the [validation] text, past every "
        "scored token",
    )


class BenchBox(_Section):
    """`[[bench.boxes]]`: a target box (a cluster node started with `edgekit agent --box NAME`) to benchmark on."""

    name: Annotated[str, Field(pattern=NAME_PATTERN)]


class BenchSection(BenchOptions):
    enabled: bool = True
    boxes: tuple[BenchBox, ...] = Field((), description="benchmark on these boxes of the cluster, one runtime each")

    @field_validator("boxes")
    @classmethod
    def _distinct_boxes(cls, value: tuple[BenchBox, ...]) -> tuple[BenchBox, ...]:
        names = [b.name for b in value]
        if len(set(names)) != len(names):
            raise ValueError(f"names a box twice: {', '.join(sorted({n for n in names if names.count(n) > 1}))}")
        return value


class RuntimeDefaults(_Section):
    n_ctx: int = Field(2048, ge=64, le=1_048_576)
    n_batch: int = Field(256, ge=1, le=65536)
    max_concurrent: int = Field(4, ge=1, le=4)
    warmup_tokens: int = Field(8, ge=0, le=1024)
    use_mlock: bool = False
    max_queue: int = Field(16, ge=1, le=10_000)
    max_request_tokens: int = Field(512, ge=1, le=1_048_576)


class BundleSection(_Section):
    name: Annotated[str, Field(pattern=NAME_PATTERN)] | None = None
    output_dir: str = "dist"
    exclude_failed: bool = False
    release: int = Field(0, ge=0, le=2**53)  # boxes refuse to install a lower release than they run
    runtime: RuntimeDefaults = RuntimeDefaults()

    @field_validator("output_dir")
    @classmethod
    def _inside_project(cls, value: str) -> str:
        path = PurePosixPath(value.replace("\\", "/"))
        if path.is_absolute() or re.match(r"^[A-Za-z]:", value):
            raise ValueError(
                "must be a path inside the project (relative); use `edgekit build --out DIR` to write elsewhere"
            )
        if ".." in path.parts:
            raise ValueError("must not leave the project ('..'); use `edgekit build --out DIR` instead")
        if not value.strip():
            raise ValueError("must not be empty")
        return value


class ToolchainSection(_Section):
    llama_cpp_dir: str | None = Field(None, description="an existing llama.cpp checkout to convert with")


class RecipeModel(_Section):
    model: ModelSection
    targets: tuple[TargetSpec, ...] = Field(min_length=1)
    validation: ValidationSection = ValidationSection()
    calibration: CalibrationSection = CalibrationSection()
    bench: BenchSection = BenchSection()
    bundle: BundleSection = BundleSection()
    toolchain: ToolchainSection = ToolchainSection()
