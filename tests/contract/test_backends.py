"""One contract for every backend (NNCF's cross-framework test templates, in miniature).

`BackendContract` is the contract; each backend subclasses it with its scheme, options and the
bounds that scheme must meet on the real SmolLM2-135M checkpoint:

    convert → quantize → the details carry a precision histogram read back from the artifact
    → logits for token ids: right shape, and close to the torch reference (top-1, mean KL) on a short text
    → the bundle holds the artifact (file or folder) and verifies
    → the runtime engine loads it from the bundle in a process without torch, and generates;
      its first greedy token is the argmax of its own logits() — the validation seam is the serving path;
      three sequences decoded together (one joining while two run) get what each gets alone.
    → a served prompt that reuses a cached prefix (what a slot held, or a copy from the store) gets the logits
      of a cold prefill: identical on llama.cpp; on OpenVINO and ONNX Runtime within twice what two cold
      prefills chunked differently already differ by.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from edgekit.backends.catalog import build_backend
from edgekit.backends.runner import EngineRunner
from edgekit.manifest import verify_bundle
from edgekit.observe.progress import SilentProgress
from edgekit.pipeline.build import BuildResult, build
from edgekit.recipe.load import Recipe, parse_recipe
from edgekit.runtime.config import RuntimeConfig
from edgekit.runtime.engines import load_engine
from edgekit.runtime.engines.base import Sampling
from edgekit.runtime.engines.prefix import Reuse, common_prefix
from edgekit.store.cache import StageCache
from edgekit.store.records import Artifact
from tests.support.contract import BUNDLE_NAME, recipe_text
from tests.support.stage_runs import quantized

ENGINE_SCRIPT = r"""
import json, math, re, sys
from pathlib import Path
from edgekit.runtime.engines.base import Sampling
from edgekit.runtime.loader import open_bundle

BUILD = re.compile(r"edgekit[.](stages|plan|pipeline|backends[.][a-z_]+[.](backend|child))([.]|$)")
bundle, name = Path(sys.argv[1]), sys.argv[2]
loaded = open_bundle(bundle, artifact=name, overrides={"n_threads": 2, "n_threads_batch": 2}, warm_up=False)
engine = loaded.engine
prompt = engine.tokenize("The capital of France is")
expected = int(engine.logits(prompt)[-1].argmax())
tokens = [engine.start(0, prompt, Sampling())]
tokens += [engine.step()[0] for _ in range(11)]
engine.finish(0)
chat = engine.tokenize("<|im_start|>user", special=True)
# Batched decode: three sequences, one joining while two run, against each one alone.
prompts = [engine.tokenize(t) for t in ("The capital of France is", "Once upon a time, in a small village", "1, 2, 3,")]
alone = []
for p in prompts:
    alone.append([engine.start(0, p, Sampling())] + [engine.step()[0] for _ in range(7)])
    engine.finish(0)
together = {s: [engine.start(s, prompts[s], Sampling())] for s in (0, 1)}
for _ in range(2):
    for s, t in engine.step().items():
        together[s].append(t)
together[2] = [engine.start(2, prompts[2], Sampling())]
while any(len(v) < 8 for v in together.values()):
    for s, t in engine.step().items():
        together[s].append(t)
        if len(together[s]) == 8:
            engine.finish(s)
# Where a sequence differs, how close its alone run's choice was there: the logit of the token it picked alone
# minus that of the token picked batched, and the resolution of the precision the engine computes in (an
# engine that computes in bf16, as OpenVINO does on CPUs with AMX or AVX512_BF16, rounds logits to 8 bits).
margins = []
for s in range(3):
    k = next((i for i, (a, b) in enumerate(zip(alone[s], together[s])) if a != b), None)
    row = engine.logits(prompts[s] + alone[s][:k])[-1] if k is not None else None
    margins.append(None if row is None else float(row[alone[s][k]] - row[together[s][k]]))
