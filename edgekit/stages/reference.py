"""reference: the source checkpoint on torch, scored once per (checkpoint, eval data, dtype, storage settings).

Storage is bounded whatever the vocabulary: per scored token, the reference's top-k token ids and
log-probabilities, `tail_samples` tokens drawn from the rest of its distribution and the
log-probability of the actual next token (1,028 bytes a token with k = 64 and 64 samples: about 320 MiB
for wikitext-2's 330k tokens, for a 32k or a 150k vocabulary alike, where full FP16 logits would be
21 GiB or 100 GiB). Arrays are written window by window into memory-mapped .npy files and read back
the same way, so memory does not grow with the eval length. The noise floor (the reference against
itself in a second dtype) is computed here too. Memory does not grow with the model either when the
reference is streamed one decoder layer at a time (`edgekit.reference.streamed`, the same logits to the bit):
`plan_memory` chooses whole or streamed from the model's size and what may be allocated, and stops
with exit 3 when neither fits. `export_reference` / `import_reference` carry the entry from a GPU box
to CPU build boxes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.observe.progress import Progress
from edgekit.plan.tasks import Bootstrap, ReferenceTask
from edgekit.reference.memory import MemoryPlan
from edgekit.signoff.differences import reference_completions
from edgekit.signoff.evaldata import ClozeItem, ItemScore, Windows, cloze_correct
from edgekit.signoff.metrics import reference_slice
from edgekit.signoff.scoring import (
    ARRAYS,
    Reference,
    evaluate,
    load_evaluation,
    open_arrays,
    save_evaluation,
    score_task,
    summarise,
)
from edgekit.stages.context import StageContext
from edgekit.store.cache import CacheEntry
from edgekit.store.results import NoiseFloorRecord, ReferenceResult

NOISE_FILE = "noise_floor.npz"
STREAM_DIR = ".stream"  # the streamed pass's hidden states, removed before the entry is published


def run(task: ReferenceTask, ctx: StageContext, out: Path) -> ReferenceResult:
    from edgekit.reference.torch_runner import resolve_device
    from edgekit.stages.fetch import checkpoint_folder

    device = resolve_device(task.device, task.dtype)
    path = checkpoint_folder(task.checkpoint, ctx.entry(task.checkpoint))
    dtypes = [device.dtype] + ([task.noise_floor_dtype] if task.noise_floor_dtype not in ("none", device.dtype) else [])
    memory = plan_memory(task, device.device, path, dtypes)
    started = time.time()
    model = _open_model(memory.mode, task, device, path, dtypes, out, ctx)
    try:
        with ctx.progress.task(f"reference  load checkpoint on torch {device.device} {device.dtype}"):
            runner = model.runner(device.dtype)
        try:
            windows = task.eval.windows
            np.save(out / "tokens.npy", windows.ids)
            k, s = min(task.top_k, runner.vocab_size - 1), task.tail_samples
            correct = _score_windows(runner, task, windows, k, s, out, ctx.progress)
            task_records = [_task_record(t, score_task(t, runner, ctx.progress, "reference")) for t in task.eval.tasks]
            completions = _completions(runner, task, memory.mode, ctx)
            vocab_size = runner.vocab_size
        finally:
            runner.close()
        result = ReferenceResult(
            device=device.device,
            dtype=device.dtype,
            device_name=device.name,
            context_length=windows.length,
            first_scored=windows.first_scored,
            tokens=len(windows.ids),
            windows=windows.count,
            scored_tokens=windows.scored_total,
            top_k=k,
            tail_samples=s,
            vocab_size=vocab_size,
            text={"origin": task.eval.text.origin, "sha256": task.eval.text.sha256},
            cloze={"items": [[c.window, c.start, c.end] for c in task.eval.cloze], "reference_correct": correct},
            tasks=task_records,
            completions=completions,
            reference_seconds=round(time.time() - started, 2),
            storage_bytes_per_token=(k + s) * 8 + 4,
            memory=memory.as_record(),
        )
        if len(dtypes) > 1:
            partial = _open(task, out, result)  # the entry is still being produced: read the arrays just written
            result.noise_floor = _noise_floor(dtypes[1], model, partial, out, ctx)
    finally:
        model.close()
    return result


def plan_memory(task: ReferenceTask, device: str, checkpoint: Path, dtypes: list[str]) -> MemoryPlan:
    """Whole or streamed, from the checkpoint's sizes and what this process may allocate; exit 3 if neither fits."""
    from edgekit.observe.memwatch import available_memory
    from edgekit.reference.memory import ModelShape, choose, estimates

    windows = task.eval.windows
    longest = max([windows.length] + [len(i.ids) for t in task.eval.tasks for i in t.items])
    needs = estimates(ModelShape.of(checkpoint), dtypes, longest, windows.scored_per_window)
    streamable = None
    if task.memory == "stream" or (task.memory == "auto" and device == "cpu"):
        from transformers import AutoConfig

        from edgekit.reference.streamed import why_not_streamable

        streamable = why_not_streamable(checkpoint, AutoConfig.from_pretrained(checkpoint))
    return choose(task.memory, device, needs, available_memory(), streamable)


