"""validate: compare every artifact with the reference on the same tokens, and gate it.

The reference is computed once per (checkpoint, eval text, tokenizer, context length, dtype, top-k,
tasks) and cached. Its storage is bounded whatever the vocabulary: for each scored token it keeps
the reference's top-k token ids and log-probabilities, `tail_samples` tokens drawn from the rest of
its distribution (for an unbiased KL estimate, see `edgekit.metrics.compare`) and the
log-probability of the actual next token. With k = 64 and 64 samples that is 1,028 bytes a token —
about 320 MiB for wikitext-2's 330k tokens, for a 32k or a 150k vocabulary alike, where full FP16
logits would be 21 GiB or 100 GiB. Arrays are written window by window into memory-mapped .npy
files and read back the same way, so memory does not grow with the eval length either.
Computing the reference on a GPU box and carrying the cache entry over (`edgekit reference
--export`, then `edgekit build --reference DIR`) lets CPU build boxes skip the reference model.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.backends import get_backend
from edgekit.backends.base import Artifact, Checkpoint, Gates, LogitsRunner
from edgekit.cache import CacheEntry, StageCache
from edgekit.errors import TokenizerMismatchError
from edgekit.evaldata import (
    ClozeItem,
    EvalText,
    ItemScore,
    Task,
    TaskItem,
    Windows,
    cloze_correct,
    cloze_items,
    first_difference,
    load_text,
    make_windows,
    multiple_choice_task,
    score_item,
    task_correct,
)
from edgekit.metrics import (
    GATE_METRICS,
    Estimate,
    ReferenceSlice,
    TokenComparison,
    compare,
    concat,
    item_bootstrap,
    judge,
    overall_verdict,
    reference_slice,
    token_metrics,
)
from edgekit.progress import Progress
from edgekit.recipe import Recipe, Target, ValidationSection
from edgekit.sources import resolve_path

REFERENCE_STAGE = "reference"
VALIDATE_STAGE = "validate"
REFERENCE_FORMAT = 2
ARRAYS = ("topk_ids", "topk_logp", "tail_ids", "tail_logp", "target_logp")


@dataclass
class Reference:
    entry: CacheEntry
    windows: Windows
    arrays: dict[str, np.ndarray]  # memory-mapped, rows = scored tokens in window order
    cloze: list[ClozeItem]
    cloze_correct: np.ndarray
    tasks: list[Task]
    task_scores: dict[str, list[ItemScore]]
    meta: dict[str, Any]

    @property
    def key(self) -> str:
        return self.entry.key

    def window_slice(self, i: int) -> ReferenceSlice:
        per = self.windows.scored_per_window
        rows = slice(i * per, (i + 1) * per)
        return ReferenceSlice(**{name: np.asarray(self.arrays[name][rows]) for name in ARRAYS})


def _task_files(cfg: ValidationSection, recipe: Recipe) -> list[Path]:
    return [resolve_path(t, recipe.base_dir) for t in cfg.tasks]


def reference_inputs(recipe: Recipe, checkpoint: Checkpoint, text: EvalText) -> dict[str, Any]:
    from edgekit.hashing import sha256_file

    cfg = recipe.spec.validation
    return {
        "format": REFERENCE_FORMAT,
        "checkpoint": checkpoint.key,
        "text_sha256": text.sha256,
        "context_length": cfg.context_length,
        "max_tokens": cfg.max_tokens,
        # The dtype as requested: "auto" computed on a GPU (FP16) serves CPU build boxes too.
        "dtype": cfg.reference_dtype,
        "noise_floor_dtype": cfg.noise_floor_dtype,
        "top_k": cfg.top_k,
        "tail_samples": cfg.tail_samples,
        "seed": cfg.seed,
        "cloze": cfg.cloze.model_dump(),
        "tasks": [sha256_file(p) for p in _task_files(cfg, recipe)],
        "tokenizer": {"transformers": version("transformers"), "tokenizers": version("tokenizers")},
    }


def reference(
    recipe: Recipe, checkpoint: Checkpoint, cache: StageCache, progress: Progress, threads: int | None = None
) -> Reference:
    text = load_text(recipe.spec.validation.text, recipe.base_dir)
    inputs = reference_inputs(recipe, checkpoint, text)

    def produce(out: Path) -> dict[str, Any]:
        return _compute_reference(recipe, checkpoint, text, out, progress, threads)

    entry = cache.get_or_produce(REFERENCE_STAGE, inputs, produce)
    if entry.reused:
        progress.log(
            f"reference: reusing {entry.key[:12]} (torch {entry.result['device']} {entry.result['dtype']}, "
            f"which took {entry.meta.get('seconds', 0):.0f} s to compute)"
        )
    return load_reference(entry)


def load_reference(entry: CacheEntry) -> Reference:
    path, meta = entry.path, entry.result
    windows = Windows(np.load(path / "tokens.npy"), meta["context_length"], meta["first_scored"])
    tasks, scores = [], {}
    for t in meta["tasks"]:
        items = tuple(TaskItem(tuple(i[0]), *i[1:]) for i in t["items"])
        tasks.append(Task(t["name"], t["kind"], items, t["sha256"]))
        scores[t["name"]] = [ItemScore(*s) for s in t["reference_scores"]]
    return Reference(
        entry=entry,
        windows=windows,
        arrays={name: np.load(path / f"{name}.npy", mmap_mode="r") for name in ARRAYS},
        cloze=[ClozeItem(*c) for c in meta["cloze"]["items"]],
        cloze_correct=np.array(meta["cloze"]["reference_correct"], dtype=bool),
        tasks=tasks,
        task_scores=scores,
        # What producing the entry took (reference pass, tasks and noise floor), for the reuse figures.
        meta={**meta, "entry_seconds": entry.meta.get("seconds")},
    )


def _compute_reference(
    recipe: Recipe, checkpoint: Checkpoint, text: EvalText, out: Path, progress: Progress, threads: int | None
) -> dict[str, Any]:
    from edgekit.reference import TorchRunner, resolve_device

    cfg = recipe.spec.validation
    device = resolve_device(cfg.reference_device, cfg.reference_dtype)
    started = time.time()
    with progress.task(f"reference  load checkpoint on torch {device.device} {device.dtype}"):
        runner = TorchRunner(checkpoint.path, device, threads)
    ids, offsets = runner.tokenize_with_offsets(text.text)
    windows = make_windows(ids, cfg.context_length, cfg.max_tokens)
    np.save(out / "tokens.npy", windows.ids)
    cloze = (
        cloze_items(text.text, offsets, windows, cfg.cloze.items, cfg.cloze.min_word_chars) if cfg.cloze.enabled else []
    )
    n, k, s = windows.scored_total, min(cfg.top_k, runner.vocab_size - 1), cfg.tail_samples
    shapes = {"topk_ids": (np.int32, (n, k)), "topk_logp": (np.float32, (n, k)), "tail_ids": (np.int32, (n, s)),
              "tail_logp": (np.float32, (n, s)), "target_logp": (np.float32, (n,))}  # fmt: skip
    arrays = {
        name: np.lib.format.open_memmap(out / f"{name}.npy", mode="w+", dtype=dtype, shape=shape)
        for name, (dtype, shape) in shapes.items()
    }
    per = windows.scored_per_window
    correct: list[bool] = []
    with progress.task(f"reference  {windows.count} windows × {windows.length} tokens", total=windows.count) as t:
        for i in range(windows.count):
            logits = runner.logits(windows.window(i))
            positions, targets = windows.scored(i)
            ref = reference_slice(logits[positions], targets, k, s, np.random.default_rng([cfg.seed, i]))
            rows = slice(i * per, (i + 1) * per)
            for name in ARRAYS:
                arrays[name][rows] = getattr(ref, name)
            correct += cloze_correct(cloze, i, windows.window(i), logits.argmax(-1))
            t.advance()
    for array in arrays.values():
        array.flush()
    del arrays
    tasks = [multiple_choice_task(p, runner.tokenize, cfg.context_length // 2) for p in _task_files(cfg, recipe)]
    task_records = []
    for task in tasks:
        scores = _score_task(task, runner, progress, "reference")
        task_records.append(_task_record(task, scores))
    seconds = time.time() - started
    vocab_size = runner.vocab_size
    runner.close()

    result: dict[str, Any] = {
        "device": device.device,
        "dtype": device.dtype,
        "device_name": device.name,
        "context_length": windows.length,
        "first_scored": windows.first_scored,
        "tokens": len(windows.ids),
        "windows": windows.count,
        "scored_tokens": n,
        "top_k": k,
        "tail_samples": s,
        "vocab_size": vocab_size,
        "text": {"origin": text.origin, "sha256": text.sha256},
        "cloze": {"items": [[c.window, c.start, c.end] for c in cloze], "reference_correct": correct},
        "tasks": task_records,
        "reference_seconds": round(seconds, 2),
        "storage_bytes_per_token": (k + s) * 8 + 4,
        "noise_floor": None,
    }
    if cfg.noise_floor_dtype not in ("none", device.dtype):
        # Entry is still being produced: read the arrays just written from `out`.
        partial = Reference(
            entry=CacheEntry(REFERENCE_STAGE, "", out, {"result": result}, reused=False),
            windows=windows,
            arrays={name: np.load(out / f"{name}.npy", mmap_mode="r") for name in ARRAYS},
            cloze=cloze,
            cloze_correct=np.array(correct, dtype=bool),
            tasks=tasks,
            task_scores={t["name"]: [ItemScore(*x) for x in t["reference_scores"]] for t in task_records},
            meta=result,
        )
        result["noise_floor"] = _noise_floor(recipe, checkpoint, device, partial, out, progress, threads)
    return result


def _task_record(task: Task, scores: list[ItemScore]) -> dict[str, Any]:
    return {
        "name": task.name,
        "kind": task.kind,
        "sha256": task.sha256,
        "items": [[list(i.ids), i.split, i.group, i.choice, i.answer, i.nbytes] for i in task.items],
        "reference_scores": [[s.loglik, s.greedy] for s in scores],
    }


def _score_task(task: Task, runner: LogitsRunner, progress: Progress, who: str) -> list[ItemScore]:
    scores = []
    with progress.task(f"{who}  task {task.name} ({task.questions} questions)", total=len(task.items)) as t:
        for item in task.items:
            scores.append(score_item(item, runner.logits(item.ids)))
            t.advance()
    return scores


@dataclass
class Evaluation:
    tokens: TokenComparison
    cloze_correct: np.ndarray
    task_scores: dict[str, list[ItemScore]]


def evaluate(runner: LogitsRunner, ref: Reference, progress: Progress, label: str) -> Evaluation:
    """Run a candidate over the reference's windows and tasks."""
    parts, correct = [], []
    windows = ref.windows
    with progress.task(f"validate  {label}: {windows.count} windows", total=windows.count) as t:
        for i in range(windows.count):
            logits = runner.logits(windows.window(i))
            positions, targets = windows.scored(i)
            parts.append(compare(ref.window_slice(i), logits[positions], targets))
            correct += cloze_correct(ref.cloze, i, windows.window(i), logits.argmax(-1))
            t.advance()
    tasks = {task.name: _score_task(task, runner, progress, f"validate  {label}") for task in ref.tasks}
    return Evaluation(concat(parts), np.array(correct, dtype=bool), tasks)


