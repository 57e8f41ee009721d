"""A call that finds the model loading waits for it, up to ``LOADING_GRACE_SECONDS``, instead of answering
503 at once: with API workers each hears the engine's "ready" on its own thread, some milliseconds apart
under load, and /health answered 200 by one worker was followed by a 503 "still loading" from the next
(``test_one_request_after_another_is_never_refused_at_a_bound_of_1`` failed so under CI load). Past the
grace, a loading engine still refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tiny_models import SEED, save_tiny_bert
from wde import EngineArgs
from wde.entrypoints import async_llm_engine
from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.entrypoints.engine_thread import EngineState, EngineUnavailableError

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def embedder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("loading_grace"), seed=SEED + 53)


async def test_a_call_made_while_loading_is_served_once_loaded(
    embedder_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(async_llm_engine, "LOADING_GRACE_SECONDS", 120.0)  # however slow this machine is
    engine = AsyncLLMEngine(EngineArgs(model=str(embedder_dir), device="cpu"))
    engine.start()
    try:
        assert engine.state == EngineState.LOADING
        (output,) = await engine.encode(["loaded in time"])
        assert engine.is_ready and output.embedding.shape == (32,)
    finally:
        engine.shutdown()


async def test_past_the_grace_a_loading_engine_refuses(
    embedder_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(async_llm_engine, "LOADING_GRACE_SECONDS", 0.0)
    engine = AsyncLLMEngine(EngineArgs(model=str(embedder_dir), device="cpu"))
    engine.start()
    try:
        assert engine.state == EngineState.LOADING
        with pytest.raises(EngineUnavailableError, match="loading"):
            await engine.encode(["too early"])
    finally:
        engine.shutdown()
