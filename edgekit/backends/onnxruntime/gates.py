"""Default accuracy gates of the onnxruntime schemes, next to the backend that produces them.

Dynamic INT8 quantizes activations too, one scale per tensor per call: on a model with outlier
activations it cannot match weight-only INT8. Measured on SmolLM2-135M (docs/measurements.md): mean KLD 0.56
with per-tensor weights and nothing excluded, 0.14 per channel with the first token prefilled
alone (the engine does), 0.058 (8,192 tokens, top-1 85%) with outlier_ratio = 8 (5 MatMuls kept
in float). The gate asks what a 4-bit weight-only GGUF (Q4_K_M) must reach: no worse, at twice the bits.
"""

from __future__ import annotations

from edgekit.signoff.gates import Gates

# No task gate by default: the cloze task of the default eval (about 130–200 sentence-final words) has a
# paired 95% interval of ±4–5 points, as wide as any sensible threshold, so a task gate there would be
# inconclusive, not a decision. Task accuracies are reported, not gated; `task_drop_max` turns a gate on
# for a recipe with enough items (docs/signoff.md, "Verdicts that decide").

DEFAULT_GATES: dict[str, Gates] = {
    "INT8": Gates(kld_mean_max=0.12, ppl_ratio_max=1.15, top1_min=0.80),
}
