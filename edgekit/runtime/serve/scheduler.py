"""Continuous batching for `serve`: one thread owns the engine and keeps up to max_sequences running.

Each loop: drop sequences whose client went away, admit waiting requests into free slots, then run one
`engine.advance()`: a decode step of every generating sequence, batched with the next chunk of the
admitted prompts. While other sequences are generating, a prompt is fed a budget of tokens per step
(`PrefillBudget`: by default as many as keep the step within `max_stall` × a decode-only step, or a fixed
`prefill_chunk`), so a long prompt delays the running streams by a bounded share of each token instead of
stopping them for its whole prefill; with nothing generating it is fed `n_batch` tokens at a time. A request goes
to the free slot whose KV state already holds the longest prefix of its prompt (`pick_slot`): a repeated
system prompt or chat history is not prefilled again. A request that finishes frees its slot at once, and
the next waiting request starts at the next loop. An idle loop that wakes for one request first lets the
requests the server is still reading (`arriving`) join it, and when the streams that ran last ended in
the same step, as many requests as there were streams, for at most GATHER_S: clients whose streams
ended together send their next requests together, and started one at a time they would run a step
apart, and stay a step apart. A lone request does not wait. What a loop produced (text,
finishes) is handed to the event loop at its end in one wake-up (`deliver`). The waiting queue is
bounded: `submit` refuses when it is full, and the server answers 429.

Engines without chunked prefill (a third-party backend with only `start`/`step`) are driven through
`_WholePrompts`: each prompt is prefilled at once when admitted, as before.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, NamedTuple

from edgekit.runtime.config import MAX_STALL
from edgekit.runtime.engines import Engine, Sampling
from edgekit.runtime.engines.base import LogprobsEngine, ServingEngine
from edgekit.runtime.engines.prefix import Reuse
from edgekit.runtime.serve.logprobs import OffsetCounter, TokenLogprobs, describe
from edgekit.runtime.serve.metrics import ServeMetrics
from edgekit.runtime.serve.prefill_budget import PrefillBudget
from edgekit.runtime.text.stream import TextStream

log = logging.getLogger("edgekit.serve")
_ids = itertools.count(1)
UNLIMITED = 1 << 30
GATHER_S = 0.005  # how long an idle loop waits for requests still being read: a fraction of a decode step
BURST_MEMORY_S = 1.0  # streams that ended together this long ago: their clients are not coming back together


class EventKind(StrEnum):
    TEXT = "text"  # value: the next piece of text
    TOKEN = "token"  # a generated token's log-probabilities (`Event.token`), before the text it adds
    DONE = "done"  # value: the finish reason ("stop", "length"); the last event
    ERROR = "error"  # value: what went wrong; the last event


class Event(NamedTuple):
    """What the scheduler hands a request's handler: text as it is decoded, then how it ended."""

    kind: EventKind
    value: str
    token: TokenLogprobs | None = None


class QueueFull(Exception):
    pass


class ShuttingDown(Exception):
    pass


@dataclass
class Request:
    prompt_ids: list[int]
    max_tokens: int
    sampling: Sampling
    stop: list[str]
    loop: asyncio.AbstractEventLoop
    ignore_eos: bool = False  # generate max_tokens whatever the model says (fixed-length loads, as llama-server)
    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    id: int = field(default_factory=lambda: next(_ids))
    arrived: float = field(default_factory=time.perf_counter)
    cancelled: threading.Event = field(default_factory=threading.Event)
    completion_tokens: int = 0
    generating: bool = False  # its first token is out: the prompt is in the KV cache
    outbox: list[Event] = field(default_factory=list)  # emitted, not yet handed to the loop
    text: TextStream = field(init=False)
    offsets: OffsetCounter = field(default_factory=OffsetCounter)  # where each token's text starts

    def __post_init__(self) -> None:
        self.text = TextStream(self.stop)

    def emit(self, kind: EventKind, value: str, token: TokenLogprobs | None = None) -> None:
        """Queue an event for the request's handler; `deliver` hands it over."""
        self.outbox.append(Event(kind, value, token))


def deliver(requests: Iterable[Request]) -> None:
    """Hand the requests' queued events to their handlers (thread-safe), waking each event loop once.

    One wake-up per decode step instead of one per token and stream: each wake-up is a write to the loop's
    self-pipe that preempts the scheduler thread on a busy box."""
    batches: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue[Event], list[Event]]]] = {}
    for request in requests:
        if request.outbox:
            batches.setdefault(request.loop, []).append((request.events, request.outbox))
            request.outbox = []
    for loop, batch in batches.items():
        with contextlib.suppress(RuntimeError):  # the loop is closed: the server is shutting down
            loop.call_soon_threadsafe(_put_all, batch)


