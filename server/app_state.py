"""``AppState``: what route handlers and middlewares share (``app.state.wde``)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from starlette.requests import HTTPConnection

from server.errors import ModelNotFoundError, TooManyInputsError
from server.metrics import ServerMetrics
from server.settings import ServerSettings
from wde.engine.async_llm_engine import AsyncLLMEngine

logger = logging.getLogger("wde.server")


@dataclass(eq=False)
class AppState:
    engine: AsyncLLMEngine
    settings: ServerSettings
    metrics: ServerMetrics = field(init=False)
    created: int = field(default_factory=lambda: int(time.time()))
    draining: bool = False  # set on SIGTERM / SIGINT: new requests get 503, in-flight ones finish
    num_in_flight: int = 0  # admitted requests (only touched on the event loop)
    warned_token_ids: bool = False  # the token-ids warning of /v1/embeddings is logged once
    num_cut_off: int = 0  # requests cancelled by --graceful-timeout on shutdown (answered 503)

    def __post_init__(self) -> None:
        self.metrics = ServerMetrics(self.engine, lambda: self.num_in_flight)

    def begin_drain(self) -> None:
        self.draining = True

    @property
    def served_model_name(self) -> str:
        model_config = self.engine.info.model_config
        return model_config.served_model_name or model_config.model

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

    def check_model(self, model: str | None) -> None:
        """Any name is accepted (one model is served: a client's default name, such as Cohere's
        "rerank-v3.5", reaches it, as TEI does) unless --strict-model-name, which answers 404 as vLLM does."""
        if self.settings.strict_model_name and model is not None and model != self.served_model_name:
            raise ModelNotFoundError(
                f"model {model!r} is not served here; this server serves {self.served_model_name!r} "
                "(GET /v1/models; --strict-model-name is on)"
            )


def get_state(connection: HTTPConnection) -> AppState:
    return connection.app.state.wde
