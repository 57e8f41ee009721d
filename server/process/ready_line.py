"""``log_ready``: the one "ready" line a served model logs once it is loaded (a single-process server's, or
the engine process's for every worker): what it serves, where, and the limits it serves with. A module of
its own so that the engine process logs it without importing the app (FastAPI, every route)."""

from __future__ import annotations

import logging

from server.settings import ServerSettings
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

logger = logging.getLogger("wde.server")


def log_ready(engine: AsyncLLMEngine, settings: ServerSettings, url: str) -> None:
    """The one "ready" line of a loaded model (a single-process server's, or the engine process's)."""
    engine_config = engine.info.engine_config
    model_config = engine_config.model_config
    scheduler_config = engine_config.scheduler_config
    logger.info(
        "ready: serving %s at %s | task=%s attention_backend=%s dtype=%s quantization=%s device=%s "
        "executor=%s max_model_len=%d max_num_batched_tokens=%d max_num_seqs=%d | payload_limit=%d "
        "max_client_batch_size=%d max_concurrent_requests=%d api_key=%s",
        model_config.served_model_name or model_config.model,
        url,
        model_config.task,
        engine.info.attention_backend,
        model_config.dtype,
        model_config.quantization or "none",
        engine_config.device_config.device,
        engine_config.device_config.executor,
        model_config.max_model_len,
        scheduler_config.max_num_batched_tokens,
        scheduler_config.max_num_seqs,
        settings.payload_limit,
        settings.max_client_batch_size,
        settings.max_concurrent_requests,
        "on" if settings.api_key else "off",
    )
