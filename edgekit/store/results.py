"""What each stage returns: the result its cache entry keeps (entry.json "result") and the stages after it read.

A stage's `run` returns one of these; the executor stores `to_json()` beside the entry's files, and a reader
opens it again with `of(entry)`. The stored form is the JSON the stages wrote before they were typed (the
cache format did not change): a field that is None is left out, as the stages left the key out.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, Self

from edgekit.store.records import SourceFile


class Entry(Protocol):
    """What a result is read back from (`edgekit.store.cache.CacheEntry`)."""

    @property
    def result(self) -> dict[str, Any]: ...


class StageResult:
    """Base of every stage's result: a dataclass stored as its fields, None ones left out."""

    renamed: ClassVar[dict[str, str]] = {}  # field → its key in the stored JSON (a key Python cannot name)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is not None:
                out[self.renamed.get(f.name, f.name)] = _plain(value)
        return out

    @classmethod
    def from_json(cls, stored: dict[str, Any]) -> Self:
        keys = {v: k for k, v in cls.renamed.items()}
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{keys.get(k, k): v for k, v in stored.items() if keys.get(k, k) in names})

    @classmethod
    def of(cls, entry: Entry) -> Self:
        return cls.from_json(entry.result)


def _plain(value: Any) -> Any:
    if isinstance(value, StageResult | CacheRef):
        return value.to_json()
    if isinstance(value, SourceFile):
        return value.to_dict()
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class CacheRef:
    """Which stage cache entry a figure came from, and whether this build reused it."""

    key: str
    reused: bool

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "reused": self.reused}


@dataclass
class FetchResult(StageResult):
    """The checkpoint folder's story: where its files came from, and what was done to them."""

    notes: list[str] = field(default_factory=list)
    files: list[SourceFile] | None = None  # the source files as fetched (a GGUF source: the GGUF is in the task)
    reconstructed_from: str | None = None  # "GGUF Q4_1": weights dequantized from a quantized file
    synthetic: dict[str, Any] | None = None  # random weights: what was written
    gguf: dict[str, Any] | None = None  # a GGUF source: what the dequantized file held

    @classmethod
    def from_json(cls, stored: dict[str, Any]) -> Self:
        read = super().from_json(stored)
        if read.files is not None:
            read.files = [SourceFile(**f) for f in stored["files"]]
        return read


@dataclass
class ConvertResult(StageResult):
    renamed: ClassVar[dict[str, str]] = {"made_from": "from"}

    backend: str
    made_from: str  # "the fetched checkpoint" or "the GGUF source file"


@dataclass
class ImatrixResult(StageResult):
    """An importance matrix file, what llama-imatrix reported of it and the calibration range it read."""

    path: str  # relative to the entry
    calibration: dict[str, Any]
    summary: dict[str, Any] = field(default_factory=dict)  # stored beside `path`, not under a key of its own

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, **self.summary, "calibration": self.calibration}

    @classmethod
    def from_json(cls, stored: dict[str, Any]) -> Self:
        summary = {k: v for k, v in stored.items() if k not in ("path", "calibration")}
        return cls(stored["path"], stored.get("calibration") or {}, summary)

    def record(self) -> dict[str, Any]:
        """What an artifact quantized with this matrix records of it: all but the file's place."""
        return {k: v for k, v in self.to_json().items() if k != "path"}


@dataclass
class QuantizeResult(StageResult):
    path: str  # the artifact, relative to the entry
    details: dict[str, Any]  # tensor types, bits per weight… as the backend recorded them


@dataclass
class NoiseFloorRecord(StageResult):
    """The reference against itself in a second dtype (its per-token figures are in `file`)."""

    dtype: str
    file: str
    task_scores: dict[str, list[list[Any]]]  # task → [loglik, greedy] per item


@dataclass
class ReferenceResult(StageResult):
    """The reference pass: what it ran on, the windows it scored, the tasks and completions it answered."""

    device: str
    dtype: str
    device_name: str
    context_length: int
    first_scored: int
    tokens: int
    windows: int
    scored_tokens: int
    top_k: int
    tail_samples: int
    vocab_size: int
    text: dict[str, Any]  # origin, sha256
    cloze: dict[str, Any]  # items [[window, start, end]], reference_correct
    tasks: list[dict[str, Any]]  # name, kind, sha256, items, reference_scores
    completions: list[dict[str, Any]]
    reference_seconds: float
    storage_bytes_per_token: int
    memory: dict[str, Any]  # the memory plan it ran under (whole model or streamed)
    noise_floor: NoiseFloorRecord | None = None

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "noise_floor": self.noise_floor.to_json() if self.noise_floor else None}

    @classmethod
    def from_json(cls, stored: dict[str, Any]) -> Self:
        read = super().from_json(stored)
        if stored.get("noise_floor"):
            read.noise_floor = NoiseFloorRecord.from_json(stored["noise_floor"])
        return read


@dataclass
class ValidateResult(StageResult):
    """An artifact's figures against the reference: what the gates judge (`metrics`, `tasks`) and the rest."""

    metrics: dict[str, dict[str, Any]]  # metric → estimate with its interval (`Estimate.to_dict()`)
    tasks: dict[str, dict[str, Any]]  # task → accuracies and their drop, with intervals
    differences: dict[str, Any]  # where it differs most: spans, completions
    tokenizer_check: dict[str, Any]
    engine: dict[str, Any]  # the engine settings it ran under
    sequential: dict[str, Any] | None = None  # [validation] decide: the looks taken


@dataclass
class SmokeResult(StageResult):
    """The smoke prompts' greedy ids and log-probabilities on the box's engine; or why this build machine could
    not run it."""

    settings: dict[str, Any] | None = None
    prompts: list[dict[str, Any]] | None = None
    skipped: str | None = None


@dataclass
class SensitivityResult(StageResult):
    """Per-layer contributions to an artifact's KLD (the backend's figures) and what they were scored on."""

    figures: dict[str, Any]  # stored beside `windows`, not under a key of its own
    windows: int
    scored_tokens: int

    def to_json(self) -> dict[str, Any]:
        return {**self.figures, "windows": self.windows, "scored_tokens": self.scored_tokens}

    @classmethod
    def from_json(cls, stored: dict[str, Any]) -> Self:
        figures = {k: v for k, v in stored.items() if k not in ("windows", "scored_tokens")}
        return cls(figures, stored["windows"], stored["scored_tokens"])
