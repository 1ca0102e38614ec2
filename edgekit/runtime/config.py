"""runtime.toml: how the bundle runs on the box. `runtime.local.toml` (from `edgekit tune`) overrides it.

A bundle benchmarked on several boxes also holds `runtime/<box>.toml`, one per box, each with a `[box]`
table (name, fingerprint, labels). On a box the loader takes the one named by `EDGEKIT_BOX` (or the
`box` argument), else the one whose fingerprint is this machine's, else runtime.toml.

`[runtime]` configures the default artifact. `[artifacts.NAME]` tables hold what the bench measured for
each other artifact (threads, concurrency: an OpenVINO artifact batches differently from a GGUF one);
they apply when that artifact is the one run (`--artifact NAME`, or `artifact = "NAME"`).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from edgekit.errors import RuntimeConfigError

# serve's default: a mixed step may last this many decode-only steps (chosen in runtime/serve/prefill_budget.py)
MAX_STALL = 16.0

RUNTIME_FILE = "runtime.toml"
LOCAL_FILE = "runtime.local.toml"
BOX_DIR = "runtime"
BOX_ENV = "EDGEKIT_BOX"
# What an [artifacts.NAME] table may set: what the bench measures per artifact.
PER_ARTIFACT_KEYS = ("n_threads", "n_threads_batch", "max_concurrent", "use_mmap", "derived_from")


class RuntimeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    artifact: str
    n_threads: int = Field(ge=1, le=1024)  # decode
    n_threads_batch: int = Field(ge=1, le=1024)  # prompt processing
    use_mmap: bool = True
    use_mlock: bool = False
    n_ctx: int = Field(2048, ge=64)
    n_batch: int = Field(256, ge=1)
    max_concurrent: int = Field(4, ge=1, le=4)
    warmup_tokens: int = Field(8, ge=0)
    numa: Literal["auto", "none", "isolate", "distribute"] = "none"  # auto: decided on the box (runtime.numa)
    numa_node: int | None = None
    max_queue: int = Field(16, ge=1)
    max_request_tokens: int = Field(512, ge=1)
    # serve: prompt prefixes kept in host memory beyond the slots' own (0: only the slots'), and prompt
    # tokens prefilled per step while other sequences are generating (a long prompt does not stall them):
    # "auto", as many as keep such a step within max_stall × a decode-only step, or a fixed number.
    prefix_cache: int = Field(8, ge=0, le=256)
    prefill_chunk: Annotated[int, Field(ge=1, le=65536)] | Literal["auto"] = "auto"
    max_stall: float = Field(MAX_STALL, ge=1.1, le=100.0)
    derived_from: str = "recipe defaults"
    # OpenVINO and ONNX Runtime engines only; None leaves the runtime's own default (see docs/backends.md).
    num_streams: int | None = Field(None, ge=1, le=64)  # OpenVINO NUM_STREAMS
    cpu_pinning: bool | None = None  # OpenVINO ENABLE_CPU_PINNING
    scheduling_core_type: Literal["ANY_CORE", "PCORE_ONLY", "ECORE_ONLY"] | None = None  # OpenVINO, hybrid CPUs
    inference_precision: Literal["f32", "bf16", "f16"] | None = None  # OpenVINO INFERENCE_PRECISION_HINT
    kv_cache_precision: Literal["u8", "f16", "bf16", "f32"] | None = None  # OpenVINO KV_CACHE_PRECISION
    dynamic_quantization_group_size: int | None = Field(None, ge=0, le=65536)  # OpenVINO; 0 turns it off
    inter_op_threads: int | None = Field(None, ge=1, le=1024)  # ONNX Runtime inter_op_num_threads
    execution_mode: Literal["sequential", "parallel"] | None = None  # ONNX Runtime
    memory_arena: bool | None = None  # ONNX Runtime enable_cpu_mem_arena
    env_allocators: bool | None = None  # ONNX Runtime session.use_env_allocators (one shared arena)


def render_runtime_toml(values: dict[str, Any], box: dict[str, Any] | None = None) -> str:
    """runtime.toml from the [runtime] values; an `artifacts` entry ({name: values}) becomes [artifacts.NAME]."""
    values = dict(values)
    per_artifact = values.pop("artifacts", None) or {}
    config = RuntimeConfig(**values)
    tables: dict[str, Any] = {"runtime": config.model_dump(exclude_none=True)}
    if per_artifact:
        tables["artifacts"] = {name: {k: v for k, v in entry.items() if k in PER_ARTIFACT_KEYS}
                               for name, entry in per_artifact.items()}  # fmt: skip
        for name, entry in tables["artifacts"].items():
            RuntimeConfig(**{**values, **entry, "artifact": name})  # each one must make a valid config
    if box:
        tables["box"] = box
    header = (
        "# How this bundle runs on the box. Signed with the bundle (listed in manifest.json).\n"
        "# To change it on one box, run `edgekit tune BUNDLE` or write runtime.local.toml beside it.\n"
    )
    return header + tomli_w.dumps(tables)


def box_runtime_file(bundle: Path, box: str | None = None) -> Path | None:
    """The runtime/<box>.toml for this box: by name (`box`, else $EDGEKIT_BOX), else by this machine's fingerprint."""
    folder = bundle / BOX_DIR
    if not folder.is_dir():
        return None
    name = box or os.environ.get(BOX_ENV)
    if name:
        path = folder / f"{name}.toml"
        if not path.is_file():
            offered = ", ".join(sorted(p.stem for p in folder.glob("*.toml"))) or "none"
            raise RuntimeConfigError(f"{bundle} has no runtime for box {name!r} (it has: {offered})",
                                     f"unset {BOX_ENV} or build with this box in [[bench.boxes]]")  # fmt: skip
        return path
    from edgekit.runtime.machine import fingerprint

    here = fingerprint()
    for path in sorted(folder.glob("*.toml")):
        if _read(path).get("box", {}).get("fingerprint") == here:
            return path
    return None


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise RuntimeConfigError(f"{path}: not valid TOML ({exc})", f"fix or delete {path.name}") from None


