"""bundle: the files of dist/<name>/, staged in a temp folder; the pipeline adds the report, then seals the manifest.

Layout:
    manifest.json        provenance, every file's size and sha256, artifacts, verdicts
    runtime.toml         threads, NUMA, mmap/mlock, context, batch, concurrency, warm-up
    runtime/<box>.toml   the same, measured on each box of `[[bench.boxes]]` (chosen on the box by name or fingerprint)
    run.sh               launcher: verifies, applies NUMA/threads, starts serve or run
    recipe.toml          the recipe this bundle was built from
    models/<artifact>    one file (GGUF) or folder (OpenVINO IR, ONNX) per artifact
    tokenizer/           the source tokenizer files and chat template
    report.json/.md/.html  the accuracy sign-off (and benchmark figures)
    logs/                the build's log and every stage's logs: what other libraries printed (edgekit.observe.stagelog)
    Dockerfile.edge      a runtime image for this bundle
    edgekit.service      a systemd unit serving the box's current release (edgekit.ship.service)
"""

from __future__ import annotations

import os
import platform
import shutil
import stat
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from edgekit import __version__
from edgekit._util.fsutil import ensure_free_space, write_bytes_atomic, write_json_atomic, write_text_atomic
from edgekit._util.hashing import copy_hashed, file_records, sha256_json
from edgekit.errors import CorruptCacheEntry, DamagedFile
from edgekit.manifest import MANIFEST, SCHEMA_VERSION
from edgekit.plan.tasks import BundleTask
from edgekit.runtime.bench.results import BenchResult
from edgekit.runtime.config import BOX_DIR, render_runtime_toml
from edgekit.runtime.smoke import Tolerance
from edgekit.ship import service
from edgekit.signoff.gates import Verdict
from edgekit.sources.tokenizer import TOKENIZER_FILES
from edgekit.store.cache import CacheEntry
from edgekit.store.records import Artifact, Checkpoint
from edgekit.store.results import SmokeResult

# tokenizer/ in the bundle: the tokenizer files, and the configs that say how it is used (BOS, EOS).
BUNDLED_TOKENIZER = (*TOKENIZER_FILES, "generation_config.json", "config.json")
RUNTIME_DEFAULTS = (
    "use_mlock",
    "n_ctx",
    "n_batch",
    "max_concurrent",
    "warmup_tokens",
    "max_queue",
    "max_request_tokens",
)
PACKAGE_FILES = Path(__file__).resolve().parent.parent / "bundle_files"


def artifact_filename(artifact: Artifact) -> str:
    return f"{artifact.name}.gguf" if artifact.path.is_file() else artifact.name


