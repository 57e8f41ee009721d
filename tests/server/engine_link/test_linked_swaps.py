"""--max-loaded-models with API workers (``wde serve --api-workers N``): the workers send every call to the
engine process, which queues each for its model's turn in the same registry queue a single-process server
uses (``server/engine_link/model_turns.py``). Mixed traffic of two models through one slot loads about once
per queue drain, every call is answered as the model's own in-process engine answers it, and the workers
hear which model is loaded (TEI's /info ``loaded``, ``num_loads``)."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from pathlib import Path

import numpy as np
import pytest

from server.settings import ServerSettings
from tests.server.linked_engine import engine_process_over
from tests.tiny_models import SEED, save_tiny_bert
from wde import LLM, EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.entrypoints.engine_thread import Residency

pytestmark = pytest.mark.slow  # an engine process, ~20 s

TIMEOUT = 120.0
NUM_REQUESTS, CONCURRENCY = 200, 16
QUERY = "which package reads mail"
TEXTS = [f"text {i}: a tool for the command line that reads mail number {i}" for i in range(NUM_REQUESTS)]
ATOL = 1e-5  # the engine process and this one may time different float32 GEMMs at load
STATE_SETTLE = 0.3  # seconds: a few state messages (every 0.1 s), after which a worker's view is current


@pytest.fixture(scope="module")
def embedder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("swap-embedder"), seed=SEED + 21)


def residency(engine: AsyncLLMEngine) -> Residency:
    assert engine.residency is not None  # a remote engine's, heard from the engine process
    return engine.residency


@pytest.mark.anyio
async def test_two_models_through_one_slot_swap_by_queue_behind_api_workers(
    embedder_dir: Path, cross_encoder_dir: Path
) -> None:
    """The issue's check with --api-workers: 200 requests alternating between an embedder and a
    cross-encoder at concurrency 16, one loaded at a time: at most 11 loads, every one answered."""
    settings = ServerSettings(max_loaded_models=1, max_swap_wait=0.5, min_model_residency=0.1)
    args = [EngineArgs(model=str(embedder_dir)), EngineArgs(model=str(cross_encoder_dir))]
    pending = deque(range(NUM_REQUESTS))
    embeddings: dict[int, np.ndarray] = {}
    scores: dict[int, float] = {}
    with engine_process_over(args, settings) as (_, (embedder, reranker)):
        # before any request: the cross-encoder waits unloaded, and says so
        await asyncio.sleep(STATE_SETTLE)
        assert residency(embedder).loaded and not residency(reranker).loaded

        async def client() -> None:
            while pending:
                index = pending.popleft()
                if index % 2 == 0:
                    (output,) = await embedder.encode([TEXTS[index]])
                    embeddings[index] = np.asarray(output.embedding)
                else:
                    (score,) = await reranker.score(QUERY, [TEXTS[index]])
                    scores[index] = score.score

        start = time.monotonic()
        await asyncio.wait_for(asyncio.gather(*(client() for _ in range(CONCURRENCY))), TIMEOUT)
        seconds = time.monotonic() - start
        await asyncio.sleep(STATE_SETTLE)
        num_loads = residency(embedder).num_loads + residency(reranker).num_loads
        assert residency(embedder).loaded != residency(reranker).loaded  # one slot
    assert len(embeddings) + len(scores) == NUM_REQUESTS
    assert num_loads <= 11, (num_loads, seconds)  # one start-up load, then at most 10 swaps
    # every answer is the model's own
    llm = LLM(model=str(embedder_dir))
    order = sorted(embeddings)
    expected = np.array([o.embedding for o in llm.encode([TEXTS[i] for i in order])])
    assert float(np.abs(np.array([embeddings[i] for i in order]) - expected).max()) <= ATOL
    cross = LLM(model=str(cross_encoder_dir))
    order = sorted(scores)
    expected_scores = np.array([o.score for o in cross.score(QUERY, [TEXTS[i] for i in order])])
    assert float(np.abs(np.array([scores[i] for i in order]) - expected_scores).max()) <= ATOL
