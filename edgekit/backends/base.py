"""The build side every backend provides: subclass `BuildBackend[YourOptions]` and name it in a `BackendSpec`.

Every hook the plan and the stages call is declared here, with its default: a backend overrides what it
does differently. The plan asks (before any work) `check_target`, `unsupported`, `check_model`,
`resolve_options`, `quantize_needs`, `needs_calibration`, `calibration_tokens`, `versions` and
`default_gates`; the stages call `convert` (or `convert_gguf`), `quantize` and `measure_sensitivity`.
Validation does not go through the build side: it runs the artifact in the backend's engine
(`edgekit.backends.runner.EngineRunner`), as the box will.

The edge-box side is the backend's engine (see `edgekit.runtime.engines.base.Engine`), which must not
import torch, transformers or this build side. The build side of a registered backend is found with
`edgekit.backends.catalog.build_backend`.
"""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from edgekit.backends.support import transformers_reason
from edgekit.errors import MissingDependencyError, RecipeProblem
from edgekit.observe.progress import Progress
from edgekit.signoff.gates import Gates


class NoOptions(BaseModel):
    """The options model of a backend that takes no [targets.options]."""

    model_config = ConfigDict(extra="forbid")


OptionsT = TypeVar("OptionsT", bound=BaseModel)


@dataclass(frozen=True)
class BuildEnv:
    """What a backend may use besides its inputs: where tools are cached, how many threads."""

    cache_root: Path
    llama_cpp_dir: str | None = None
    threads: int | None = None


@dataclass(frozen=True)
class ModelInfo:
    """What a backend may check before any weights are fetched: is this architecture one it can convert?"""

    kind: str  # "hf", "dir" (a Hugging Face folder) or "gguf"
    architecture: str  # "LlamaForCausalLM" (config.json) or the GGUF's general.architecture ("llama")
    model_type: str | None  # transformers' model_type; for a GGUF, as transformers reads it (None: it cannot)
    location: Path  # the folder holding config.json and the tokenizer files, or the GGUF file
    # A GGUF source only: why the Hugging Face tokenizer of its dequantized checkpoint cuts the eval text otherwise
    # than llama.cpp reads the file (with the fix), or None when they agree (or nothing asked).
    tokenizer_differs: str | None = None


@dataclass(frozen=True)
class QuantizeNeeds(Generic[OptionsT]):
    """What a target's options ask of the plan besides quantizing (`BuildBackend.quantize_needs`)."""

    imatrix: tuple[int, int] | None = None  # (chunks, tokens per chunk) of an importance matrix computed first
    tools: dict[str, Any] | None = None  # identity of the external tools quantizing runs (part of its key)
    without: dict[str, OptionsT] = field(default_factory=dict)  # recipe lever → options without it (report only)
    sensitivity: tuple[int, float] | None = None  # (eval windows, budget in seconds) of a per-layer sensitivity


@dataclass(frozen=True)
class QuantizeInputs(Generic[OptionsT]):
    """Everything `BuildBackend.quantize` reads: one target's scheme and options, and what the plan computed for it."""

    converted: Path  # the folder `convert` (or `convert_gguf`) wrote
    scheme: str
    options: OptionsT  # as `resolve_options` resolved them on this build machine
    out_dir: Path  # where the artifact goes (the quantize stage's cache entry)
    env: BuildEnv
    progress: Progress
    # For a data-aware scheme (`calibration_tokens` > 0): that many token ids to calibrate on, cut by the plan
    # from a range of text that validation never scores. None otherwise.
    calibration: Sequence[int] | None = None
    # The importance matrix the imatrix stage computed, when `quantize_needs().imatrix` asked for one. None otherwise.
    imatrix: Path | None = None


@dataclass(frozen=True)
class SensitivityProbe:
    """How `measure_sensitivity` scores a model file: mean KLD against the reference on a few windows."""

    score: Callable[[Path], float]
    budget_seconds: float
    progress: Progress