def _noise_floor(
    recipe: Recipe,
    checkpoint: Checkpoint,
    device: Any,
    ref: Reference,
    out: Path,
    progress: Progress,
    threads: int | None,
) -> dict[str, Any]:
    """The reference against itself in a second dtype: what 'no quantization error' looks like here."""
    from edgekit.reference import ReferenceDevice, TorchRunner

    second = ReferenceDevice(device.device, recipe.spec.validation.noise_floor_dtype, device.name)
    with progress.task(f"reference  noise floor: load torch {second.device} {second.dtype}"):
        runner = TorchRunner(checkpoint.path, second, threads)
    try:
        evaluation = evaluate(runner, ref, progress, f"noise floor ({second.dtype})")
    finally:
        runner.close()
    _save_evaluation(out / "noise_floor.npz", evaluation)
    return {
        "dtype": second.dtype,
        "file": "noise_floor.npz",
        "task_scores": {k: [[s.loglik, s.greedy] for s in v] for k, v in evaluation.task_scores.items()},
    }


def _save_evaluation(path: Path, evaluation: Evaluation) -> None:
    cmp = evaluation.tokens
    np.savez(
        path,
        kld=cmp.kld.astype(np.float32),
        nll=cmp.nll.astype(np.float32),
        nll_ref=cmp.nll_ref.astype(np.float32),
        top1=cmp.top1,
        dp=cmp.dp.astype(np.float32),
        tail_mass=cmp.tail_mass.astype(np.float32),
        cloze_correct=evaluation.cloze_correct,
    )


