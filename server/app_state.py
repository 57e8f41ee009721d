"""``AppState``: what route handlers and middlewares share (``app.state.wde``): the settings, the metrics and
the served models (``ModelRegistry``; a route takes its model with ``async with state.models.use(...)``)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import HTTPConnection

from server.engine_link.in_flight import InFlightSlots
from server.errors import TooManyInputsError
from server.observability.metrics import ServerMetrics
from server.served_models.model_registry import ModelRegistry, ServedModel
from server.settings import ServerSettings
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

logger = logging.getLogger("wde.server")


@dataclass(eq=False)
class AppState:
    models: ModelRegistry
    settings: ServerSettings
    # the app's metrics (default: its own ServerMetrics; an API worker's forward to the engine process)
    metrics: Any = None
    # --api-workers N: every worker's admitted requests, so that admission bounds the server as a whole
    in_flight_slots: InFlightSlots | None = None
    created: int = field(default_factory=lambda: int(time.time()))
    draining: bool = False  # set on SIGTERM / SIGINT: new requests get 503, in-flight ones finish
    num_in_flight: int = 0  # admitted requests (only touched on the event loop)
    warned_token_ids: bool = False  # the token-ids warning of /v1/embeddings is logged once
    num_cut_off: int = 0  # requests cancelled by --graceful-timeout on shutdown (answered 503)
    # (engine, its stats listener) for every engine this app's metrics listen to (``detach``)
    listening: list[tuple[AsyncLLMEngine, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.metrics is None:
            self.metrics = ServerMetrics(self.models, lambda: self.num_in_flight)
        else:  # an API worker's: it reports this app's result caches
            self.metrics.watch(self.models)
        self.models.add_engine_hook(self._listen)

    # ---- admission (RequestPipeline) ------------------------------------------------------------------
    def try_admit(self) -> bool:
        """Count one more request in flight, unless --max-concurrent-requests are (False: answer 429)."""
        num_in_flight = self.num_in_flight
        if self.in_flight_slots is not None:
            num_in_flight += self.in_flight_slots.others()
        if num_in_flight >= self.settings.max_concurrent_requests:
            return False
        self.num_in_flight += 1
        if self.in_flight_slots is not None:
            self.in_flight_slots.set(self.num_in_flight)
        return True

    def release(self) -> None:
        self.num_in_flight -= 1
        if self.in_flight_slots is not None:
            self.in_flight_slots.set(self.num_in_flight)

    def begin_drain(self) -> None:
        self.draining = True

    @property
    def engine(self) -> AsyncLLMEngine:
        """The default (first) model's engine: the one engine of a single-model server."""
        engine = self.models.default.engine
        if engine is None:
            raise RuntimeError(f"model {self.models.default.name!r} is not loaded")
        return engine

    @property
    def served_model_name(self) -> str:
        """The default (first) model's name."""
        return self.models.default.name

    def _listen(self, model: ServedModel, engine: AsyncLLMEngine) -> None:
        listener = self.metrics.listener(model.name)
        engine.add_stats_listener(listener)
        self.listening.append((engine, listener))

    def detach(self) -> None:
        """Stop feeding this app's metrics from the engines (for apps over an engine that outlives them)."""
        for engine, listener in self.listening:
            engine.remove_stats_listener(listener)
        self.listening.clear()

    def check_num_inputs(self, num_inputs: int, field_name: str) -> None:
        limit = self.settings.max_client_batch_size
        if num_inputs > limit:
            raise TooManyInputsError(
                f"{field_name} has {num_inputs} items, more than --max-client-batch-size ({limit}); "
                "split the request"
            )

    def warn_token_ids_once(self) -> None:
        """/v1/embeddings got token ids: they are taken as this model's ids, and ids from another vocabulary
        (LangChain's OpenAIEmbeddings sends tiktoken ids by default) give meaningless vectors."""
        if self.warned_token_ids:
            return
        self.warned_token_ids = True
        logger.warning(
            "/v1/embeddings received token ids: they must come from this model's tokenizer (GET /tokenize "
            "gives them); LangChain's OpenAIEmbeddings sends tiktoken ids unless "
            "check_embedding_ctx_length=False. Logged once."
        )


def get_state(connection: HTTPConnection) -> AppState:
    return connection.app.state.wde
