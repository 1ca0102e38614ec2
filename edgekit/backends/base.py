"""What every backend provides. A new backend is one module that subclasses `Backend`.

The build side (convert, quantize, a logits runner for validation) lives here; the edge-box side
lives in `edgekit.runtime.engines`, which must not import torch or the build stages.
"""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict

from edgekit.errors import MissingDependencyError, RecipeProblem
from edgekit.progress import Progress


class NoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Gates(BaseModel):
    """Accuracy thresholds. None means 'not gated'."""

    model_config = ConfigDict(extra="forbid")

    kld_mean_max: float | None = None  # mean KL(reference || candidate), nats per token
    kld_p99_max: float | None = None
    ppl_ratio_max: float | None = None  # PPL(candidate) / PPL(reference)
    top1_min: float | None = None  # fraction of positions where both pick the same top token
    task_drop_max: float | None = None  # reference task accuracy minus candidate task accuracy

    def merged(self, *overrides: Gates | None) -> Gates:
        values = self.model_dump()
        for override in overrides:
            if override is not None:
                values.update(override.model_dump(exclude_unset=True))
        return Gates(**values)


@dataclass(frozen=True)
class BuildEnv:
    """What a backend may use besides its inputs: where tools are cached, how many threads."""

    cache_root: Path
    llama_cpp_dir: str | None = None
    threads: int | None = None


@dataclass(frozen=True)
class SourceFile:
    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Checkpoint:
    """A Hugging Face checkpoint folder that the reference and every backend start from."""

    path: Path
    key: str  # content key of the fetch stage
    uri: str
    revision: str | None  # resolved commit sha for hf://, None otherwise
    files: tuple[SourceFile, ...]  # the source files as fetched, with hashes
    reconstructed_from: str | None = None  # "GGUF Q4_1" when weights were dequantized from a quantized file
    notes: tuple[str, ...] = ()


@dataclass
class Artifact:
    """One quantized model, in the cache until the bundle stage copies it."""

    name: str  # unique within a bundle, e.g. "gguf-Q4_K_M"
    backend: str
    scheme: str
    path: Path  # a file (GGUF) or a folder (IR, ONNX)
    key: str
    details: dict[str, Any] = field(default_factory=dict)  # tensor types, bits per weight, ...

    @property
    def files(self) -> list[Path]:
        if self.path.is_file():
            return [self.path]
        return sorted(p for p in self.path.rglob("*") if p.is_file())

    @property
    def size(self) -> int:
        return sum(p.stat().st_size for p in self.files)


class LogitsRunner(Protocol):
    """The validation seam: logits for token ids, one implementation per backend and one for the reference."""

    name: str

    @property
    def vocab_size(self) -> int: ...

    def tokenize(self, text: str) -> list[int]: ...

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """Return float32 logits of shape (len(ids), vocab) for `ids` evaluated from an empty context."""
        ...

    def close(self) -> None: ...


class Backend(ABC):
    name: ClassVar[str]
    schemes: ClassVar[tuple[str, ...]]
    extra: ClassVar[str]  # the pip extra that installs what this backend needs
    required_modules: ClassVar[tuple[str, ...]] = ()
    options_model: ClassVar[type[BaseModel]] = NoOptions
    default_scheme_gates: ClassVar[dict[str, Gates]] = {}

    def available(self) -> bool:
        return all(importlib.util.find_spec(m) is not None for m in self.required_modules)

    def require(self) -> None:
        for module in self.required_modules:
            if importlib.util.find_spec(module) is None:
                raise MissingDependencyError(f"the {self.name} backend needs '{module}', which", self.extra)

    def check_target(self, scheme: str, options: BaseModel) -> list[RecipeProblem]:
        """Problems with a scheme/options combination that the options model alone cannot see."""
        return []

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

    @abstractmethod
    def quantize(
        self,
        converted: Path,
        scheme: str,
        options: BaseModel,
        out_dir: Path,
        env: BuildEnv,
        progress: Progress,
        calibration_text: str | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """Write the artifact for `scheme` into `out_dir`.

        Returns the artifact's path relative to `out_dir` and details to record in the manifest
        (at least `tensor_types`: a histogram of the precisions actually written).
        """

    @abstractmethod
    def open_runner(self, artifact: Path, n_ctx: int, threads: int | None = None) -> LogitsRunner:
        """A logits runner over the artifact, for validation."""
