"""The serve scheduler on the tiny GGUF engine, without HTTP: chunked prefill keeps running streams moving,
prefixes are reused and counted, and an engine with only start/step is still served. The order of events
is what is checked (never how long anything took)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from edgekit.backends.gguf.engine import GGUFEngine
from edgekit.runtime.engines.base import Sampling
from edgekit.runtime.serve import scheduler as scheduler_module
from edgekit.runtime.serve.metrics import ServeMetrics
from edgekit.runtime.serve.prefill_budget import PrefillBudget
from edgekit.runtime.serve.scheduler import Request, Scheduler
from tests.support.tiny_gguf import write_tiny_gguf

CHUNK = 8


class Recorded(Request):
    """A request whose events also go, in the order the scheduler emits them, into a shared log."""

    log: ClassVar[list[tuple[int, str]]] = []
    lock: ClassVar[threading.Lock] = threading.Lock()

    def emit(self, kind: Any, value: Any, token: Any = None) -> None:
        with self.lock:
            self.log.append((self.id, kind))
        super().emit(kind, value, token)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


@pytest.fixture
def engine(model: Path) -> Iterator[GGUFEngine]:
    e = GGUFEngine(model, n_threads=1, n_threads_batch=1, n_ctx=512, n_batch=64, max_sequences=2)
    yield e
    e.close()


async def drain(request: Request) -> list[str]:
    kinds = []
    while True:
        kind = (await request.events.get()).kind
        kinds.append(kind)
        if kind != "text":
            return kinds


def run(engine: Any, body: Any, prefill_chunk: int | str = CHUNK) -> Any:
    async def main() -> Any:
        metrics = ServeMetrics()
        scheduler = Scheduler(engine, max_queue=4, metrics=metrics, prefill_chunk=prefill_chunk)  # type: ignore[arg-type]
        scheduler.start()
        try:
            return await body(scheduler, metrics, asyncio.get_running_loop())
        finally:
            scheduler.stop()

    return asyncio.run(main())


def new(engine: GGUFEngine, text: str, max_tokens: int, loop: asyncio.AbstractEventLoop) -> Recorded:
    return Recorded(engine.tokenize(text), max_tokens, Sampling(), [], loop)


def test_a_long_prompt_is_fed_in_chunks_while_a_stream_keeps_producing_tokens(engine: GGUFEngine) -> None:
    async def body(scheduler: Scheduler, metrics: ServeMetrics, loop: asyncio.AbstractEventLoop) -> None:
        stream = new(engine, "the cat sat on", 200, loop)
        scheduler.submit(stream)
        for _ in range(3):
            assert (await stream.events.get())[0] == "text"
        long = new(engine, "a long prompt about many things " * 8, 2, loop)
        with Recorded.lock:
            Recorded.log.append((long.id, "submitted"))
        scheduler.submit(long)
        await drain(long)
        scheduler.cancel(stream)
        after = Recorded.log[Recorded.log.index((long.id, "submitted")) :]
        first = next(i for i, (rid, kind) in enumerate(after) if rid == long.id and kind != "submitted")
        between = sum(rid == stream.id for rid, _ in after[:first])
        chunks = -(-len(long.prompt_ids) // CHUNK)
        assert between >= chunks - 1, (between, chunks)  # one stream token per chunk, none held back

    run(engine, body)


class CountingBudget(PrefillBudget):
    """The auto budget, with what each step reported to it kept (its timings are the machine's: not checked)."""

    def __init__(self) -> None:
        super().__init__(chunk=None)
        self.steps: list[tuple[int, int, int]] = []  # (budget given, running sequences, prompt tokens taken)

    def tokens(self) -> int:
        return min(super().tokens(), 6)

    def observe(self, seconds: float, decoding: int, prompt_tokens: int) -> None:
        self.steps.append((self.tokens(), decoding, prompt_tokens))
        super().observe(seconds, decoding, prompt_tokens)


class NeverEnds:
    """The engine, with no end-of-generation token: a stream runs until its max_tokens, whatever it samples."""

    eos_ids: frozenset[int] = frozenset()

    def __init__(self, engine: GGUFEngine) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


def test_the_budget_is_told_the_prompt_tokens_each_step_took(engine: GGUFEngine) -> None:
    async def body(scheduler: Scheduler, metrics: ServeMetrics, loop: asyncio.AbstractEventLoop) -> None:
        scheduler.prefill = budget = CountingBudget()
        stream = new(engine, "the cat sat on", 400, loop)
        scheduler.submit(stream)
        for _ in range(5):
            assert (await stream.events.get())[0] == "text"
        long = new(engine, "a long prompt about many things " * 12, 2, loop)
        scheduler.submit(long)
        assert (await drain(long))[-1] == "done"
        scheduler.cancel(stream)
        prompts = len(stream.prompt_ids) + len(long.prompt_ids)
        assert sum(taken for _, _, taken in budget.steps) == prompts  # cold slots: all of each, once
        mixed = [(given, taken) for given, running, taken in budget.steps if running and taken]
        assert len(mixed) >= 2 and all(taken <= given for given, taken in mixed)
        assert budget.decode_s is not None and budget.token_s is not None
        assert 1 <= metrics.value("edgekit_prefill_budget_tokens") <= 6

    run(NeverEnds(engine), body, prefill_chunk="auto")


def test_a_repeated_prompt_reuses_its_prefix_and_counts_it(engine: GGUFEngine) -> None:
    async def body(scheduler: Scheduler, metrics: ServeMetrics, loop: asyncio.AbstractEventLoop) -> list[list[str]]:
        kinds = []
        for _ in range(3):
            request = new(engine, "the system prompt says hello " * 3, 4, loop)
            scheduler.submit(request)
            kinds.append(await drain(request))
        prompt = len(request.prompt_ids)
        assert metrics.value("edgekit_prefix_cache_hits_total", source="slot") == 2
        assert metrics.value("edgekit_prefix_cache_misses_total") == 1
        assert metrics.value("edgekit_prefix_cache_reused_tokens_total") == 2 * (prompt - 1)
        assert metrics.value("edgekit_prompt_tokens_total") == 3 * prompt
        return kinds

    kinds = run(engine, body)
    assert all(k[-1] == "done" for k in kinds)


class StartStepOnly:
    """An engine with only the base protocol (a third-party backend): prompts are prefilled whole."""

    def __init__(self, engine: GGUFEngine) -> None:
        self._engine = engine
        self.backend, self.max_sequences = "toy", engine.max_sequences
        self.eos_ids, self.chat_template = engine.eos_ids, engine.chat_template
        self.started: list[int] = []

    def start(self, seq: int, ids: list[int], sampling: Sampling) -> int:
        self.started.append(len(ids))
        return self._engine.start(seq, ids, sampling)

    def step(self) -> dict[int, int]:
        return self._engine.step()

    def finish(self, seq: int) -> None:
        self._engine.finish(seq)

    def detokenize(self, ids: list[int]) -> bytes:
        return self._engine.detokenize(ids)


def test_an_engine_with_only_start_and_step_is_still_served(engine: GGUFEngine) -> None:
    plain = StartStepOnly(engine)

    async def body(scheduler: Scheduler, metrics: ServeMetrics, loop: asyncio.AbstractEventLoop) -> None:
        requests = [new(engine, text, 5, loop) for text in ("one prompt", "another prompt " * 10)]
        for request in requests:
            scheduler.submit(request)
        results = [await drain(r) for r in requests]
        assert all(r[-1] == "done" for r in results)
        assert sorted(plain.started) == sorted(len(r.prompt_ids) for r in requests)  # whole, not chunked
        assert metrics.value("edgekit_prefix_cache_misses_total") == 2

    run(plain, body)


class EndsAtOnce(NeverEnds):
    """The engine, where every token ends the generation."""

    @property
    def eos_ids(self) -> frozenset[int]:  # type: ignore[override]
        return frozenset(range(self._engine.n_vocab))


def test_ignore_eos_generates_max_tokens_whatever_the_model_says(engine: GGUFEngine) -> None:
    async def body(scheduler: Scheduler, metrics: ServeMetrics, loop: asyncio.AbstractEventLoop) -> None:
        stopping = new(engine, "the cat sat on", 6, loop)
        fixed = Recorded(engine.tokenize("the cat sat on"), 6, Sampling(), [], loop, ignore_eos=True)
        for request in (stopping, fixed):
            scheduler.submit(request)
            assert (await drain(request))[-1] == "done"
        assert (stopping.completion_tokens, fixed.completion_tokens) == (0, 6)

    run(EndsAtOnce(engine), body)


class CallLog(NeverEnds):
    """The engine, with its admit and advance calls logged in order."""

    def __init__(self, engine: GGUFEngine) -> None:
        super().__init__(engine)
        self.calls: list[str] = []

    def admit(self, seq: int, ids: list[int], sampling: Sampling) -> Any:
        self.calls.append("admit")
        return self._engine.admit(seq, ids, sampling)

    def advance(self, budget: int) -> dict[int, int]:
        self.calls.append("advance")
        return self._engine.advance(budget)


def test_an_idle_loop_gathers_requests_being_read_and_clients_whose_streams_ended_together(
    engine: GGUFEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduler_module, "GATHER_S", 60.0)  # only arrivals end a wait, never the clock
    log = CallLog(engine)

    async def body(scheduler: Scheduler, metrics: ServeMetrics, loop: asyncio.AbstractEventLoop) -> None:
        def pair() -> list[Recorded]:
            return [new(engine, text, 2, loop) for text in ("one prompt", "another prompt")]

        started = time.perf_counter()
        lone = new(engine, "a lone prompt", 2, loop)
        scheduler.submit(lone)  # nothing else is being read, nothing ended before: it starts at once
        assert (await drain(lone))[-1] == "done"
        assert time.perf_counter() - started < 30
        first, second = pair()
        log.calls.clear()
        with scheduler.arriving():  # the second request: its body is still being read
            with scheduler.arriving():
                scheduler.submit(first)
            await asyncio.sleep(0.05)  # the loop is awake with `first`, and must not start it alone
            scheduler.submit(second)
        assert [(await drain(r))[-1] for r in (first, second)] == ["done", "done"]
        assert log.calls[:3] == ["admit", "admit", "advance"]
        log.calls.clear()
        first, second = pair()  # their streams ended in the same step: both clients are expected back
        scheduler.submit(first)
        await asyncio.sleep(0.05)
        scheduler.submit(second)
        assert [(await drain(r))[-1] for r in (first, second)] == ["done", "done"]
        assert log.calls[:3] == ["admit", "admit", "advance"]

    run(log, body)
