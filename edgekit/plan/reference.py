"""The reference task, resolved at planning time: where and in which dtype it runs, and what computes it.

Its key holds the resolved device and dtype (a CUDA FP16 reference and a CPU FP32 one are different
references), the public versions of torch and transformers, the checkpoint (the fetch task's key: the
source files' hashes or the resolved commit, and the converter's version) and the eval data. A recipe
that says `reference_device = "cuda"` resolves to CUDA even on a machine without a GPU: the build box
of a GPU-computed reference plans the same key and imports the entry instead of computing it.
"""

from __future__ import annotations

from edgekit._util.versions import dist_version
from edgekit.plan.tasks import FetchTask, ReferenceTask
from edgekit.recipe.schema import ValidationSection
from edgekit.signoff.evaldata import EvalPlan

# The packages whose arithmetic the reference is: part of its key.
REFERENCE_PACKAGES = ("torch", "transformers")


def reference_task(cfg: ValidationSection, fetch: FetchTask, evaluation: EvalPlan) -> ReferenceTask:
    device, dtype = planned_device(cfg.reference_device, cfg.reference_dtype)
    return ReferenceTask(
        checkpoint=fetch,
        eval=evaluation,
        device=device,
        dtype=dtype,
        noise_floor_dtype=cfg.noise_floor_dtype,
        top_k=cfg.top_k,
        tail_samples=cfg.tail_samples,
        seed=cfg.seed,
        versions=reference_versions(),
        memory=cfg.reference_memory,
    )


def planned_device(device: str, dtype: str) -> tuple[str, str]:
    """The device and dtype the reference runs in: `auto` is CUDA when this machine has it, else the CPU;
    the `auto` dtype is FP16 on CUDA and FP32 on the CPU."""
    if device == "auto":
        device = "cuda" if _cuda_available() else "cpu"
    if dtype == "auto":
        dtype = "float16" if device == "cuda" else "float32"
    return device, dtype


def reference_versions() -> dict[str, str | None]:
    """Public versions ("2.13.0", not "2.13.0+cpu"): the device is keyed apart, and a CUDA build of torch
    computing a reference on the GPU box is the same torch as the CPU build on the build box."""
    out: dict[str, str | None] = {}
    for name in REFERENCE_PACKAGES:
        version = dist_version(name)
        out[name] = version.split("+", 1)[0] if version else None
    return out


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # the reference stage says what to install, if it has to run here
        return False
    return bool(torch.cuda.is_available())
