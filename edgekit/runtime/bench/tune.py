"""`edgekit tune`: re-run the thread sweep on this box and write runtime.local.toml beside runtime.toml.

runtime.toml is signed with the bundle (it is in the manifest); runtime.local.toml is not (it is in
`manifest.UNLISTED`), so tuning a box never invalidates the bundle. It holds only what tune
measured here (threads, NUMA placement) plus any keys a person already put in it.
"""

from __future__ import annotations

import time
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import tomli_w

from edgekit._util.fsutil import write_text_atomic
from edgekit.errors import EngineError, RuntimeConfigError
from edgekit.runtime import machine
from edgekit.runtime.bench.benchmark import Benchmark
from edgekit.runtime.bench.results import BenchTarget
from edgekit.runtime.bench.settings import BenchSettings
from edgekit.runtime.config import LOCAL_FILE, load_runtime_config
from edgekit.runtime.loader import inspect_bundle

HEADER = (
    "# Written by `edgekit tune` for this box; overrides runtime.toml (which stays signed).\n"
    "# Not part of the manifest: delete it to go back to the bundle's own settings.\n"
)


def tune(
    bundle: Path,
    *,
    artifact: str | None = None,
    runs: int = 3,
    prompt_tokens: int = 64,
    gen_tokens: int = 32,
    threads: tuple[int, ...] | None = None,
    log: Callable[[str], None] | None = None,
    trusted_keys: Sequence[Path] = (),
) -> dict[str, Any]:
    info = inspect_bundle(bundle, artifact=artifact, trusted_keys=trusted_keys)  # verifies first
    cpus = info.numa.cpus if info.numa.policy == "isolate" else None
    if threads is None and cpus:
        physical = max(1, machine.physical_cores() * len(cpus) // max(1, machine.logical_cores()))
        threads = tuple(machine.thread_candidates(physical, len(cpus)))
    settings = BenchSettings(
        prompt_tokens=prompt_tokens,
        gen_tokens=gen_tokens,
        runs=runs,
        threads=threads,
        concurrency=(1,),
        baseline=False,
        loads=False,
        n_ctx=info.config.n_ctx,
        n_batch=info.config.n_batch,
        warmup_tokens=min(info.config.warmup_tokens, 8),
        cpus=cpus,
    )
    target = BenchTarget.from_record(info.model_path, info.artifact)
    bench = Benchmark([target], settings, log=log)
    sweeps, picks = bench.thread_sweep()
    if target.name in bench.skipped:
        raise EngineError(bench.skipped[target.name], "tune another artifact with --artifact")
    sweep, pick = sweeps[target.name], picks[target.name]

    def series(metric: str) -> str:
        return ", ".join(f"{t}: {v[metric]['median']:.1f}" for t, v in sweep.items() if v.get(metric))

    described = bench.machine
    values: dict[str, Any] = {
        "artifact": target.name,
        "n_threads": pick["n_threads"],
        "n_threads_batch": pick["n_threads_batch"],
        "numa": info.numa.policy,
        "derived_from": (
            f"edgekit tune on {described['cpu_model']} ({described['physical_cores']} physical cores), "
            f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}: decode tok/s by threads {series('decode_tok_s')}; "
            f"prompt tok/s by threads {series('prompt_tok_s')}; numa: {info.numa.reason}"
        ),
    }
    if info.numa.node is not None:
        values["numa_node"] = info.numa.node
    path = write_local(info.path, values)
    return {"path": str(path), "values": values, "sweep": sweep, "machine": described}


def write_local(bundle: Path, values: dict[str, Any]) -> Path:
    """Merge `values` into runtime.local.toml (keeping other keys a person set) and check the result."""
    path = bundle / LOCAL_FILE
    current: dict[str, Any] = {}
    if path.is_file():
        try:
            current = tomllib.loads(path.read_text(encoding="utf-8")).get("runtime", {})
        except tomllib.TOMLDecodeError as exc:
            raise RuntimeConfigError(f"{path}: not valid TOML ({exc})", f"fix or delete {LOCAL_FILE}") from None
    merged = {**current, **values}
    if "numa_node" not in values:
        merged.pop("numa_node", None)
    previous = path.read_text(encoding="utf-8") if path.is_file() else None
    write_text_atomic(path, HEADER + tomli_w.dumps({"runtime": merged}))
    try:
        load_runtime_config(bundle)
    except RuntimeConfigError:
        if previous is None:
            path.unlink()
        else:
            write_text_atomic(path, previous)
        raise
    return path
