"""The build side every backend provides: subclass `BuildBackend` and name it in a `BackendSpec`.

The edge-box side is the backend's engine (see `edgekit.runtime.engines.base.Engine`), which must not
import torch, transformers or this build side.
"""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from edgekit.errors import MissingDependencyError, RecipeProblem
from edgekit.observe.progress import Progress
from edgekit.signoff.gates import Gates
from edgekit.signoff.scoring import LogitsRunner
from edgekit.store.records import Checkpoint


class NoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


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


@dataclass(frozen=True)
class Levers:
    """What a target's options ask of the plan besides quantizing (`BuildBackend.levers`)."""

    imatrix: tuple[int, int] | None = None  # (chunks, tokens per chunk) of an importance matrix computed first
    tools: dict[str, Any] | None = None  # identity of the external tools quantizing runs (part of its key)
    without: dict[str, BaseModel] = field(default_factory=dict)  # lever → options without it (report only)
    sensitivity: tuple[int, float] | None = None  # (eval windows, budget in seconds) of a per-layer sensitivity


@dataclass(frozen=True)
class SensitivityProbe:
    """How `measure_sensitivity` scores a model file: mean KLD against the reference on a few windows."""

    score: Callable[[Path], float]
    budget_seconds: float
    progress: Progress


class BuildBackend(ABC):
    """The build side of a backend: what it accepts in a recipe, how it converts and quantizes."""

    name: ClassVar[str]
    schemes: ClassVar[tuple[str, ...]]
    extra: ClassVar[str]  # the pip extra that installs what this backend needs
    required_modules: ClassVar[tuple[str, ...]] = ()
    options_model: ClassVar[type[BaseModel]] = NoOptions
    default_scheme_gates: ClassVar[dict[str, Gates]] = {}
    converts_gguf: ClassVar[bool] = False  # converts a GGUF source itself (no dequantized checkpoint needed)
    # scheme = "auto" without a `ladder`: (scheme, options) candidates, cheapest (smallest) first
    default_ladder: ClassVar[tuple[tuple[str, dict[str, Any]], ...]] = ()

    def available(self) -> bool:
        return all(importlib.util.find_spec(m) is not None for m in self.required_modules)

    def require(self) -> None:
        for module in self.required_modules:
            if importlib.util.find_spec(module) is None:
                raise MissingDependencyError(f"the {self.name} backend needs '{module}', which", self.extra)

    def check_target(self, scheme: str, options: BaseModel) -> list[RecipeProblem]:
        """Problems with a scheme/options combination that the options model alone cannot see."""
        return []

    def check_model(self, scheme: str, options: BaseModel, model: ModelInfo, env: BuildEnv) -> list[RecipeProblem]:
        """Problems with options that only the model can show (tensor names), found before any weights are read."""
        return []

    def needs_calibration(self, scheme: str, options: BaseModel) -> bool:
        """Whether quantizing `scheme` with `options` reads calibration text (data-aware compression)."""
        return False

    def calibration_tokens(self, scheme: str, options: BaseModel) -> int:
        """How many calibration tokens quantizing `scheme` reads: `calibration_samples` windows of
        `calibration_tokens` tokens when it is data-aware, else 0. The plan cuts them from the text."""
        if not self.needs_calibration(scheme, options):
            return 0
        return int(getattr(options, "calibration_samples", 64)) * int(getattr(options, "calibration_tokens", 128))

    def resolve_options(self, scheme: str, options: BaseModel) -> BaseModel:
        """Options as this build machine resolves them (what "unset" means here); they enter the cache key."""
        return options

    def levers(self, scheme: str, options: BaseModel) -> Levers:
        """Inputs to compute before quantizing, tools it runs, report-only extras; checked at planning time."""
        return Levers()

    def measure_sensitivity(
        self, artifact: Path, base: Path, measure: SensitivityProbe, out_dir: Path
    ) -> dict[str, Any]:
        """Per-layer contributions to the artifact's KLD (`levers().sensitivity`): backends that offer it say how."""
        raise NotImplementedError(f"the {self.name} backend does not measure sensitivity")

    def default_gates(self, scheme: str) -> Gates:
        return self.default_scheme_gates.get(scheme, Gates())

    def artifact_name(self, scheme: str) -> str:
        return f"{self.name}-{scheme}"

    @abstractmethod
    def versions(self, env: BuildEnv) -> dict[str, str | None]:
        """Versions of every tool that determines this backend's output bytes (part of cache keys)."""

    @abstractmethod
    def convert(
        self, checkpoint: Checkpoint, out_dir: Path, env: BuildEnv, progress: Progress, provenance: dict[str, str]
    ) -> None:
        """Write the unquantized intermediate form (e.g. GGUF F16) of `checkpoint` into `out_dir`."""

    def convert_gguf(
        self, source: Path, out_dir: Path, env: BuildEnv, progress: Progress, provenance: dict[str, str]
    ) -> None:
        """Write the unquantized intermediate form of a GGUF source file (when `converts_gguf`)."""
        raise NotImplementedError(f"the {self.name} backend converts checkpoints, not GGUF files")

    @abstractmethod
    def quantize(
        self,
        converted: Path,
        scheme: str,
        options: BaseModel,
        out_dir: Path,
        env: BuildEnv,
        progress: Progress,
        calibration: Sequence[int] | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """Write the artifact for `scheme` into `out_dir`.

        `calibration`: for a data-aware scheme, the token ids it may calibrate on (`calibration_tokens`
        of them, cut by the plan from a range of text that validation never scores).
        Returns the artifact's path relative to `out_dir` and details to record in the manifest
        (at least `tensor_types`: a histogram of the precisions actually written).
        """

    def open_runner(self, artifact: Path, n_ctx: int, threads: int | None = None, **runtime: Any) -> LogitsRunner:
        """A logits runner over the artifact, for validation: the backend's runtime engine, configured with
        `runtime` (runtime.toml keys: n_batch, use_mmap…) exactly as the bundle will run it on the box."""
        from edgekit.backends.runner import EngineRunner

        return EngineRunner(self.name, artifact, n_ctx, threads, **runtime)