def stage_files(
    tmp: Path,
    task: BundleTask,
    artifacts: list[Artifact],
    checkpoint: Checkpoint,
    runtime: dict[str, Any],
    verdicts: dict[str, Verdict],
) -> list[dict[str, Any]]:
    """Copy the artifacts, tokenizer, recipe, runtime config and launcher into `tmp`; return the artifact records."""
    ensure_free_space(tmp.parent, sum(a.size for a in artifacts) + 16 * 2**20)
    damaged: list[DamagedFile] = []
    records = [_artifact_record(tmp, a, verdicts, damaged) for a in artifacts]
    if damaged:  # the pipeline drops and rebuilds these entries, then stages the bundle again
        raise CorruptCacheEntry(damaged)
    for name in BUNDLED_TOKENIZER:
        if checkpoint.path is not None and (checkpoint.path / name).is_file():
            _copy(checkpoint.path / name, tmp / "tokenizer" / name)
    write_text_atomic(tmp / "recipe.toml", task.recipe_text)
    write_text_atomic(tmp / "runtime.toml", render_runtime_toml(runtime))
    for name in ("run.sh", "Dockerfile.edge"):
        if (PACKAGE_FILES / name).is_file():
            shutil.copyfile(PACKAGE_FILES / name, tmp / name)
    if (tmp / "run.sh").exists():
        (tmp / "run.sh").chmod((tmp / "run.sh").stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return records


def add_ship_files(
    tmp: Path,
    task: BundleTask,
    records: list[dict[str, Any]],
    entries: dict[str, CacheEntry],
    benches: list[BenchResult],
    default: str,
    noise_floor: dict[str, Any] | None,
) -> None:
    """What a box needs to install and serve the bundle: each artifact's smoke-test record with its tolerance,
    the systemd unit (its memory limit from the largest peak any bench measured: this machine's or each
    [[bench.boxes]]')."""
    smoke = {t.name: SmokeResult.of(entries[t.smoke.key]) for t in task.targets if t.smoke is not None}
    tolerance = asdict(smoke_tolerance(noise_floor))
    for record in records:
        record["smoke"] = smoke.get(record["name"], SmokeResult(skipped="not recorded")).to_json()
        if record["smoke"].get("prompts"):
            record["smoke"]["tolerance"] = tolerance
    size = next((r["size"] for r in records if r["name"] == default), 0)
    peaks = [b.peak_rss_mib(default) for b in benches] or [None]
    memory, why = max((service.memory_max_mib(peak, default, size) for peak in peaks), key=lambda m: m[0])
    write_text_atomic(tmp / service.SERVICE, service.render_unit(task.name, __version__, memory, why))


def smoke_tolerance(noise_floor: dict[str, Any] | None) -> Tolerance:
    """The smoke test's tolerance from the noise floor's per-token figures (`noise_floor_metrics`)."""
    if not noise_floor or not Path(noise_floor.get("token_file", "")).is_file():
        return Tolerance.default()
    with np.load(noise_floor["token_file"], allow_pickle=False) as tokens:
        return Tolerance.from_noise_floor(tokens["nll"], tokens["nll_ref"], noise_floor["dtype"])


def stage_box_runtimes(
    tmp: Path,
    task: BundleTask,
    artifacts: list[Artifact],
    verdicts: dict[str, Verdict],
    benches: dict[str, BenchResult],
) -> None:
    """runtime/<box>.toml for each box benchmarked: what its bench measured, and the box's labels to match it by."""
    for bench_task in task.box_benches:
        box = bench_task.box or ""
        labels = bench_task.box_labels
        cores = int(labels.get("physical-cores", task.threads))
        values = runtime_values(task, artifacts, verdicts, benches[box], threads=cores)
        text = render_runtime_toml(values, box={"name": box, "fingerprint": bench_task.machine, "labels": labels})
        write_text_atomic(tmp / BOX_DIR / f"{box}.toml", text)


def _artifact_record(
    tmp: Path, artifact: Artifact, verdicts: dict[str, Verdict], damaged: list[DamagedFile]
) -> dict[str, Any]:
    rel = Path("models") / artifact_filename(artifact)
    files = _copy_verified(artifact, tmp / rel, damaged)
    return {
        "name": artifact.name,
        "backend": artifact.backend,
        "scheme": artifact.scheme,
        "path": rel.as_posix(),
        "size": sum(f["size"] for f in files),
        "sha256": files[0]["sha256"] if artifact.path.is_file() else sha256_json(files),
        "tensor_types": artifact.details.get("tensor_types", {}),
        "bits_per_weight": artifact.details.get("bits_per_weight"),
        "verdict": verdicts.get(artifact.name, Verdict.NOT_VALIDATED),
        "details": {k: v for k, v in artifact.details.items() if k not in ("tensor_types",)},
        "cache_key": artifact.key,
    }


def seal_manifest(
    tmp: Path,
    task: BundleTask,
    checkpoint: Checkpoint,
    records: list[dict[str, Any]],
    runtime: dict[str, Any],
) -> None:
    """manifest.json, last: every file of the staged bundle with its size and sha256, and the provenance."""
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "edgekit_version": __version__,
        "name": task.name,
        "release": task.release,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "built_on": {"machine": platform.machine(), "system": platform.system(), "python": sys.version.split()[0]},
        "recipe": {"path": task.report.recipe_path, "sha256": task.report.recipe_sha256},
        "source": checkpoint.provenance(),
        "artifacts": records,
        "default_artifact": runtime.get("artifact"),
        "eval_tokenizer": task.report.tokenizer,  # what cut the eval and calibration text into the scored ids
        "versions": task.versions,
        "files": [r for r in file_records(tmp) if r["path"] != MANIFEST],
    }
    write_json_atomic(tmp / MANIFEST, manifest)