precision = getattr(engine, "properties", {}).get("INFERENCE_PRECISION_HINT")
top = float(abs(engine.logits(prompts[1])[-1]).max())
print(json.dumps({
    "batched_same": [together[s] == alone[s] for s in range(3)],
    "batched_margins": margins,
    "resolution": 2 * 2.0 ** (math.floor(math.log2(top)) - 7) if precision == "bf16" else 0.0,
    "backend": engine.backend,
    "tokens": tokens,
    "expected_first": expected,
    "text": engine.detokenize(tokens).decode("utf-8", "replace"),
    "eos": sorted(engine.eos_ids),
    "template": bool(engine.chat_template),
    "chat_ids": chat,
    "heavy": sorted(m for m in sys.modules if m in ("torch", "transformers") or BUILD.match(m)),
}))
engine.close()
"""


def served_logits(engine: Any, seq: int, ids: list[int]) -> tuple[Reuse, np.ndarray]:
    """Admit `ids` as `serve` does and advance until its first token; the logits of its last prompt token."""
    captured: list[np.ndarray] = []
    if not hasattr(engine, "_logits_row"):  # stepwise engines: watch what each model call returns
        run = engine._run
        engine._run = lambda slot, chunk, pos: captured.append(np.array(out := run(slot, chunk, pos))[-1]) or out
    try:
        reuse = engine.admit(seq, ids, Sampling())
        while seq not in engine.advance(16):
            pass
    finally:
        engine.__dict__.pop("_run", None)
    logits = captured[-1] if captured else engine._logits_row(-1).copy()
    engine.finish(seq)
    return reuse, logits


def mean_kld(reference: np.ndarray, candidate: np.ndarray) -> float:
    def log_softmax(x: np.ndarray) -> np.ndarray:
        x = x.astype(np.float64) - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    lr, lc = log_softmax(reference), log_softmax(candidate)
    return float((np.exp(lr) * (lr - lc)).sum(-1).mean())


@pytest.fixture(scope="class")
def recipe(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Recipe:
    contract: type[BackendContract] = request.cls
    path = tmp_path_factory.mktemp(f"{contract.backend}-{contract.scheme}") / "recipe.toml"
    path.write_text(recipe_text(contract.backend, contract.scheme, contract.options))
    return parse_recipe(path.read_bytes(), path)


@pytest.fixture(scope="class")
def artifact(recipe: Recipe, stage_cache_root: Path) -> Artifact:
    (target,) = recipe.targets
    backend = build_backend(target.backend)
    assert not backend.needs_calibration(target.scheme, target.options), "keep contract targets data-free (fast)"
    return quantized(recipe, StageCache(stage_cache_root))


@pytest.fixture(scope="class")
def bundle(recipe: Recipe, artifact: Artifact, stage_cache_root: Path, tmp_path_factory: Any) -> Path:
    out = tmp_path_factory.mktemp("dist")
    result: BuildResult = build(
        recipe, cache=StageCache(stage_cache_root), progress=SilentProgress(), out_dir=out, threads=2
    )
    assert result.bundle == out / BUNDLE_NAME
    return result.bundle


class BackendContract:
    backend: ClassVar[str]
    scheme: ClassVar[str]
    options: ClassVar[dict[str, Any]] = {}
    expected_types: ClassVar[set[str]]  # precision labels the histogram must contain
    bits: ClassVar[tuple[float, float]]  # bits per weight, including scales
    min_top1: ClassVar[float]  # on REFERENCE_TEXTS, ~400 tokens
    max_kld: ClassVar[float]
    folder: ClassVar[bool] = True  # the artifact is a folder (IR, ONNX) rather than one file (GGUF)
    # sequences decoded as rows of one call give each the tokens it gets alone (ONNX Runtime's dynamic INT8
    # quantizes a call's activations with one scale, so its rows can drift: see its engine's docstring)
    min_batched_same: ClassVar[int] = 3
    prefix_exact: ClassVar[bool] = False  # a prefix hit gives bit-identical logits

    # --- the contract ---------------------------------------------------------------------------

    def test_details_carry_a_precision_histogram(self, artifact: Artifact) -> None:
        details = artifact.details
        types = details["tensor_types"]
        assert self.expected_types <= set(types), types
        for entry in types.values():
            assert set(entry) == {"tensors", "params", "bytes"} and min(entry.values()) > 0
        params = sum(t["params"] for t in types.values())
        assert params >= 134_000_000  # every weight of SmolLM2-135M is accounted for
        low, high = self.bits
        assert low <= details["bits_per_weight"] <= high, details["bits_per_weight"]
        assert 0 < details["bytes_per_token"] <= sum(t["bytes"] for t in types.values())
        assert artifact.path.is_dir() == self.folder

    @pytest.mark.parametrize("n_ctx", [128, 512])
    def test_logits_agree_with_the_reference(
        self, artifact: Artifact, reference: list[tuple[str, list[int], np.ndarray]], n_ctx: int
    ) -> None:
        runner = EngineRunner(self.backend, artifact.path, n_ctx=n_ctx, threads=2)
        got, expected = [], []
        try:
            for text, ids, logits in reference:
                assert runner.tokenize(text) == ids
                got.append(runner.logits(ids))
                expected.append(logits)
            assert runner.vocab_size == expected[0].shape[1]
        finally:
            runner.close()
        for g, e in zip(got, expected, strict=True):
            assert g.shape == e.shape and g.dtype == np.float32 and np.isfinite(g).all()
        logits, reference_logits = np.concatenate(got), np.concatenate(expected)
        top1 = float((logits.argmax(-1) == reference_logits.argmax(-1)).mean())
        kld = mean_kld(reference_logits, logits)
        assert top1 >= self.min_top1 and kld <= self.max_kld, (top1, kld)

    def test_bundle_holds_the_artifact_and_verifies(self, bundle: Path, artifact: Artifact) -> None:
        manifest = verify_bundle(bundle)
        (record,) = manifest["artifacts"]
        assert (record["backend"], record["scheme"], record["name"]) == (self.backend, self.scheme, artifact.name)
        path = bundle / record["path"]
        assert path.is_dir() == self.folder and record["size"] == artifact.size
        assert record["verdict"] in ("pass", "fail", "inconclusive")  # validated through its backend's runner
        assert record["tensor_types"] == artifact.details["tensor_types"]
        listed = {f["path"] for f in manifest["files"]}
        files = sorted(p for p in path.rglob("*") if p.is_file()) if self.folder else [path]
        assert files and all(p.relative_to(bundle).as_posix() in listed for p in files)
        command = [sys.executable, "-m", "edgekit", "inspect", str(bundle)]
        inspect = subprocess.run(command, capture_output=True, text=True)
        assert inspect.returncode == 0 and artifact.name in inspect.stdout, inspect.stderr

    def test_engine_runs_from_the_bundle_without_torch(self, bundle: Path, artifact: Artifact) -> None:
        proc = subprocess.run(
            [sys.executable, "-c", ENGINE_SCRIPT, str(bundle), artifact.name],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out["backend"] == self.backend and out["heavy"] == []
        assert out["tokens"][0] == out["expected_first"]  # start() and logits() agree
        assert len(out["tokens"]) == 12 and out["text"].strip()
        assert out["eos"] and out["template"] and out["chat_ids"] == [1, 4093]
        # Batched rows give each sequence its alone tokens, but for a near tie within the engine's precision:
        # two tokens whose logits differ by at most two units of its last place (none when it computes in f32).
        near_tie = [m is not None and 0 <= m <= out["resolution"] for m in out["batched_margins"]]
        kept = [same or tie for same, tie in zip(out["batched_same"], near_tie, strict=True)]
        assert sum(kept) >= self.min_batched_same, (out["batched_same"], out["batched_margins"], out["resolution"])

    def test_a_prefix_hit_gives_the_logits_of_a_cold_prefill(self, artifact: Artifact) -> None:
        config = RuntimeConfig(artifact=artifact.name, n_threads=2, n_threads_batch=2, n_ctx=512, n_batch=64,
                               max_concurrent=2, prefix_cache=2)  # fmt: skip
        engine = load_engine(self.backend, artifact.path, None, config)
        try:
            system = engine.tokenize("You are the assistant of the water pump station. Answer briefly. " * 2)
            first = system + engine.tokenize(" Question: is the north valve open today?")
            second = system + engine.tokenize(" Question: how many pumps run at night?")
            other = engine.tokenize("Unrelated text about the mountains and rivers of the north. " * 3)
            cold = engine.logits(second)[-1].copy()
            engine.n_batch = len(system)  # the same prompt, chunked elsewhere: the backend's own variation
            chunked = engine.logits(second)[-1].copy()
            engine.n_batch = config.n_batch
            served_logits(engine, 0, first)
            assert engine.pick_slot([0, 1], second) == 0
            reuse, hit = served_logits(engine, 0, second)
            assert reuse == Reuse(common_prefix(first, second), "slot")
            served_logits(engine, 0, other)  # repurposes slot 0: `second` goes to the store
            restored_reuse, restored = served_logits(engine, 1, second)
            assert restored_reuse == Reuse(len(second) - 1, "store")
        finally:
            engine.close()
        for got in (hit, restored):
            assert int(got.argmax()) == int(cold.argmax())
            if self.prefix_exact:
                assert np.array_equal(got, cold)
            else:
                assert np.abs(got - cold).max() <= 2 * np.abs(chunked - cold).max(), (got - cold, chunked - cold)


class TestGGUF(BackendContract):
    backend, scheme, folder, prefix_exact = "gguf", "Q8_0", False, True
    expected_types: ClassVar[set[str]] = {"Q8_0"}
    bits = (8.0, 9.0)
    min_top1, max_kld = 0.9, 0.03


class TestOpenVINOInt8(BackendContract):
    backend, scheme = "openvino", "INT8"
    expected_types: ClassVar[set[str]] = {"int8_asym"}
    bits = (8.0, 8.1)
    min_top1, max_kld = 0.9, 0.03


class TestOpenVINOInt4(BackendContract):
    # Data-free, so the contract stays quick; the tied embedding stays INT8 (NNCF's backup precision).
    backend, scheme = "openvino", "INT4"
    options: ClassVar[dict[str, Any]] = {"group_size": 32}
    expected_types: ClassVar[set[str]] = {"int4_asym_g32", "int8_asym"}
    bits = (5.0, 6.0)
    min_top1, max_kld = 0.6, 0.5


class TestONNXRuntimeInt8(BackendContract):
    backend, scheme = "onnxruntime", "INT8"
    options: ClassVar[dict[str, Any]] = {"keep_float": ["/model/layers.2/mlp/down_proj/*"]}
    expected_types: ClassVar[set[str]] = {"int8_per_channel", "uint8", "f32"}
    bits = (8.0, 9.5)
    min_top1, max_kld = 0.7, 0.3
    min_batched_same = 0  # measured: see the engine's docstring
