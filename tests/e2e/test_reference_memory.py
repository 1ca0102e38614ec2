"""The reference in bounded memory: streamed one decoder layer at a time, it is the whole model's to the bit.

On the default model, the streamed logits of every default window equal the whole-model reference's
(max abs difference and KL divergence below 1e-6), so do the stored reference arrays and the noise
floor; on three other architectures' tiny models, in FP32 and BF16 alike. Under a memory limit the
whole model does not fit in (RLIMIT_DATA on a child), `auto` streams and finishes, and `full` stops
before it starts with exit 3 and the numbers.
"""

from __future__ import annotations

import dataclasses
import json
import re
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgekit.errors import ExitCode
from edgekit.observe.progress import SilentProgress
from edgekit.pipeline.build import BuildResult
from edgekit.plan.make import make_plan
from edgekit.recipe.load import DEFAULT_RECIPE, load_recipe
from edgekit.reference.memory import AUTO_MARGIN
from edgekit.reference.streamed import StreamedModel
from edgekit.reference.torch_runner import ReferenceDevice, TorchRunner
from edgekit.signoff.metrics import log_softmax, reference_slice
from edgekit.signoff.scoring import ARRAYS, evaluate, load_evaluation
from edgekit.stages import fetch
from edgekit.stages.reference import NOISE_FILE, load_reference
from edgekit.store.cache import StageCache
from tests.support.arch_zoo import make_model
from tests.support.hub_fixtures import save_random_llama
from tests.support.stage_cache import cli_env

ROUND_OFF = 1e-6


def kld(p_logits: np.ndarray, q_logits: np.ndarray) -> np.ndarray:
    """Exact KL(P‖Q) per position, over the whole vocabulary."""
    p, q = log_softmax(p_logits), log_softmax(q_logits)
    return (np.exp(p) * (p - q)).sum(axis=-1)


def test_streamed_reference_is_the_whole_models_on_the_default_windows(
    default_build: BuildResult, stage_cache: StageCache, tmp_path: Path
) -> None:
    cache = stage_cache
    task = make_plan(load_recipe(DEFAULT_RECIPE), cache_root=cache.root, threads=2).reference
    assert task is not None and dataclasses.replace(task, memory="stream").key == task.key  # one entry serves both
    entry = cache.lookup("reference", task.key)
    assert entry is not None and entry.result["memory"]["mode"] == "full"  # 135M parameters: auto keeps it whole
    ref = load_reference(task, entry)
    checkpoint = fetch.checkpoint(task.checkpoint, cache.lookup("fetch", task.checkpoint.key)).path
    windows = task.eval.windows
    sequences = [windows.window(i) for i in range(windows.count)]
    stream = StreamedModel(checkpoint, "cpu", ["float32", "bfloat16"], sequences, tmp_path / "hidden", threads=2)
    stream.run(lambda: None)
    streamed, whole = stream.runner("float32"), TorchRunner(checkpoint, ReferenceDevice("cpu", "float32", "cpu"), 2)
    difference, divergence = 0.0, 0.0
    k, s = entry.result["top_k"], entry.result["tail_samples"]
    for i in range(windows.count):
        a, b = whole.logits(windows.window(i)), streamed.logits(windows.window(i))
        difference, divergence = max(difference, float(np.abs(a - b).max())), max(divergence, float(kld(a, b).max()))
        positions, targets = windows.scored(i)
        again = reference_slice(b[positions], targets, k, s, np.random.default_rng([task.seed, i]))
        stored = ref.window_slice(i)
        for name in ARRAYS:
            assert np.abs(getattr(again, name).astype(np.float64) - getattr(stored, name)).max() < ROUND_OFF, name
    whole.close()
    streamed.close()
    assert difference < ROUND_OFF and divergence < ROUND_OFF, (difference, divergence)
    noise = stream.runner("bfloat16")  # the noise floor, from the same pass
    measured = evaluate(noise, ref, SilentProgress(), "noise floor")
    noise.close()
    stored = load_evaluation(entry.path / NOISE_FILE, entry.result["noise_floor"]["task_scores"])
    assert np.abs(measured.tokens.kld - stored.tokens.kld).max() < ROUND_OFF
    assert np.array_equal(measured.cloze_correct, stored.cloze_correct)
    stream.close()
    assert not (tmp_path / "hidden").exists()
    report = json.loads((default_build.bundle / "report.json").read_text())
    assert report["reference"]["memory"]["mode"] == "full"
    stages, build = report["memory"]["stages"], report["memory"]["build"]
    assert {"fetch", "convert", "quantize", "reference", "validate"} <= stages.keys()
    assert stages["reference"]["rss_anon_peak_mib"] > 100 and stages["reference"]["rss_file_peak_mib"] > 0
    assert build["rss_peak_mib"] >= build["rss_anon_peak_mib"] > 0