def _load_evaluation(path: Path, task_scores: dict[str, list[list[Any]]]) -> Evaluation:
    data = np.load(path, allow_pickle=False)
    tokens = TokenComparison(**{f: data[f].astype(np.float64) if f != "top1" else data[f] for f in
                                ("nll_ref", "nll", "kld", "top1", "dp", "tail_mass")})  # fmt: skip
    scores = {k: [ItemScore(*s) for s in v] for k, v in task_scores.items()}
    return Evaluation(tokens, data["cloze_correct"], scores)


# --- candidates -----------------------------------------------------------------------------------


def check_tokenizer(runner: LogitsRunner, ref: Reference, text: EvalText, backend: str) -> int:
    """The candidate must tokenize the eval text to the reference's ids; returns tokens compared."""
    ids = runner.tokenize(text.text)
    expected = ref.windows.ids.tolist()
    diff = first_difference(expected, ids[: len(expected)])
    if diff is not None:
        raise TokenizerMismatchError(backend, diff, expected[diff : diff + 5], ids[diff : diff + 5])
    return len(expected)


def validate_artifact(
    recipe: Recipe,
    artifact: Artifact,
    ref: Reference,
    cache: StageCache,
    progress: Progress,
    threads: int | None = None,
) -> dict[str, Any]:
    """Per-artifact metrics, cached by (artifact, reference, statistics settings). Gates come after."""
    cfg = recipe.spec.validation
    text = load_text(cfg.text, recipe.base_dir)
    inputs = {
        "artifact": artifact.key,
        "reference": ref.key,
        "bootstrap": [cfg.bootstrap_resamples, cfg.bootstrap_block_tokens, cfg.seed],
    }

    def produce(out: Path) -> dict[str, Any]:
        backend = get_backend(artifact.backend)
        longest = max([ref.windows.length] + [len(i.ids) for t in ref.tasks for i in t.items])
        with progress.task(f"validate  load {artifact.name}"):
            runner = backend.open_runner(artifact.path, n_ctx=longest, threads=threads or os.cpu_count())
        try:
            compared = check_tokenizer(runner, ref, text, artifact.name)
            evaluation = evaluate(runner, ref, progress, artifact.name)
        finally:
            runner.close()
        _save_evaluation(out / "tokens.npz", evaluation)
        result = summarise(evaluation, ref, cfg)
        result["tokenizer_check"] = {"tokens_compared": compared, "identical": True}
        return result

    entry = cache.get_or_produce(VALIDATE_STAGE, inputs, produce)
    return {**entry.result, "cache_key": entry.key, "token_file": str(entry.path / "tokens.npz")}


