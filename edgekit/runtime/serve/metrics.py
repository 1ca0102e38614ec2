"""`serve`'s /metrics: Prometheus counters, gauges and histograms (prometheus_client), one registry per server."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import disable_created_metrics as _no_created_series

# Counters and histograms would each carry a `*_created` timestamp series too: noise for a single server.
_no_created_series()

LATENCY_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
STEP_BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class ServeMetrics:
    """Everything /metrics shows, named edgekit_*."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "edgekit_requests", "HTTP requests by endpoint and status code.", ["endpoint", "status"], registry=registry
        )
        self.rejected = Counter(
            "edgekit_rejected", "Requests refused before generation, by reason.", ["reason"], registry=registry
        )
        for reason in ("queue_full", "too_many_tokens"):
            self.rejected.labels(reason=reason)
        self.cancelled = Counter(
            "edgekit_cancelled", "Generations stopped because the client went away.", registry=registry
        )
        self.prompt_tokens = Counter("edgekit_prompt_tokens", "Prompt tokens received.", registry=registry)
        self.completion_tokens = Counter("edgekit_completion_tokens", "Tokens generated.", registry=registry)
        self.decode_steps = Counter(
            "edgekit_decode_steps",
            "Engine steps (each a decode token of every generating sequence).",
            registry=registry,
        )
        self._prefix_cache(registry)
        self._state(registry)
        self._timings(registry)

    def _prefix_cache(self, registry: CollectorRegistry) -> None:
        self.prefix_hits = Counter(
            "edgekit_prefix_cache_hits",
            "Prompts that reused the KV state of a cached prefix, by source (slot: what the sequence slot held; "
            "store: copied from the prefixes kept in host memory).",
            ["source"],
            registry=registry,
        )
        for source in ("slot", "store"):
            self.prefix_hits.labels(source=source)
        self.prefix_misses = Counter(
            "edgekit_prefix_cache_misses", "Prompts prefilled from their first token.", registry=registry
        )
        self.prefix_reused = Counter(
            "edgekit_prefix_cache_reused_tokens",
            "Prompt tokens not prefilled again (their KV state was cached).",
            registry=registry,
        )
        self.prefix_entries = Gauge(
            "edgekit_prefix_cache_entries", "Prefixes kept in host memory beyond the slots.", registry=registry
        )

    def _state(self, registry: CollectorRegistry) -> None:
        self.queue_depth = Gauge("edgekit_queue_depth", "Requests waiting for a sequence slot.", registry=registry)
        self.active = Gauge(
            "edgekit_active_sequences", "Sequences being prefilled or generated now.", registry=registry
        )
        self.slots = Gauge("edgekit_max_sequences", "Sequence slots (runtime max_concurrent).", registry=registry)
        self.ready = Gauge("edgekit_ready", "1 once the model is loaded and warmed up.", registry=registry)
        self.prefill_budget = Gauge(
            "edgekit_prefill_budget_tokens",
            "Prompt tokens a step may prefill beside running sequences (prefill_chunk, or set from max_stall).",
            registry=registry,
        )

    def _timings(self, registry: CollectorRegistry) -> None:
        self.ttft = Histogram(
            "edgekit_time_to_first_token_seconds",
            "From arrival to the first token.",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.duration = Histogram(
            "edgekit_request_seconds", "From arrival to the last token.", buckets=LATENCY_BUCKETS, registry=registry
        )
        self.step = Histogram(
            "edgekit_decode_step_seconds", "One engine step.", buckets=STEP_BUCKETS, registry=registry
        )

    def value(self, name: str, **labels: str) -> float:
        """The current value of one sample, e.g. value("edgekit_prefix_cache_hits_total", source="slot")."""
        return self.registry.get_sample_value(name, labels) or 0.0

    def render(self) -> bytes:
        return generate_latest(self.registry)
