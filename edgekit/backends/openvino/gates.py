"""Default accuracy gates of the openvino schemes, next to the backend that produces them.

Measured on SmolLM2-135M-Instruct (8,192 tokens of the default text, CPU plugin defaults: bf16
inference, u8 KV cache; docs/measurements.md): INT8_ASYM mean KLD 0.0071, top-1
93.9%, PPL ×1.008 — NNCF's "INT8 is near-lossless" holds; the gate leaves 3.5× headroom for
models with fewer redundant weights. INT4 on a model this small is lossy (0.091 with group 32,
ratio 0.8 and scale estimation, top-1 81%; 0.14–0.27 data-free): its gate is a usability floor
with about 1.6× headroom over the best configuration.
"""

from __future__ import annotations

from edgekit.signoff.gates import Gates

# No task gate by default: the cloze task of the default eval (about 130–200 sentence-final words) has a
# paired 95% interval of ±4–5 points, as wide as any sensible threshold, so a task gate there would be
# inconclusive, not a decision. Task accuracies are reported, not gated; `task_drop_max` turns a gate on
# for a recipe with enough items (docs/signoff.md, "Verdicts that decide").

DEFAULT_GATES: dict[str, Gates] = {
    "INT8": Gates(kld_mean_max=0.025, ppl_ratio_max=1.03, top1_min=0.90),
    "INT4": Gates(kld_mean_max=0.15, ppl_ratio_max=1.20, top1_min=0.75),
}