def summarise(evaluation: Evaluation, ref: Reference, cfg: ValidationSection) -> dict[str, Any]:
    metrics = token_metrics(evaluation.tokens, cfg.bootstrap_block_tokens, cfg.bootstrap_resamples, cfg.seed)
    tasks: dict[str, Any] = {}
    if len(ref.cloze):
        acc = item_bootstrap(ref.cloze_correct, evaluation.cloze_correct, cfg.bootstrap_resamples, cfg.seed)
        tasks["cloze"] = {k: v.to_dict() for k, v in acc.items()} | {"kind": "cloze", "questions": len(ref.cloze)}
    for task in ref.tasks:
        ref_acc, ref_norm = task_correct(task, ref.task_scores[task.name])
        cand_acc, cand_norm = task_correct(task, evaluation.task_scores[task.name])
        acc = item_bootstrap(ref_acc, cand_acc, cfg.bootstrap_resamples, cfg.seed)
        norm = item_bootstrap(ref_norm, cand_norm, cfg.bootstrap_resamples, cfg.seed)
        tasks[task.name] = {k: v.to_dict() for k, v in acc.items()} | {
            "kind": task.kind,
            "questions": task.questions,
            "acc_norm": {k: v.to_dict() for k, v in norm.items()},
        }
    return {"metrics": {k: v.to_dict() for k, v in metrics.items()}, "tasks": tasks}