def load_runtime_config(
    bundle: Path, overrides: dict[str, Any] | None = None, box: str | None = None, artifact: str | None = None
) -> RuntimeConfig:
    """runtime.toml (signed with the bundle), then runtime/<box>.toml (this box's measured tuning, signed too),
    each its [runtime] then the chosen artifact's [artifacts.NAME] table; then runtime.local.toml (the box's, checked
    against the same schema: only a [runtime] table of known keys and valid values), then `overrides` (command-line
    options). `artifact`: the one to run (default: the one [runtime] names)."""
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    chosen = box_runtime_file(bundle, box)
    for name in (RUNTIME_FILE, *([f"{BOX_DIR}/{chosen.name}"] if chosen else []), LOCAL_FILE):
        path = bundle / name
        if not path.is_file():
            continue
        data = _read(path)
        extra = sorted(set(data) - ({"runtime"} if name == LOCAL_FILE else {"runtime", "box", "artifacts"}))
        if extra or not isinstance(data.get("runtime", {}), dict):
            raise RuntimeConfigError(
                f"{path}: holds {', '.join(f'[{k}]' for k in extra) or 'a runtime key'} besides a [runtime] table",
                f"{name} holds only a [runtime] table; fix or delete it",
            )
        values.update(data.get("runtime", {}))
        origin.update(dict.fromkeys(data.get("runtime", {}), name))
        tables = data.get("artifacts")
        entry = tables.get(artifact or values.get("artifact")) if isinstance(tables, dict) else None
        if isinstance(entry, dict):
            picked = {k: v for k, v in entry.items() if k in PER_ARTIFACT_KEYS}
            values.update(picked)
            origin.update(dict.fromkeys(picked, name))
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    values.update(given)
    origin.update(dict.fromkeys(given, "the command line"))
    try:
        return RuntimeConfig(**values)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        where = origin.get(str(first["loc"][0]) if first["loc"] else "", RUNTIME_FILE)
        shown: Path | str = bundle / where if where in (RUNTIME_FILE, LOCAL_FILE) else where
        raise RuntimeConfigError(
            f"{shown}: runtime.{key}: {first['msg']}", f"fix {LOCAL_FILE} or {RUNTIME_FILE}"
        ) from None
