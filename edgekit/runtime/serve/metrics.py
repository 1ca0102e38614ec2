"""Prometheus text exposition for `serve`'s /metrics: counters, gauges, histograms. Thread-safe."""

from __future__ import annotations

import threading
from collections.abc import Iterable

LabelKey = tuple[tuple[str, str], ...]


def _labels(labels: LabelKey, extra: Iterable[tuple[str, str]] = ()) -> str:
    items = [*labels, *extra]
    if not items:
        return ""
    escaped = (v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for _, v in items)
    return "{" + ",".join(f'{k}="{v}"' for (k, _), v in zip(items, escaped, strict=True)) + "}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class _Metric:
    kind = ""

    def __init__(self, name: str, help_text: str) -> None:
        self.name, self.help = name, help_text
        self._lock = threading.Lock()

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]


class Counter(_Metric):
    kind = "counter"

    def __init__(self, name: str, help_text: str) -> None:
        super().__init__(name, help_text)
        self._values: dict[LabelKey, float] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, **labels: str) -> float:
        return self._values.get(tuple(sorted(labels.items())), 0.0)

    def render(self) -> list[str]:
        with self._lock:
            items = sorted(self._values.items()) or [((), 0.0)]
        return self.header() + [f"{self.name}{_labels(k)} {_number(v)}" for k, v in items]


class Gauge(_Metric):
    kind = "gauge"

    def __init__(self, name: str, help_text: str) -> None:
        super().__init__(name, help_text)
        self.current = 0.0

    def set(self, value: float) -> None:
        self.current = float(value)

    def render(self) -> list[str]:
        return [*self.header(), f"{self.name} {_number(self.current)}"]


class Histogram(_Metric):
    kind = "histogram"

    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...]) -> None:
        super().__init__(name, help_text)
        self.buckets = tuple(sorted(buckets))
        self._counts = [0] * len(self.buckets)
        self._sum = 0.0
        self._count = 0

    def observe(self, value: float) -> None:
        with self._lock:
            self._sum += value
            self._count += 1
            for i, edge in enumerate(self.buckets):
                if value <= edge:
                    self._counts[i] += 1

    def render(self) -> list[str]:
        with self._lock:
            counts, total, count = list(self._counts), self._sum, self._count
        lines = self.header()
        lines += [f'{self.name}_bucket{{le="{_number(e)}"}} {c}' for e, c in zip(self.buckets, counts, strict=True)]
        lines.append(f'{self.name}_bucket{{le="+Inf"}} {count}')
        lines += [f"{self.name}_sum {total!r}", f"{self.name}_count {count}"]
        return lines


LATENCY_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class ServeMetrics:
    """Everything /metrics shows, named edgekit_*."""

    def __init__(self) -> None:
        self.requests = Counter("edgekit_requests_total", "HTTP requests by endpoint and status code.")
        self.rejected = Counter("edgekit_rejected_total", "Requests refused before generation, by reason.")
        self.cancelled = Counter("edgekit_cancelled_total", "Generations stopped because the client went away.")
        self.prompt_tokens = Counter("edgekit_prompt_tokens_total", "Prompt tokens processed.")
        self.completion_tokens = Counter("edgekit_completion_tokens_total", "Tokens generated.")
        self.decode_steps = Counter("edgekit_decode_steps_total", "Batched decode steps (one per token per step).")
        self.prefix_hits = Counter(
            "edgekit_prefix_cache_hits_total",
            "Prompts that reused the KV state of a cached prefix, by source (slot: what the slot held; store: "
            "copied from the prefixes kept in host memory).",
        )
        self.prefix_misses = Counter("edgekit_prefix_cache_misses_total", "Prompts prefilled from the start.")
        self.prefix_reused = Counter(
            "edgekit_prefix_cache_reused_tokens_total", "Prompt tokens not prefilled again (their KV state was cached)."
        )
        self.prefix_entries = Gauge("edgekit_prefix_cache_entries", "Prefixes kept in host memory beyond the slots.")
        self.queue_depth = Gauge("edgekit_queue_depth", "Requests waiting for a sequence slot.")
        self.active = Gauge("edgekit_active_sequences", "Sequences being generated now.")
        self.slots = Gauge("edgekit_max_sequences", "Sequence slots (runtime max_concurrent).")
        self.ready = Gauge("edgekit_ready", "1 once the model is loaded and warmed up.")
        self.ttft = Histogram(
            "edgekit_time_to_first_token_seconds", "From arrival to the first token.", LATENCY_BUCKETS
        )
        self.duration = Histogram("edgekit_request_seconds", "From arrival to the last token.", LATENCY_BUCKETS)
        self.step = Histogram(
            "edgekit_decode_step_seconds", "One batched decode step.", (0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0)
        )

    def render(self) -> str:
        lines: list[str] = []
        for metric in vars(self).values():
            if isinstance(metric, _Metric):
                lines += metric.render()
        return "\n".join(lines) + "\n"