def runtime_values(
    task: BundleTask,
    artifacts: list[Artifact],
    verdicts: dict[str, Verdict],
    bench: BenchResult | None,
    threads: int | None = None,
) -> dict[str, Any]:
    """runtime.toml: the recipe's defaults and this machine's (or the box's) cores, then what the bench measured."""
    from edgekit.runtime.bench.derive import derive_runtime

    defaults = task.runtime_defaults
    passing = [a for a in artifacts if verdicts.get(a.name, Verdict.PASS) == Verdict.PASS]
    chosen = (passing or artifacts)[0]
    values: dict[str, Any] = {
        "artifact": chosen.name,
        "n_threads": threads or task.threads,
        "n_threads_batch": threads or task.threads,
        "use_mmap": True,
        **{k: defaults[k] for k in RUNTIME_DEFAULTS},
        "derived_from": "recipe defaults and this machine's physical cores (bench disabled)",
    }
    if bench:
        base = dict(values)
        values.update(derive_runtime(bench, chosen.name, base))
        others = [a.name for a in artifacts if a.name != chosen.name and bench.figures(a.name)]
        # each other artifact as the bench measured it: its own threads and concurrency (per backend)
        per_artifact = {name: derive_runtime(bench, name, base) for name in others}
        values["artifacts"] = {name: v for name, v in per_artifact.items() if "n_threads" in v}
    return values


def _copy_verified(artifact: Artifact, dst: Path, damaged: list[DamagedFile]) -> list[dict[str, Any]]:
    """Copy the artifact out of its cache entry, hashing while copying; every file must have the sha256 its
    entry recorded when it was made (a same-size corruption passes the cache's size check, not this one)."""
    src = artifact.path
    sources = [src] if src.is_file() else sorted(p for p in src.rglob("*") if p.is_file())
    files = []
    for path in sources:
        rel = path.name if src.is_file() else path.relative_to(src).as_posix()
        target = dst if src.is_file() else dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        found = copy_hashed(path, target)
        os.chmod(target, 0o644)
        recorded = artifact.recorded_sha256(path)
        if recorded is not None and recorded != found:
            damaged.append(DamagedFile(artifact.name, artifact.key, path.relative_to(src.parent).as_posix(), recorded,
                                       found))  # fmt: skip
        files.append({"path": rel, "size": target.stat().st_size, "sha256": found})
    return files


def stage_logs(tmp: Path, logs: dict[str, Path], build_log: str | None) -> None:
    """logs/build.log (`build_log`: planning and bundling) and logs/<stage>/<file>.log: the log files of every
    stage entry the bundle was made from (in this build or an earlier one: an entry keeps its maker's logs)."""
    if build_log is not None:
        write_bytes_atomic(tmp / "logs" / "build.log", build_log.encode("utf-8"), mode=0o644)
    for name, entry in logs.items():
        for path in sorted(entry.glob("*.log")):
            _copy(path, tmp / "logs" / name / path.name)


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dst, copy_function=_copy_file)
    else:
        _copy_file(src, dst)


def _copy_file(src: str | Path, dst: str | Path) -> None:
    # Copy, never hard-link: a bundle must not share inodes with the cache (editing one would edit both).
    shutil.copyfile(src, dst)
    os.chmod(dst, 0o644)