def _put_all(batch: list[tuple[asyncio.Queue[Event], list[Event]]]) -> None:
    for queue, events in batch:
        for event in events:
            queue.put_nowait(event)


class _WholePrompts:
    """The ServingEngine calls over an engine that has only `start` and `step`: a prompt prefilled at once."""

    last_prompt_tokens = 0  # `admit` prefills, outside the steps the prefill budget times

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._first: dict[int, int] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def pick_slot(self, free: Sequence[int], prompt_ids: Sequence[int]) -> int:
        return free[0]

    def admit(self, seq: int, prompt_ids: Sequence[int], sampling: Sampling) -> Reuse:
        self._first[seq] = self._engine.start(seq, prompt_ids, sampling)
        return Reuse(0, "")

    def advance(self, prompt_budget: int) -> dict[int, int]:
        if self._first:
            first, self._first = self._first, {}
            return first
        return self._engine.step()

    def finish(self, seq: int) -> None:
        self._first.pop(seq, None)
        self._engine.finish(seq)


class Scheduler:
    def __init__(
        self,
        engine: Engine,
        *,
        max_queue: int,
        metrics: ServeMetrics,
        prefill_chunk: int | Literal["auto"] = "auto",
        max_stall: float = MAX_STALL,
    ) -> None:
        self.engine: ServingEngine = engine if isinstance(engine, ServingEngine) else _WholePrompts(engine)
        self.max_queue = max_queue
        self.prefill = PrefillBudget(None if prefill_chunk == "auto" else prefill_chunk, max_stall)
        self.metrics = metrics
        self._waiting: collections.deque[Request] = collections.deque()
        self._slots: dict[int, Request] = {}
        self._emitted: dict[int, Request] = {}  # requests with events to deliver after this loop
        self._arriving = 0  # requests being read and parsed (`arriving`)
        self._burst: tuple[int, float] = (0, 0.0)  # (streams, when): the last step ended them all together
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="edgekit-scheduler", daemon=True)
        metrics.slots.set(engine.max_sequences)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout=30)

    @contextlib.contextmanager
    def arriving(self) -> Iterator[None]:
        """Around reading, parsing and submitting one request: an idle loop lets it join the next batch."""
        with self._cond:
            self._arriving += 1
        try:
            yield
        finally:
            with self._cond:
                self._arriving -= 1
                self._cond.notify_all()

    def submit(self, request: Request) -> None:
        with self._cond:
            if self._stopping:
                raise ShuttingDown()
            # Requests that a free slot will take at the next loop are not waiting for one.
            free_slots = max(0, self.engine.max_sequences - len(self._slots))
            if len(self._waiting) >= self.max_queue + free_slots:
                raise QueueFull()
            self._waiting.append(request)
            self.metrics.queue_depth.set(len(self._waiting))
            self._cond.notify_all()

    def cancel(self, request: Request) -> None:
        """The client went away: free its slot (or drop it from the queue) at the next loop."""
        request.cancelled.set()
        with self._cond:
            self._cond.notify_all()

    @property
    def active(self) -> int:
        return len(self._slots)

    # --- the scheduler thread --------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not self._waiting and not self._slots:
                    self._cond.wait()
                if not self._slots:
                    self._gather()
                if self._stopping:
                    break
                self._drop_cancelled()
                admitted = self._admit()
            for slot, request in admitted:
                self._admit_one(slot, request)
            if self._slots:
                self._advance()
            deliver(self._emitted.values())
            self._emitted.clear()
        for slot, request in list(self._slots.items()):
            self._finish(slot, request, EventKind.ERROR, "the server is shutting down")
        for request in self._waiting:
            request.emit(EventKind.ERROR, "the server is shutting down")
        deliver([*self._emitted.values(), *self._waiting])

    def _gather(self) -> None:
        """Idle with a request waiting (lock held): the requests the server is still reading, and the clients of
        streams that ended together, join the same first batch, for at most GATHER_S (see the module's docstring)."""
        (ended, when), self._burst = self._burst, (0, 0.0)
        expected = ended if ended > 1 and time.perf_counter() - when < BURST_MEMORY_S else 0
        deadline = time.perf_counter() + GATHER_S
        while (
            not self._stopping
            and len(self._waiting) < self.engine.max_sequences
            and (self._arriving or len(self._waiting) < expected)
        ):
            left = deadline - time.perf_counter()
            if left <= 0:
                break
            self._cond.wait(left)

    def _drop_cancelled(self) -> None:
        for slot, request in list(self._slots.items()):
            if request.cancelled.is_set():
                self._release(slot)
                self.metrics.cancelled.inc()
        kept = [r for r in self._waiting if not r.cancelled.is_set()]
        self.metrics.cancelled.inc(len(self._waiting) - len(kept))
        self._waiting = collections.deque(kept)
        self.metrics.queue_depth.set(len(self._waiting))

    def _admit(self) -> list[tuple[int, Request]]:
        free = [s for s in range(self.engine.max_sequences) if s not in self._slots]
        admitted = []
        while free and self._waiting:
            request = self._waiting.popleft()
            slot = self.engine.pick_slot(free, request.prompt_ids)
            free.remove(slot)
            self._slots[slot] = request
            admitted.append((slot, request))
        self.metrics.queue_depth.set(len(self._waiting))
        self.metrics.active.set(len(self._slots))
        return admitted

    def _admit_one(self, slot: int, request: Request) -> None:
        try:
            reuse = self.engine.admit(slot, request.prompt_ids, request.sampling)
        except Exception as exc:  # a failing prompt must not take the server down
            log.exception("admitting a prompt failed")
            self._finish(slot, request, EventKind.ERROR, f"generation failed: {exc}")
            return
        self.metrics.prompt_tokens.inc(len(request.prompt_ids))
        self.metrics.prefix_reused.inc(reuse.tokens)
        if reuse.tokens:
            self.metrics.prefix_hits.labels(source=reuse.source).inc()
        else:
            self.metrics.prefix_misses.inc()
        self.metrics.prefix_entries.set(getattr(self.engine, "prefix_entries", 0))

    def _advance(self) -> None:
        generating = sum(r.generating for r in self._slots.values())
        budget = self.prefill.tokens() if generating else UNLIMITED  # the engine caps a batch at its n_batch
        started = time.perf_counter()
        try:
            tokens = self.engine.advance(budget)
        except Exception as exc:
            log.exception("decode step failed")
            for slot, failed in list(self._slots.items()):
                self._finish(slot, failed, EventKind.ERROR, f"generation failed: {exc}")
            return
        seconds = time.perf_counter() - started
        self.prefill.observe(seconds, generating, self.engine.last_prompt_tokens)
        self.metrics.prefill_budget.set(self.prefill.tokens())
        self.metrics.step.observe(seconds)
        self.metrics.decode_steps.inc()
        for slot, token in tokens.items():
            request = self._slots.get(slot)
            if request is None:
                continue
            if not request.generating:
                request.generating = True
                self.metrics.ttft.observe(time.perf_counter() - request.arrived)
            self._accept(slot, request, token)
        if len(tokens) > 1 and not self._slots:
            self._burst = (len(tokens), time.perf_counter())

    def _accept(self, slot: int, request: Request, token: int) -> None:
        if request.cancelled.is_set():
            self._release(slot)
            self.metrics.cancelled.inc()
            return
        if token in self.engine.eos_ids and not request.ignore_eos:
            self._finish(slot, request, EventKind.DONE, "stop")
            return
        request.completion_tokens += 1
        self.metrics.completion_tokens.inc()
        if request.sampling.logprobs is not None and not self._emit_logprobs(slot, request):
            self._finish(slot, request, EventKind.ERROR, f"the {self.engine.backend} engine reported no logprobs")
            return
        piece = request.text.feed(self.engine.detokenize([token]))
        if piece:
            self._emit(request, EventKind.TEXT, piece)
        if request.text.stopped:
            self._finish(slot, request, EventKind.DONE, "stop")
        elif request.completion_tokens >= request.max_tokens:
            self._finish(slot, request, EventKind.DONE, "length")

    def _emit_logprobs(self, slot: int, request: Request) -> bool:
        """The TOKEN event of the token `slot` sampled last; False if the engine has none (parse() refuses
        logprobs for an engine without them, so this is a bug)."""
        engine = self.engine
        sampled = engine.take_logprobs(slot) if isinstance(engine, LogprobsEngine) else None
        if sampled is None:
            return False
        request.emit(EventKind.TOKEN, "", describe(sampled, engine.detokenize, request.offsets))
        self._emitted[request.id] = request
        return True

    def _finish(self, slot: int, request: Request, kind: EventKind, value: str) -> None:
        if kind == EventKind.DONE:
            tail = request.text.flush()
            if tail:
                self._emit(request, EventKind.TEXT, tail)
            self.metrics.duration.observe(time.perf_counter() - request.arrived)
        self._emit(request, kind, value)
        self._release(slot)

    def _emit(self, request: Request, kind: EventKind, value: str) -> None:
        request.emit(kind, value)
        self._emitted[request.id] = request

    def _release(self, slot: int) -> None:
        if self._slots.pop(slot, None) is not None:
            self.engine.finish(slot)
        self.metrics.active.set(len(self._slots))
