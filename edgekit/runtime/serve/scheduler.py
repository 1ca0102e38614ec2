"""Continuous batching for `serve`: one thread owns the engine and keeps up to max_sequences running.

Each loop: drop sequences whose client went away, start waiting requests in free slots (prefill),
then advance every active sequence by one token in one batched `engine.step()`. A request that
finishes frees its slot at once, and the next waiting request starts at the next loop — requests
never wait for a whole batch to finish. The waiting queue is bounded: `submit` refuses when it is
full, and the server answers 429.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from edgekit.runtime.engines import Engine, Sampling
from edgekit.runtime.serve.metrics import ServeMetrics
from edgekit.runtime.text.stream import TextStream

log = logging.getLogger("edgekit.serve")
_ids = itertools.count(1)


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
    events: asyncio.Queue[tuple[str, Any]] = field(default_factory=asyncio.Queue)
    id: int = field(default_factory=lambda: next(_ids))
    arrived: float = field(default_factory=time.perf_counter)
    cancelled: threading.Event = field(default_factory=threading.Event)
    completion_tokens: int = 0
    text: TextStream = field(init=False)

    def __post_init__(self) -> None:
        self.text = TextStream(self.stop)

    def emit(self, kind: str, value: Any) -> None:
        """Hand an event to the request's handler on the event loop (thread-safe)."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: the server is shutting down
            self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))


class Scheduler:
    def __init__(self, engine: Engine, *, max_queue: int, metrics: ServeMetrics) -> None:
        self.engine = engine
        self.max_queue = max_queue
        self.metrics = metrics
        self._waiting: collections.deque[Request] = collections.deque()
        self._slots: dict[int, Request] = {}
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
                if self._stopping:
                    break
                self._drop_cancelled()
                admitted = self._admit()
            for slot, request in admitted:
                self._start(slot, request)
            if self._slots:
                self._step()
        for slot, request in list(self._slots.items()):
            self._finish(slot, request, "error", "the server is shutting down")
        for request in self._waiting:
            request.emit("error", "the server is shutting down")

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
            slot = free.pop(0)
            self._slots[slot] = request
            admitted.append((slot, request))
        self.metrics.queue_depth.set(len(self._waiting))
        self.metrics.active.set(len(self._slots))
        return admitted

    def _start(self, slot: int, request: Request) -> None:
        try:
            token = self.engine.start(slot, request.prompt_ids, request.sampling)
        except Exception as exc:  # a failing prompt must not take the server down
            log.exception("prefill failed")
            self._finish(slot, request, "error", f"generation failed: {exc}")
            return
        self.metrics.prompt_tokens.inc(len(request.prompt_ids))
        self.metrics.ttft.observe(time.perf_counter() - request.arrived)
        self._accept(slot, request, token)

    def _step(self) -> None:
        started = time.perf_counter()
        try:
            tokens = self.engine.step()
        except Exception as exc:
            log.exception("decode step failed")
            for slot, request in list(self._slots.items()):
                self._finish(slot, request, "error", f"generation failed: {exc}")
            return
        self.metrics.step.observe(time.perf_counter() - started)
        self.metrics.decode_steps.inc()
        for slot, token in tokens.items():
            request = self._slots.get(slot)
            if request is not None:
                self._accept(slot, request, token)

    def _accept(self, slot: int, request: Request, token: int) -> None:
        if request.cancelled.is_set():
            self._release(slot)
            self.metrics.cancelled.inc()
            return
        if token in self.engine.eos_ids:
            self._finish(slot, request, "done", "stop")
            return
        request.completion_tokens += 1
        self.metrics.completion_tokens.inc()
        piece = request.text.feed(self.engine.detokenize([token]))
        if piece:
            request.emit("text", piece)
        if request.text.stopped:
            self._finish(slot, request, "done", "stop")
        elif request.completion_tokens >= request.max_tokens:
            self._finish(slot, request, "done", "length")

    def _finish(self, slot: int, request: Request, kind: str, value: str) -> None:
        if kind == "done":
            tail = request.text.flush()
            if tail:
                request.emit("text", tail)
            self.metrics.duration.observe(time.perf_counter() - request.arrived)
        request.emit(kind, value)
        self._release(slot)

    def _release(self, slot: int) -> None:
        if self._slots.pop(slot, None) is not None:
            self.engine.finish(slot)
        self.metrics.active.set(len(self._slots))
