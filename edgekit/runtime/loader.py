"""Open a bundle on the box: verify it, read its runtime config, place it (NUMA, threads), load, warm up.

`run`, `serve`, `bench` and `tune` all start here, so every one of them refuses a bundle that does not
match its manifest, or that the box's trust policy refuses (`edgekit.ship.trust`), before a single byte
of the model is loaded.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.manifest import artifact_record
from edgekit.runtime import machine, numa
from edgekit.runtime.config import RuntimeConfig, load_runtime_config
from edgekit.runtime.engines import Engine, Sampling, load_engine
from edgekit.ship.trust import check_bundle


@dataclass
class BundleInfo:
    path: Path
    manifest: dict[str, Any]
    config: RuntimeConfig  # as resolved for this box (NUMA decided, threads within the CPUs we may use)
    artifact: dict[str, Any]  # the manifest record of the artifact to run
    numa: numa.NumaPlan

    @property
    def model_path(self) -> Path:
        return self.path / self.artifact["path"]

    @property
    def model_name(self) -> str:
        return f"{self.manifest.get('name', self.path.name)}/{self.artifact['name']}"


@dataclass
class LoadedBundle(BundleInfo):
    engine: Engine
    load_seconds: float
    warmup_seconds: float


def inspect_bundle(
    bundle: Path,
    *,
    artifact: str | None = None,
    overrides: dict[str, Any] | None = None,
    verify: bool = True,
    trusted_keys: Sequence[Path] = (),
) -> BundleInfo:
    """Verify `bundle` (and its signature, when the box has a trust policy); resolve how it runs here."""
    # Resolved once: through a link such as ROOT/current, what is verified is what is loaded, even if the
    # link is switched meanwhile.
    bundle = Path(bundle).resolve()
    manifest = check_bundle(bundle, trusted_keys).manifest if verify else _manifest(bundle)
    config = load_runtime_config(bundle, overrides)
    record = artifact_record(manifest, artifact or config.artifact)
    plan = numa.choose_policy(numa.read_topology(), int(record.get("size") or 0), config.numa, config.numa_node)
    cpus = machine.logical_cores()  # the CPUs this process may use (numactl or a container may give fewer)
    if plan.policy == "isolate" and plan.cpus:
        cpus = min(cpus, len(plan.cpus))  # threads stay on the chosen node
    config = config.model_copy(
        update={
            "artifact": record["name"],
            "numa": plan.policy,
            "numa_node": plan.node,
            "n_threads": min(config.n_threads, cpus),
            "n_threads_batch": min(config.n_threads_batch, cpus),
        }
    )
    return BundleInfo(bundle, manifest, config, record, plan)


def open_bundle(
    bundle: Path,
    *,
    artifact: str | None = None,
    overrides: dict[str, Any] | None = None,
    verify: bool = True,
    warm_up: bool = True,
    trusted_keys: Sequence[Path] = (),
) -> LoadedBundle:
    info = inspect_bundle(bundle, artifact=artifact, overrides=overrides, verify=verify, trusted_keys=trusted_keys)
    return load(info, warm_up=warm_up)


def load(info: BundleInfo, *, warm_up: bool = True) -> LoadedBundle:
    started = time.perf_counter()
    engine = load_engine(info.artifact["backend"], info.model_path, info.path, info.config)
    loaded = time.perf_counter()
    if warm_up and info.config.warmup_tokens:
        warm(engine, info.config.warmup_tokens)
    return LoadedBundle(
        path=info.path,
        manifest=info.manifest,
        config=info.config,
        artifact=info.artifact,
        numa=info.numa,
        engine=engine,
        load_seconds=loaded - started,
        warmup_seconds=time.perf_counter() - loaded,
    )


def warm(engine: Engine, tokens: int) -> None:
    """Touch every weight page and build llama.cpp's compute graphs once, before the first request."""
    engine.start(0, engine.tokenize("Hello, how are you today?"), Sampling())
    for _ in range(max(0, tokens - 1)):
        engine.step()
    engine.finish(0)


def _manifest(bundle: Path) -> dict[str, Any]:
    from edgekit.manifest import load_manifest

    return load_manifest(bundle)
