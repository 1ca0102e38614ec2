"""The prefill budget: a step with prompt tokens lasts about max_stall × a decode-only step (no clocks here:
the step times are given)."""

from __future__ import annotations

from edgekit.runtime.serve.prefill_budget import FIRST_GUESS, PrefillBudget


def test_a_fixed_chunk_is_kept() -> None:
    budget = PrefillBudget(chunk=64)
    budget.observe(0.020, decoding=3, prompt_tokens=0)
    budget.observe(0.200, decoding=3, prompt_tokens=64)
    assert budget.tokens() == 64


def test_auto_sizes_the_step_from_what_steps_took() -> None:
    budget = PrefillBudget(chunk=None, max_stall=2.0)
    assert budget.tokens() == FIRST_GUESS  # nothing measured yet
    for _ in range(20):
        budget.observe(0.020, decoding=3, prompt_tokens=0)  # decode-only: 20 ms
        budget.observe(0.020 + 8 * 0.004, decoding=3, prompt_tokens=8)  # 4 ms per prompt token
    assert budget.tokens() == 5  # (2 − 1) × 20 ms ÷ 4 ms: the step stays within 2 × 20 ms
    budget.max_stall = 4.0
    assert budget.tokens() == 15


def test_prefill_only_steps_do_not_count_as_decode_steps() -> None:
    budget = PrefillBudget(chunk=None)
    budget.observe(1.5, decoding=0, prompt_tokens=256)  # nothing running: nothing stalls
    budget.observe(0.200, decoding=2, prompt_tokens=8)  # no decode step known yet: no per-token cost
    assert budget.decode_s is None and budget.token_s is None and budget.tokens() == FIRST_GUESS


def test_a_cheap_prompt_token_never_gives_less_than_one() -> None:
    budget = PrefillBudget(chunk=None, max_stall=1.1)
    budget.observe(0.010, decoding=1, prompt_tokens=0)
    budget.observe(0.500, decoding=1, prompt_tokens=1)
    assert budget.tokens() == 1
