"""Benchmark settings: one schema for the recipe's `[bench]`, the bundle's copy of it and `edgekit bench` flags.

`BenchOptions` is what a person sets (validated like any recipe section); `BenchSettings` is what a
run uses: the options plus what the runtime config decides (context, batch) and the run's own limits.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class BenchOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_tokens: int = Field(128, ge=1, le=32768)
    gen_tokens: int = Field(64, ge=1, le=4096)
    runs: int = Field(3, ge=1, le=100)
    threads: Literal["auto"] | tuple[Annotated[int, Field(ge=1, le=1024)], ...] = "auto"
    concurrency: tuple[Annotated[int, Field(ge=1, le=4)], ...] = (1, 2, 4)
    baseline: bool = True
    bandwidth_mib: int = Field(256, ge=16, le=16384, description="array size of the bandwidth probe")
    loads: bool = Field(True, description="time loads with/without mmap (and mlock), cold and warm page cache")
    warmup_tokens: int = Field(4, ge=0, le=256, description="decoded before any timing, as serve's warm-up does")
    peer: bool = Field(True, description="llama.cpp's llama-bench on the same GGUF files, when the toolchain has it")
    compute: bool = Field(True, description="measure each GGUF weight type's dot-product rate for the compute roof")


@dataclass(frozen=True)
class BenchSettings:
    prompt_tokens: int = 128
    gen_tokens: int = 64
    runs: int = 3
    threads: tuple[int, ...] | None = None  # None: 1..physical cores (and logical where SMT adds)
    concurrency: tuple[int, ...] = (1, 2, 4)
    baseline: bool = True
    bandwidth_mib: int = 256
    n_ctx: int = 2048  # per sequence, as the runtime will use it
    n_batch: int = 256
    warmup_tokens: int = 4
    repeats: int = 3  # timed prompts and decodes per perf job, and llama-bench's -r, after a warm-up
    load_prompt_tokens: int = 8  # the load probes time "loaded and answered a short prompt"
    cpus: tuple[int, ...] | None = None  # pin the workers to these CPUs (a NUMA node), None: as we are
    loads: bool = True
    peer: bool = True
    compute: bool = True
    sweep_max_decode_s: float = 3.0  # a sweep point slower than this stops decoding early (≥ 4 tokens)
    job_timeout_s: float = 900.0

    @classmethod
    def from_options(cls, options: BenchOptions, **run: Any) -> BenchSettings:
        """The settings of a run: what the options say, and `run` (n_ctx, n_batch, cpus…)."""
        values = options.model_dump(exclude={"enabled", "boxes"})
        values["threads"] = None if values["threads"] == "auto" else tuple(values["threads"])
        values["concurrency"] = tuple(sorted(set(values["concurrency"])))
        return cls(**{**values, **run})

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
