"""imatrix: an importance matrix of the converted GGUF on the calibration range, with llama.cpp's `llama-imatrix`.

The range is the plan's (`edgekit.plan.calibration`): the end of the text, past every scored token. The tool
reads text, so it gets the range's characters and tokenizes them itself. Cached by the converted model, the
range, the windows read and the tools build; every gguf target with `imatrix = true` (and every ladder
candidate) of the same model shares it.
"""

from __future__ import annotations

from pathlib import Path

from edgekit.backends.gguf.backend import F16_FILE
from edgekit.backends.gguf.llama_tools import IMATRIX_FILE, compute_imatrix, imatrix_summary
from edgekit.errors import StageError
from edgekit.plan.tasks import ImatrixTask
from edgekit.stages.context import StageContext
from edgekit.store.results import ImatrixResult


def run(task: ImatrixTask, ctx: StageContext, out: Path) -> ImatrixResult:
    model = ctx.entry(task.converted).path / F16_FILE
    cal = task.calibration
    what = f"imatrix  {task.chunks} windows of {task.context} tokens, tokens {cal.start:,}–{cal.end:,} (llama-imatrix)"
    with ctx.progress.task(what):
        try:
            compute_imatrix(model, task.text.text[task.char_start :], task.chunks, task.context, out, ctx.threads)
        except StageError as exc:
            raise StageError("imatrix", exc.message.removeprefix("[imatrix] "), f"tokens {cal.start:,}–{cal.end:,} "
                             f"of {cal.origin} must hold {task.chunks} windows of {task.context} tokens as llama.cpp "
                             "tokenizes them: lower imatrix_chunks or imatrix_context") from None  # fmt: skip
    return ImatrixResult(IMATRIX_FILE, cal.record(), imatrix_summary(out / IMATRIX_FILE))
