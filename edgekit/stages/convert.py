"""convert: the checkpoint into each backend's unquantized form (GGUF F16, OpenVINO/ONNX FP model).

One entry per (checkpoint, backend, converter versions, provenance): every target of a backend
quantizes from the same converted model.
"""

from __future__ import annotations

from pathlib import Path

from edgekit.backends.catalog import build_backend
from edgekit.plan.tasks import ConvertTask
from edgekit.stages import fetch
from edgekit.stages.context import StageContext
from edgekit.store.results import ConvertResult


def run(task: ConvertTask, ctx: StageContext, out: Path) -> ConvertResult:
    backend = build_backend(task.backend)
    backend.require()
    if task.direct:
        backend.convert_gguf(Path(task.checkpoint.location), out, ctx.env, ctx.progress, task.provenance)
    else:
        checkpoint = fetch.checkpoint_folder(task.checkpoint, ctx.entry(task.checkpoint))
        backend.convert(checkpoint, out, ctx.env, ctx.progress, task.provenance)
    return ConvertResult(task.backend, "the GGUF source file" if task.direct else "the fetched checkpoint")