def noise_floor_metrics(ref: Reference, cfg: ValidationSection) -> dict[str, Any] | None:
    noise = ref.meta.get("noise_floor")
    if not noise:
        return None
    evaluation = _load_evaluation(ref.entry.path / noise["file"], noise["task_scores"])
    return {
        "dtype": noise["dtype"],
        **summarise(evaluation, ref, cfg),
        "token_file": str(ref.entry.path / noise["file"]),
    }


def judge_artifact(result: dict[str, Any], gates: Gates) -> dict[str, Any]:
    checks = []
    for gate, threshold in gates.model_dump().items():
        if threshold is None:
            continue
        metric, direction = GATE_METRICS[gate]
        if metric == "task_drop":
            estimates = [(f"task_drop[{name}]", t["drop"]) for name, t in result["tasks"].items()]
        else:
            estimates = [(metric, result["metrics"][metric])]
        for label, est in estimates:
            e = Estimate(est["value"], est["ci95"][0], est["ci95"][1], est["n"])
            checks.append(
                {
                    "gate": gate,
                    "metric": label,
                    "threshold": threshold,
                    "direction": direction,
                    "value": e.value,
                    "ci95": [e.low, e.high],
                    "n": e.n,
                    "verdict": judge(e, threshold, direction),
                }
            )
    if not checks:
        # No threshold means nothing was checked: that is not a pass.
        return {
            "checks": [],
            "verdict": "inconclusive",
            "reasons": ["no accuracy gates are set for this scheme; set [validation.gates] or [targets.gates]"],
        }
    return {"checks": checks, "verdict": overall_verdict(checks), "reasons": _reasons(checks)}


def _reasons(checks: list[dict[str, Any]]) -> list[str]:
    reasons = []
    for c in checks:
        low, high = c["ci95"]
        span = f"95% CI {low:.4g}–{high:.4g}, n={c['n']}" if low is not None else f"n={c['n']}"
        if c["verdict"] == "fail":
            sign = ">" if c["direction"] == "max" else "<"
            reasons.append(f"{c['metric']} = {c['value']:.4g} ({span}) {sign} {c['threshold']:g}")
        elif c["verdict"] == "inconclusive":
            reasons.append(f"{c['metric']} = {c['value']:.4g}: its {span} straddles the threshold {c['threshold']:g}")
    return reasons


def gates_for(recipe: Recipe, target: Target) -> Gates:
    backend = get_backend(target.backend)
    return backend.default_gates(target.scheme).merged(recipe.spec.validation.gates, target.gates)


def export_reference(entry: CacheEntry, dest: Path) -> Path:
    """Copy a reference cache entry so another machine can import it into its cache."""
    target = dest / f"{REFERENCE_STAGE}-{entry.key}"
    shutil.copytree(entry.path, target)
    return target


def import_reference(src: Path, cache: StageCache) -> CacheEntry:
    from edgekit.errors import UsageError

    try:
        meta = json.loads((src / "entry.json").read_text())
    except (OSError, json.JSONDecodeError):
        meta = {}
    if meta.get("stage") != REFERENCE_STAGE or "key" not in meta:
        raise UsageError(f"{src} is not a reference exported by `edgekit reference --export`")
    final = cache.entry_path(REFERENCE_STAGE, meta["key"])
    if not final.exists():
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f".{final.name}.pid{os.getpid()}.partial")
        shutil.copytree(src, tmp)
        os.replace(tmp, final)
    found = cache.lookup(REFERENCE_STAGE, meta["key"])
    if found is None:
        raise UsageError(f"{src} is incomplete or damaged (file sizes differ from its entry.json)")
    return found
