"""``ServerMetrics``: Prometheus metrics in the app's own registry (two apps in one process never clash).

HTTP metrics are observed by ``RequestPipeline``; engine metrics carry a ``model`` label (the served
name) and arrive through each engine's stats listener (``ServerMetrics.listener(name)``, called on that
engine's thread; prometheus-client is thread-safe); queue depth, in-flight counts, the result cache and the
models' loads are read when scraped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from server.observability.process_cpu import ProcessCpuCollector
from wde.engine.stats import StepStats
from wde.outputs import ErrorOutput, RequestOutput

if TYPE_CHECKING:
    from server.served_models.model_registry import ModelRegistry

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
STEP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
TOKEN_BUCKETS = tuple(float(2**power) for power in range(4, 18))  # 16 .. 131072
SEQUENCE_BUCKETS = tuple(float(2**power) for power in range(0, 11))  # 1 .. 1024


class ServerMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(
        self,
        models: ModelRegistry,
        num_in_flight: Callable[[], int],
        role: str = "server",
        parent_pid: int | None = None,
    ) -> None:
        """``role``: this process's (server/observability/process_cpu.py); ``parent_pid``: the supervisor's
        (the engine process's metrics)."""
        self.registry = registry = CollectorRegistry()
        self._listeners: dict[str, ModelStatsListener] = {}
        # 1. HTTP
        self.http_requests = Counter(
            "wde_http_requests",
            "HTTP requests answered",
            ["model", "route", "method", "status"],
            registry=registry,
        )
        self.http_seconds = Histogram(
            "wde_http_request_duration_seconds",
            "HTTP request latency, first byte in to last byte out",
            ["model", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        # each label set's two children, looked up once (the label values are bounded: served names, route
        # templates, the methods the HTTP parser accepts, statuses); prometheus-client keeps them anyway
        self._http_children: dict[tuple[str, str, str, str], tuple[Counter, Histogram]] = {}
        in_flight = Gauge("wde_http_requests_in_flight", "HTTP requests admitted", registry=registry)
        in_flight.set_function(num_in_flight)
        # 2. engine queues and the models (read when scraped)
        registry.register(ModelsCollector(models))
        self.aborted = Counter(
            "wde_engine_aborted_requests",
            "Requests aborted because their client went away",
            ["model"],
            registry=registry,
        )
        self.failed = Counter(
            "wde_engine_failed_requests", "Requests answered with an error", ["model"], registry=registry
        )
        # 3. batches
        self.batch_tokens = Histogram(
            "wde_batch_size_tokens",
            "Tokens in one forward pass",
            ["model"],
            buckets=TOKEN_BUCKETS,
            registry=registry,
        )
        self.batch_sequences = Histogram(
            "wde_batch_size_sequences",
            "Sequences in one forward pass",
            ["model"],
            buckets=SEQUENCE_BUCKETS,
            registry=registry,
        )
        self.tokenization_seconds = Histogram(
            "wde_tokenization_duration_seconds",
            "One batched tokenizer call of the scheduler",
            ["model"],
            buckets=STEP_BUCKETS,
            registry=registry,
        )
        self.forward_seconds = Histogram(
            "wde_batch_inference_duration_seconds",
            "One forward pass",
            ["model"],
            buckets=STEP_BUCKETS,
            registry=registry,
        )
        self.forward_cpu_seconds = Counter(
            "wde_batch_inference_cpu_seconds",
            "CPU time of the thread that ran the forward passes (torch's intra-op workers not included)",
            ["model"],
            registry=registry,
        )
        self.device_seconds = Counter(
            "wde_device_busy_seconds",
            "GPU time of the forward passes, from CUDA events around each batch (0 on CPU); its rate is the "
            "GPU's busy share",
            ["model"],
            registry=registry,
        )
        # 4. requests inside the engine
        self.queue_seconds = Histogram(
            "wde_request_queue_duration_seconds",
            "Arrival in the engine to the start of the batch that ran it (tokenization included)",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.inference_seconds = Histogram(
            "wde_request_inference_duration_seconds",
            "Start of the batch that ran a request to its answer",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        # 5. the result cache (--cache-size): read from the engines when scraped, plus what the API workers
        #    of --api-workers report of theirs ({worker: {model: {ReuseStats field: value}}})
        self.worker_cache_stats: dict[str, dict[str, dict[str, float]]] = {}
        registry.register(ResultCacheCollector(models, self.worker_cache_stats))
        # 6. the CPU time of each process (the API workers report theirs: ``process_cpu.reported``)
        self.process_cpu = ProcessCpuCollector(role, parent_pid)
        registry.register(self.process_cpu)

    # ---- RequestPipeline ------------------------------------------------------------------------
    def observe_http(self, model: str, route: str, method: str, status: str, seconds: float) -> None:
        """``model``: the served name the request reached, "" when it reached none (probes, refusals)."""
        key = (model, route, method, status)
        children = self._http_children.get(key)
        if children is None:  # labels() validates and locks: ~6 us a request on the event loop, once here
            children = self._http_children[key] = (
                self.http_requests.labels(model, route, method, status),
                self.http_seconds.labels(model, route, status),
            )
        children[0].inc()
        children[1].observe(seconds)

    def listener(self, model: str) -> ModelStatsListener:
        """The stats listener of the engine serving ``model`` (one per name: add and remove it alike)."""
        if model not in self._listeners:
            self._listeners[model] = ModelStatsListener(self, model)
        return self._listeners[model]

    @staticmethod
    def cache_stats(models: ModelRegistry) -> dict[str, dict[str, float]]:
        """{model: {ReuseStats field: value}} of the loaded models' result caches (what a worker reports)."""
        stats: dict[str, dict[str, float]] = {}
        for model in models.loaded():
            reuse = model.loaded_engine.result_reuse
            if reuse is not None:
                values = reuse.stats()
                stats[model.name] = {
                    field: getattr(values, field) for *_, field in ResultCacheCollector.FAMILIES
                }
        return stats

    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def render_async(self) -> bytes:
        """What GET /metrics answers (an API worker's metrics ask the engine process instead)."""
        return self.render()


class ModelStatsListener:
    """One engine's ``StatsListener`` (engine thread): its steps and outputs, under its model's label."""

    def __init__(self, metrics: ServerMetrics, model: str) -> None:
        self.tokenization_seconds = metrics.tokenization_seconds.labels(model)
        self.batch_tokens = metrics.batch_tokens.labels(model)
        self.batch_sequences = metrics.batch_sequences.labels(model)
        self.forward_seconds = metrics.forward_seconds.labels(model)
        self.forward_cpu_seconds = metrics.forward_cpu_seconds.labels(model)
        self.device_seconds = metrics.device_seconds.labels(model)
        self.failed = metrics.failed.labels(model)
        self.queue_seconds = metrics.queue_seconds.labels(model)
        self.inference_seconds = metrics.inference_seconds.labels(model)
        self.aborted = metrics.aborted.labels(model)

    def on_step(self, stats: StepStats) -> None:
        if stats.num_tokenized:
            self.tokenization_seconds.observe(stats.tokenize_seconds)
        for batch in stats.finished_batches:
            self.batch_tokens.observe(batch.num_tokens)
            self.batch_sequences.observe(batch.num_seqs)
            self.forward_seconds.observe(batch.execute_seconds)
            self.forward_cpu_seconds.inc(batch.execute_cpu_seconds)
            self.device_seconds.inc(batch.device_seconds)

    def on_outputs(self, outputs: Sequence[RequestOutput]) -> None:
        for output in outputs:
            if isinstance(output, ErrorOutput):
                self.failed.inc()
            if output.metrics is not None:
                self.queue_seconds.observe(output.metrics.queue_seconds)
                self.inference_seconds.observe(output.metrics.inference_seconds)

    def on_aborted(self, num_requests: int) -> None:
        self.aborted.inc(num_requests)


class ModelsCollector:
    """``wde_queue_depth``, ``wde_engine_unfinished_requests`` (loaded models), ``wde_model_loaded`` and
    ``wde_model_loads`` (every model; a load more than the first comes from --max-loaded-models)."""

    def __init__(self, models: ModelRegistry) -> None:
        self.models = models

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        queue_depth = GaugeMetricFamily(
            "wde_queue_depth", "Requests queued in the engine scheduler", labels=["model"]
        )
        unfinished = GaugeMetricFamily(
            "wde_engine_unfinished_requests",
            "Requests accepted by the engine, not answered yet",
            labels=["model"],
        )
        loaded = GaugeMetricFamily(
            "wde_model_loaded", "1 while the model's engine is loaded", labels=["model"]
        )
        loads = CounterMetricFamily(
            "wde_model_loads",
            "Engines made for the model (start-up and --max-loaded-models reloads)",
            labels=["model"],
        )
        for model in self.models.models:
            engine = model.engine
            if engine is not None:
                queue_depth.add_metric([model.name], engine.num_waiting)
                unfinished.add_metric([model.name], engine.num_unfinished)
            loaded.add_metric([model.name], 1 if engine is not None else 0)
            loads.add_metric([model.name], model.num_loads)
        yield from (queue_depth, unfinished, loaded, loads)


class ResultCacheCollector:
    """``wde_cache_*`` per loaded model: its result cache and in-batch dedupe (all 0 with --cache-size 0)."""

    FAMILIES = (  # (metric, kind, help, ReuseStats field)
        (
            "wde_cache_hits",
            "counter",
            "Inputs answered from the result cache, without a forward pass",
            "num_hits",
        ),
        ("wde_cache_misses", "counter", "Inputs looked up in the result cache and not found", "num_misses"),
        (
            "wde_cache_deduplicated",
            "counter",
            "Inputs answered by an identical input of the same request (computed once)",
            "num_deduplicated",
        ),
        ("wde_cache_evictions", "counter", "Entries evicted to stay under --cache-size", "num_evictions"),
        ("wde_cache_bytes", "gauge", "Bytes the result cache holds", "num_bytes"),
        ("wde_cache_entries", "gauge", "Outputs the result cache holds", "num_entries"),
        ("wde_cache_max_bytes", "gauge", "The result cache's limit (--cache-size)", "max_bytes"),
    )

    def __init__(
        self, models: ModelRegistry, worker_stats: dict[str, dict[str, dict[str, float]]] | None = None
    ) -> None:
        self.models = models
        self.worker_stats = {} if worker_stats is None else worker_stats

    def describe(self) -> list[Metric]:
        return []  # collected only when scraped (a cache exists once its model is loaded)

    def collect(self) -> Iterator[Metric]:
        families = []
        for metric, kind, help_text, _ in self.FAMILIES:
            family_class = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            families.append(family_class(metric, help_text, labels=["model"]))
        local = ServerMetrics.cache_stats(self.models)
        for model in self.models.loaded():
            sources = [local, *self.worker_stats.values()]  # this process's caches, then each API worker's
            for family, (_, _, _, stat) in zip(families, self.FAMILIES, strict=True):
                family.add_metric(
                    [model.name], sum(source.get(model.name, {}).get(stat, 0) for source in sources)
                )
        yield from families
