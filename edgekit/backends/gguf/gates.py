"""Default accuracy gates of the GGUF schemes, next to the backend that produces them.

From llama.cpp's published KL-divergence figures for Llama-3-8B on wikitext-2 (mean KLD: Q8_0 ≈ 0.0014,
Q5_K_M ≈ 0.011, Q4_K_M ≈ 0.031), with about 4x headroom for small models, which have fewer redundant
weights and lose more to the same scheme. Q4_0 and IQ4_NL (4.5 bits, one scale per 32 weights, no K-quant
super-blocks; IQ4_NL on a non-linear grid) lose more than Q4_K_M: about twice its KLD for Q4_0 and a little more
for IQ4_NL in the same tables, so their gates are Q4_K_M's widened by as much. Recipes override them with
[validation.gates].
"""

from __future__ import annotations

from edgekit.signoff.gates import Gates

# No task gate by default: the cloze task of the default eval (about 130–200 sentence-final words) has a
# paired 95% interval of ±4–5 points, as wide as any sensible threshold, so a task gate there would be
# inconclusive, not a decision. Task accuracies are reported, not gated; `task_drop_max` turns a gate on
# for a recipe with enough items (docs/signoff.md, "Verdicts that decide").

DEFAULT_GATES: dict[str, Gates] = {
    "F16": Gates(kld_mean_max=0.002, ppl_ratio_max=1.005, top1_min=0.98),
    "Q8_0": Gates(kld_mean_max=0.006, ppl_ratio_max=1.02, top1_min=0.93),
    "Q5_K_M": Gates(kld_mean_max=0.045, ppl_ratio_max=1.06, top1_min=0.85),
    "Q4_K_M": Gates(kld_mean_max=0.12, ppl_ratio_max=1.15, top1_min=0.80),
    "IQ4_NL": Gates(kld_mean_max=0.15, ppl_ratio_max=1.18, top1_min=0.78),
    "Q4_0": Gates(kld_mean_max=0.24, ppl_ratio_max=1.25, top1_min=0.74),
}