class BuildBackend(ABC, Generic[OptionsT]):
    """The build side of a backend: what it accepts in a recipe, how it converts and quantizes.

    A subclass declares `name` (its registry name), `schemes`, `extra` (the pip extra that installs what it
    needs) and `options_model` (its [targets.options], a pydantic model with `extra="forbid"`; `NoOptions`
    for none); `edgekit.backends.catalog` refuses a registered class that does not.
    """

    name: ClassVar[str]
    schemes: ClassVar[tuple[str, ...]]
    extra: ClassVar[str]  # the pip extra that installs what this backend needs
    options_model: type[OptionsT]
    required_modules: ClassVar[tuple[str, ...]] = ()
    default_scheme_gates: ClassVar[dict[str, Gates]] = {}
    converts_gguf: ClassVar[bool] = False  # converts a GGUF source itself (no dequantized checkpoint needed)
    # scheme = "auto" without a `ladder`: (scheme, options) candidates, cheapest (smallest) first
    default_ladder: ClassVar[tuple[tuple[str, dict[str, Any]], ...]] = ()
    # About how many bytes per parameter each scheme's artifact takes, and the converted form ("convert"):
    # what `disk_bytes` estimates from (a scheme not listed counts 2, as FP16 does).
    bytes_per_param: ClassVar[dict[str, float]] = {}

    def require(self) -> None:
        """Raise MissingDependencyError (naming `extra`) when a module in `required_modules` is not installed."""
        for module in self.required_modules:
            if importlib.util.find_spec(module) is None:
                raise MissingDependencyError(f"the {self.name} backend needs '{module}', which", self.extra)

    # --- what the plan asks, before any work ----------------------------------------------------

    def check_target(self, scheme: str, options: OptionsT) -> list[RecipeProblem]:
        """Problems with a scheme/options combination that the options model alone cannot see. Default: none."""
        return []

    def unsupported(self, model: ModelInfo, env: BuildEnv) -> str | None:
        """Why this backend cannot build `model`, or None. Asked at planning time, before any weights are read:
        a required target whose backend refuses stops the plan (exit 2, naming the target and this reason); an
        optional one is left out, and the report says why.

        The default suits a backend that converts a Hugging Face checkpoint (`convert`): transformers must know
        the model type as a causal LM, the checkpoint's own or, for a GGUF source, the one its GGUF loader reads
        (the checkpoint is dequantized from the file), and the checkpoint's tokenizer must cut text as llama.cpp
        reads the file (`model.tokenizer_differs`). A backend that converts GGUF files itself (`converts_gguf`)
        takes every GGUF source by default: override this to say which ones it cannot read.
        """
        if model.kind == "gguf" and self.converts_gguf:
            return None
        why = transformers_reason(model.model_type, model.architecture, model.kind == "gguf", env.cache_root)
        if why is not None and model.kind == "gguf":
            return f"{why}, so there is no checkpoint for the {self.name} backend to convert"
        return why or (model.tokenizer_differs if model.kind == "gguf" else None)

    def check_model(self, scheme: str, options: OptionsT, model: ModelInfo, env: BuildEnv) -> list[RecipeProblem]:
        """Problems with options that only the model can show (tensor names), found before any weights are read.
        Default: none."""
        return []

    def resolve_options(self, scheme: str, options: OptionsT) -> OptionsT:
        """Options as this build machine resolves them (what "unset" means here); they enter the cache key.
        Default: as given."""
        return options

    def quantize_needs(self, scheme: str, options: OptionsT) -> QuantizeNeeds[OptionsT]:
        """Inputs to compute before quantizing, tools it runs, report-only extras; checked at planning time.
        Default: nothing besides the converted model."""
        return QuantizeNeeds()

    def needs_calibration(self, scheme: str, options: OptionsT) -> bool:
        """Whether quantizing `scheme` with `options` reads calibration text (data-aware compression). Default: no."""
        return False

    def calibration_tokens(self, scheme: str, options: OptionsT) -> int:
        """How many calibration tokens quantizing `scheme` reads: `calibration_samples` windows of
        `calibration_tokens` tokens when it is data-aware, else 0. The plan cuts them from the text."""
        if not self.needs_calibration(scheme, options):
            return 0
        return int(getattr(options, "calibration_samples", 64)) * int(getattr(options, "calibration_tokens", 128))

    def default_gates(self, scheme: str) -> Gates:
        """The sign-off thresholds of `scheme` when the recipe sets none: `default_scheme_gates`, else no gates."""
        return self.default_scheme_gates.get(scheme, Gates())

    def disk_bytes(self, scheme: str | None, parameters: int) -> int:
        """About how many bytes the artifact of `scheme` (None: the converted form) takes for a model of
        `parameters` weights: the build checks free disk for every stage's outputs with it before any stage runs.
        Default: `bytes_per_param` of the scheme (or of "convert"), else 2 bytes (FP16)."""
        return int(parameters * self.bytes_per_param.get(scheme or "convert", 2.0))

    def artifact_name(self, scheme: str) -> str:
        """A target's name when the recipe gives none."""
        return f"{self.name}-{scheme}"

    @abstractmethod
    def versions(self, env: BuildEnv) -> dict[str, str | None]:
        """Versions of every tool that determines this backend's output bytes (part of cache keys)."""

    # --- what the stages run ----------------------------------------------------------------------

    @abstractmethod
    def convert(self, checkpoint: Path, out_dir: Path, env: BuildEnv, progress: Progress,
                provenance: dict[str, str]) -> None:  # fmt: skip
        """Write the unquantized intermediate form (e.g. GGUF F16) of the checkpoint folder into `out_dir`."""

    def convert_gguf(
        self, source: Path, out_dir: Path, env: BuildEnv, progress: Progress, provenance: dict[str, str]
    ) -> None:
        """Write the unquantized intermediate form of a GGUF source file (called only when `converts_gguf`)."""
        raise NotImplementedError(f"the {self.name} backend converts checkpoints, not GGUF files")

    @abstractmethod
    def quantize(self, inputs: QuantizeInputs[OptionsT]) -> tuple[str, dict[str, Any]]:
        """Write the artifact for `inputs.scheme` into `inputs.out_dir`.

        Returns the artifact's path relative to `out_dir` and details to record in the manifest
        (at least `tensor_types`: a histogram of the precisions actually written).
        """

    def measure_sensitivity(
        self, artifact: Path, base: Path, measure: SensitivityProbe, out_dir: Path
    ) -> dict[str, Any]:
        """Per-layer contributions to the artifact's KLD, for the report (asked by `quantize_needs().sensitivity`).
        Default: not offered (a backend whose options can ask for it implements it)."""
        raise NotImplementedError(f"the {self.name} backend does not measure sensitivity")