def _completions(runner: Any, task: ReferenceTask, mode: str, ctx: StageContext) -> list[dict[str, Any]]:
    """Greedy completions need new sequences each step: a streamed reference only holds the ones it streamed."""
    if mode != "full" or not task.eval.prompts:
        return []
    count = len(task.eval.prompts)
    with ctx.progress.task(f"reference  greedy completions of {count} prompts", total=count, unit="prompts") as t:
        return reference_completions(runner, task.eval.prompts, t.advance)


def _open_model(
    mode: str, task: ReferenceTask, device: Any, checkpoint: Path, dtypes: list[str], out: Path, ctx: StageContext
) -> Any:
    """`runner(dtype)` for each dtype: the whole model loaded per dtype, or every sequence streamed through once."""
    from edgekit.reference.torch_runner import WholeModel

    if mode == "full":
        return WholeModel(checkpoint, device, ctx.threads)
    from edgekit.reference.streamed import StreamedModel

    sequences: list[Sequence[int]] = [task.eval.windows.window(i).tolist() for i in range(task.eval.windows.count)]
    sequences += [item.ids for t in task.eval.tasks for item in t.items]
    stream = StreamedModel(checkpoint, device.device, dtypes, sequences, out / STREAM_DIR, ctx.threads)
    try:
        label = f"reference  streamed: {stream.layers} layers × {len(stream.index)} sequences, {' + '.join(dtypes)}"
        with ctx.progress.task(label, total=stream.layers + 1, unit="layers") as t:
            stream.run(t.advance)
    except BaseException:
        stream.close()
        raise
    return stream


def _score_windows(
    runner: Any, task: ReferenceTask, windows: Windows, k: int, s: int, out: Path, progress: Progress
) -> list[bool]:
    n = windows.scored_total
    shapes = {"topk_ids": (np.int32, (n, k)), "topk_logp": (np.float32, (n, k)), "tail_ids": (np.int32, (n, s)),
              "tail_logp": (np.float32, (n, s)), "target_logp": (np.float32, (n,))}  # fmt: skip
    arrays = {
        name: np.lib.format.open_memmap(out / f"{name}.npy", mode="w+", dtype=dtype, shape=shape)
        for name, (dtype, shape) in shapes.items()
    }
    per = windows.scored_per_window
    cloze = list(task.eval.cloze)
    correct: list[bool] = []
    label = f"reference  {windows.count} windows × {windows.length} tokens"
    with progress.task(label, total=windows.count, unit="windows") as t:
        for i in range(windows.count):
            logits = runner.logits(windows.window(i))
            positions, targets = windows.scored(i)
            ref = reference_slice(logits[positions], targets, k, s, np.random.default_rng([task.seed, i]))
            rows = slice(i * per, (i + 1) * per)
            for name in ARRAYS:
                arrays[name][rows] = getattr(ref, name)
            correct += cloze_correct(cloze, i, windows.window(i), logits.argmax(-1))
            t.advance()
    for array in arrays.values():
        array.flush()
    return correct


def _task_record(task: Any, scores: list[ItemScore]) -> dict[str, Any]:
    return {
        "name": task.name,
        "kind": task.kind,
        "sha256": task.sha256,
        "items": [[list(i.ids), i.split, i.group, i.choice, i.answer, i.nbytes] for i in task.items],
        "reference_scores": [[s.loglik, s.greedy] for s in scores],
    }


def _open(task: ReferenceTask, folder: Path, result: ReferenceResult, key: str = "") -> Reference:
    windows = Windows(np.load(folder / "tokens.npy"), result.context_length, result.first_scored)
    scores = {t["name"]: [ItemScore(*s) for s in t["reference_scores"]] for t in result.tasks}
    return Reference(
        key=key,
        path=folder,
        windows=windows,
        arrays=open_arrays(folder),
        cloze=[ClozeItem(*c) for c in result.cloze["items"]],
        cloze_correct=np.array(result.cloze["reference_correct"], dtype=bool),
        tasks=list(task.eval.tasks),
        task_scores=scores,
        completions=result.completions,
    )


def load_reference(task: ReferenceTask, entry: CacheEntry) -> Reference:
    return _open(task, entry.path, ReferenceResult.of(entry), entry.key)


def _noise_floor(dtype: str, model: Any, ref: Reference, out: Path, ctx: StageContext) -> NoiseFloorRecord:
    """The reference against itself in a second dtype: what 'no quantization error' looks like here."""
    with ctx.progress.task(f"reference  noise floor: load torch {dtype}"):
        runner = model.runner(dtype)
    try:
        evaluation = evaluate(runner, ref, ctx.progress, f"noise floor ({dtype})", stage="reference")
    finally:
        runner.close()
    save_evaluation(out / NOISE_FILE, evaluation)
    scores = {k: [[s.loglik, s.greedy] for s in v] for k, v in evaluation.task_scores.items()}
    return NoiseFloorRecord(dtype, NOISE_FILE, scores)


def noise_floor_metrics(ref: Reference, noise: NoiseFloorRecord | None, bootstrap: Bootstrap) -> dict[str, Any] | None:
    """The noise floor's figures as the report shows them (None without one)."""
    if noise is None:
        return None
    evaluation = load_evaluation(ref.path / noise.file, noise.task_scores)
    summary = summarise(evaluation, ref, bootstrap.resamples, bootstrap.block_tokens, bootstrap.seed)
    return {"dtype": noise.dtype, "metrics": summary.metrics, "tasks": summary.tasks,
            "token_file": str(ref.path / noise.file)}  # fmt: skip
