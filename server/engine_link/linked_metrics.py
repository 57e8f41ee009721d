"""``LinkedMetrics``: an API worker's metrics. The one registry is the engine process's: a worker batches
its HTTP observations (one message per 50 ms at most, with its result caches' counts) and asks the engine
process for the text of ``/metrics``, so every worker answers a scrape with the whole server's counters."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from server.engine_link.client import EngineLink
from server.observability.metrics import ServerMetrics
from server.served_models.model_registry import ModelRegistry
from wde.engine.stats import StepStats
from wde.outputs import RequestOutput

FLUSH_SECONDS = 0.05


class _Unobserved:
    """The worker's engines run elsewhere: the engine process's metrics observe them."""

    def on_step(self, stats: StepStats) -> None:
        pass

    def on_outputs(self, outputs: Sequence[RequestOutput]) -> None:
        pass

    def on_aborted(self, num_requests: int) -> None:
        pass


class LinkedMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, link: EngineLink) -> None:
        self._link = link
        self._observations: list[tuple[str, str, str, str, float]] = []
        self._flush_handle: asyncio.TimerHandle | None = None
        self._unobserved = _Unobserved()
        self._models: ModelRegistry | None = None  # set by the app (``watch``): its result caches

    def watch(self, models: ModelRegistry) -> None:
        self._models = models

    def _cache_stats(self) -> dict[str, dict[str, float]]:
        return {} if self._models is None else ServerMetrics.cache_stats(self._models)

    def observe_http(self, model: str, route: str, method: str, status: str, seconds: float) -> None:
        """On the event loop (RequestPipeline)."""
        self._observations.append((model, route, method, status, seconds))
        if self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_later(FLUSH_SECONDS, self._flush)

    def listener(self, model: str) -> _Unobserved:
        return self._unobserved

    def _take(self) -> list[tuple[str, str, str, str, float]]:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        observations, self._observations = self._observations, []
        return observations

    def _flush(self) -> None:
        self._flush_handle = None
        observations = self._take()
        if observations:
            self._link.send(self._link.stats(observations, self._cache_stats()))

    async def render_async(self) -> bytes:
        return await self._link.scrape(self._link.stats(self._take(), self._cache_stats()))