@pytest.mark.parametrize("arch", ["gemma3_text", "qwen2", "phi3"])
def test_streamed_logits_are_the_whole_models_on_other_architectures(arch: str, tmp_path: Path) -> None:
    """Sliding-window and full layers, soft-capping and embedding scaling (gemma3), biases and untied
    embeddings (qwen2), fused projections (phi3): sequences longer than gemma3's 16-token window."""
    folder = make_model(arch, tmp_path / arch)
    rng = np.random.default_rng(1)
    sequences = [rng.integers(3, 900, n).tolist() for n in (96, 96, 7)]
    stream = StreamedModel(folder, "cpu", ["float32", "bfloat16"], sequences, tmp_path / "hidden", threads=2)
    stream.run(lambda: None)
    for dtype in ("float32", "bfloat16"):
        streamed, whole = stream.runner(dtype), TorchRunner(folder, ReferenceDevice("cpu", dtype, "cpu"), 2)
        for ids in sequences:
            a, b = whole.logits(ids), streamed.logits(ids)
            assert np.abs(a - b).max() < ROUND_OFF and kld(a, b).max() < ROUND_OFF, (arch, dtype)
        streamed.close()
        whole.close()
    stream.close()


LIMITED = """
[model]
source = "model"

[[targets]]
backend = "gguf"
scheme = "Q8_0"

[validation]
max_tokens = 512
context_length = 128
noise_floor_dtype = "none"
reference_memory = "{mode}"

[bundle]
name = "limited"
"""
# Private writable memory this process tree may have (RLIMIT_DATA) for the first run: the whole 231M-parameter
# model in FP32 needs 1.3 GiB with its scoring, streamed 0.6 GiB, and what edgekit has mapped when the reference
# starts (0.5–1 GiB, by environment and run) comes on top. The second run's limit is just below what the whole
# model would need above what the first run found mapped: room to stream, not to load the whole model.
LIMIT = 1700 * 2**20
GIB = r"(\d+(?:\.\d+)?) GiB"


def _reference_under_limit(project: Path, mode: str, cache: Path, limit_bytes: int = LIMIT
                           ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    (project / "recipe.toml").write_text(LIMITED.format(mode=mode))

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (limit_bytes, limit_bytes))

    env = cli_env(cache, COLUMNS="200", HF_HUB_OFFLINE="1")
    command = [sys.executable, "-m", "edgekit", "reference", "recipe.toml", "--threads", "2"]
    return subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, preexec_fn=limit)


def test_under_a_memory_limit_auto_streams_and_full_stops_with_exit_3(smollm2_gguf: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    save_random_llama(project / "model", smollm2_gguf, hidden=1024, layers=12, intermediate=4096, heads=16,
                      kv_heads=4)  # fmt: skip
    cache = tmp_path / "cache"
    refused = _reference_under_limit(project, "full", cache)
    assert refused.returncode == ExitCode.ENVIRONMENT, refused.stderr
    message = " ".join(refused.stderr.split())
    assert "not enough memory for the reference (the whole model)" in message and "(RLIMIT_DATA)" in message
    assert 'reference_memory = "stream"' in message and "--reference" in message
    assert not list(cache.glob("reference/*/entry.json"))
    found = re.search(rf"and {GIB} can be allocated .*whole model {GIB}, streamed {GIB}", message)
    assert found, message
    available, whole = (float(found.group(i)) * 2**30 for i in (1, 2))
    between = int(LIMIT - available + whole - 0.05 * 2**30)
    streamed = _reference_under_limit(project, "auto", cache, between)
    assert streamed.returncode == 0, streamed.stderr
    [made] = [json.loads(p.read_text()) for p in cache.glob("reference/*/entry.json")]
    memory = made["result"]["memory"]
    assert memory["requested"] == "auto" and memory["mode"] == "stream" and memory["limited_by"] == "RLIMIT_DATA"
    # what is mapped before the reference differs between runs, so this run's allowance may exceed the whole
    # model's estimate; auto still streams when the whole model leaves less than its margin to spare
    assert memory["estimate_full_mib"] > AUTO_MARGIN * memory["available_mib"]
    assert memory["available_mib"] >= memory["estimate_stream_mib"]
    assert made["memory"]["rss_anon_peak_mib"] < between / 2**20
