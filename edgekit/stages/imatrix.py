"""imatrix: an importance matrix of the converted GGUF on the calibration text, with llama.cpp's `llama-imatrix`.

Cached by the converted model, the calibration text, the windows read and the tools build; every gguf target
with `imatrix = true` (and every ladder candidate) of the same model shares it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit.backends.gguf.build import F16_FILE
from edgekit.backends.gguf.levers import IMATRIX_FILE, compute_imatrix, imatrix_summary
from edgekit.errors import StageError
from edgekit.plan.tasks import ImatrixTask
from edgekit.stages.context import StageContext


def run(task: ImatrixTask, ctx: StageContext, out: Path) -> dict[str, Any]:
    model = ctx.entry(task.converted).path / F16_FILE
    what = f"imatrix  {task.chunks} windows of {task.context} tokens from window {task.first_chunk} (llama-imatrix)"
    with ctx.progress.task(what):
        try:
            compute_imatrix(model, task.calibration.text, task.first_chunk, task.chunks, task.context, out,
                            ctx.threads)  # fmt: skip
        except StageError as exc:
            raise StageError("imatrix", exc.message.removeprefix("[imatrix] "), "the calibration text must hold "
                             f"more than {task.first_chunk + 2} windows of {task.context} tokens after the scored "
                             "range: use a longer [validation] text, or lower imatrix_context") from None  # fmt: skip
    return {"path": IMATRIX_FILE, **imatrix_summary(out / IMATRIX_FILE),
            "calibration": {"source": task.source, "sha256": task.calibration.sha256}}  # fmt: skip
