"""``ServerMetrics``: Prometheus metrics in the app's own registry (two apps in one process never clash).

HTTP metrics are observed by ``HttpMetricsMiddleware``; engine metrics arrive through the engine's
stats-listener hooks (called on the engine thread; prometheus-client is thread-safe); queue depth and
in-flight counts are read when scraped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from wde.engine.async_llm_engine import AsyncLLMEngine
from wde.engine.stats import StepStats
from wde.outputs import ErrorOutput, RequestOutput

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
STEP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
TOKEN_BUCKETS = tuple(float(2**power) for power in range(4, 18))  # 16 .. 131072
SEQUENCE_BUCKETS = tuple(float(2**power) for power in range(0, 11))  # 1 .. 1024


class ServerMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, engine: AsyncLLMEngine, num_in_flight: Callable[[], int]) -> None:
        self.registry = registry = CollectorRegistry()
        # 1. HTTP
        self.http_requests = Counter(
            "wde_http_requests", "HTTP requests answered", ["route", "method", "status"], registry=registry
        )
        self.http_seconds = Histogram(
            "wde_http_request_duration_seconds",
            "HTTP request latency, first byte in to last byte out",
            ["route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        in_flight = Gauge("wde_http_requests_in_flight", "HTTP requests admitted", registry=registry)
        in_flight.set_function(num_in_flight)
        # 2. engine queue
        queue_depth = Gauge("wde_queue_depth", "Requests queued in the engine scheduler", registry=registry)
        queue_depth.set_function(lambda: engine.num_waiting)
        unfinished = Gauge(
            "wde_engine_unfinished_requests",
            "Requests accepted by the engine, not answered yet",
            registry=registry,
        )
        unfinished.set_function(lambda: engine.num_unfinished)
        self.aborted = Counter(
            "wde_engine_aborted_requests",
            "Requests aborted because their client went away",
            registry=registry,
        )
        self.failed = Counter(
            "wde_engine_failed_requests", "Requests answered with an error", registry=registry
        )
        # 3. batches
        self.batch_tokens = Histogram(
            "wde_batch_size_tokens", "Tokens in one forward pass", buckets=TOKEN_BUCKETS, registry=registry
        )
        self.batch_sequences = Histogram(
            "wde_batch_size_sequences",
            "Sequences in one forward pass",
            buckets=SEQUENCE_BUCKETS,
            registry=registry,
        )
        self.tokenization_seconds = Histogram(
            "wde_tokenization_duration_seconds",
            "One batched tokenizer call of the scheduler",
            buckets=STEP_BUCKETS,
            registry=registry,
        )
        self.forward_seconds = Histogram(
            "wde_batch_inference_duration_seconds",
            "One forward pass",
            buckets=STEP_BUCKETS,
            registry=registry,
        )
        # 4. requests inside the engine
        self.queue_seconds = Histogram(
            "wde_request_queue_duration_seconds",
            "Arrival in the engine to the start of the batch that ran it (tokenization included)",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.inference_seconds = Histogram(
            "wde_request_inference_duration_seconds",
            "Start of the batch that ran a request to its answer",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        # 5. the result cache (--cache-size): read from the engine when scraped
        registry.register(ResultCacheCollector(engine))

    # ---- HttpMetricsMiddleware --------------------------------------------------------------------
    def observe_http(self, route: str, method: str, status: str, seconds: float) -> None:
        self.http_requests.labels(route, method, status).inc()
        self.http_seconds.labels(route, status).observe(seconds)

    # ---- the engine's StatsListener (engine thread) -------------------------------------------------
    def on_step(self, stats: StepStats) -> None:
        if stats.num_tokenized:
            self.tokenization_seconds.observe(stats.tokenize_seconds)
        for batch in stats.finished_batches:
            self.batch_tokens.observe(batch.num_tokens)
            self.batch_sequences.observe(batch.num_seqs)
            self.forward_seconds.observe(batch.execute_seconds)

    def on_outputs(self, outputs: Sequence[RequestOutput]) -> None:
        for output in outputs:
            if isinstance(output, ErrorOutput):
                self.failed.inc()
            if output.metrics is not None:
                self.queue_seconds.observe(output.metrics.queue_seconds)
                self.inference_seconds.observe(output.metrics.inference_seconds)

    def on_aborted(self, num_requests: int) -> None:
        self.aborted.inc(num_requests)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class ResultCacheCollector:
    """``wde_cache_*``: the engine's result cache and in-batch dedupe (all 0 with --cache-size 0)."""

    def __init__(self, engine: AsyncLLMEngine) -> None:
        self.engine = engine

    def describe(self) -> list[Metric]:
        return []  # collected only when scraped (the cache exists once the model is loaded)

    def collect(self) -> Iterator[Metric]:
        reuse = self.engine.result_reuse
        stats = None if reuse is None else reuse.stats()

        def value(name: str) -> float:
            return 0 if stats is None else getattr(stats, name)

        yield CounterMetricFamily(
            "wde_cache_hits",
            "Inputs answered from the result cache, without a forward pass",
            value("num_hits"),
        )
        yield CounterMetricFamily(
            "wde_cache_misses", "Inputs looked up in the result cache and not found", value("num_misses")
        )
        yield CounterMetricFamily(
            "wde_cache_deduplicated",
            "Inputs answered by an identical input of the same request (computed once)",
            value("num_deduplicated"),
        )
        yield CounterMetricFamily(
            "wde_cache_evictions", "Entries evicted to stay under --cache-size", value("num_evictions")
        )
        yield GaugeMetricFamily("wde_cache_bytes", "Bytes the result cache holds", value("num_bytes"))
        yield GaugeMetricFamily("wde_cache_entries", "Outputs the result cache holds", value("num_entries"))
        yield GaugeMetricFamily(
            "wde_cache_max_bytes", "The result cache's limit (--cache-size)", value("max_bytes")
        )
