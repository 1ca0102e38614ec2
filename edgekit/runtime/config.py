"""runtime.toml: how the bundle runs on the box. `runtime.local.toml` (from `edgekit tune`) overrides it.

`[runtime]` configures the default artifact. `[artifacts.NAME]` tables hold what the bench measured for
each other artifact (threads, concurrency: an OpenVINO artifact batches differently from a GGUF one);
they apply when that artifact is the one run (`--artifact NAME`, or `artifact = "NAME"`).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from edgekit.errors import RuntimeConfigError

RUNTIME_FILE = "runtime.toml"
LOCAL_FILE = "runtime.local.toml"
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
    derived_from: str = "recipe defaults"
    # OpenVINO and ONNX Runtime engines only; None leaves the runtime's own default (see README).
    num_streams: int | None = Field(None, ge=1, le=64)  # OpenVINO NUM_STREAMS
    cpu_pinning: bool | None = None  # OpenVINO ENABLE_CPU_PINNING
    scheduling_core_type: Literal["ANY_CORE", "PCORE_ONLY", "ECORE_ONLY"] | None = None  # OpenVINO, hybrid CPUs
    inference_precision: Literal["f32", "bf16", "f16"] | None = None  # OpenVINO INFERENCE_PRECISION_HINT
    inter_op_threads: int | None = Field(None, ge=1, le=1024)  # ONNX Runtime inter_op_num_threads
    execution_mode: Literal["sequential", "parallel"] | None = None  # ONNX Runtime
    memory_arena: bool | None = None  # ONNX Runtime enable_cpu_mem_arena
    env_allocators: bool | None = None  # ONNX Runtime session.use_env_allocators (one shared arena)


def render_runtime_toml(values: dict[str, Any]) -> str:
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
    header = (
        "# How this bundle runs on the box. Signed with the bundle (listed in manifest.json).\n"
        "# To change it on one box, run `edgekit tune BUNDLE` or write runtime.local.toml beside it.\n"
    )
    return header + tomli_w.dumps(tables)


def load_runtime_config(
    bundle: Path, overrides: dict[str, Any] | None = None, artifact: str | None = None
) -> RuntimeConfig:
    """runtime.toml (signed with the bundle: [runtime], then the chosen artifact's [artifacts.NAME] table), then
    runtime.local.toml (the box's, checked against the same schema: only a [runtime] table of known keys and valid
    values), then `overrides` (command-line options). `artifact`: the one to run (default: the one [runtime] names)."""
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for name in (RUNTIME_FILE, LOCAL_FILE):
        data = _read_tables(bundle / name)
        values.update(data.get("runtime", {}))
        origin.update(dict.fromkeys(data.get("runtime", {}), name))
        tables = data.get("artifacts")
        entry = tables.get(artifact or values.get("artifact")) if isinstance(tables, dict) else None
        if isinstance(entry, dict):
            chosen = {k: v for k, v in entry.items() if k in PER_ARTIFACT_KEYS}
            values.update(chosen)
            origin.update(dict.fromkeys(chosen, name))
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    values.update(given)
    origin.update(dict.fromkeys(given, "the command line"))
    try:
        return RuntimeConfig(**values)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        where = origin.get(str(first["loc"][0]) if first["loc"] else "", RUNTIME_FILE)
        path = bundle / where if where in (RUNTIME_FILE, LOCAL_FILE) else where
        raise RuntimeConfigError(
            f"{path}: runtime.{key}: {first['msg']}", f"fix {LOCAL_FILE} or {RUNTIME_FILE}"
        ) from None


def _read_tables(path: Path) -> dict[str, Any]:
    """The tables of `path` ({} when absent); runtime.toml may also hold [artifacts.NAME], the box's file only
    [runtime]."""
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise RuntimeConfigError(f"{path}: not valid TOML ({exc})", f"fix or delete {path.name}") from None
    allowed = {"runtime", "artifacts"} if path.name == RUNTIME_FILE else {"runtime"}
    extra = sorted(set(data) - allowed)
    if extra or not isinstance(data.get("runtime", {}), dict):
        raise RuntimeConfigError(
            f"{path}: holds {', '.join(f'[{k}]' for k in extra) or 'a runtime key'} besides a [runtime] table",
            f"{path.name} holds only a [runtime] table; fix or delete it",
        )
    return data
