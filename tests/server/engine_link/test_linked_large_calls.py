"""An API worker tokenizes a large call (more text than ``MAX_INLINE_CHARS``) on its preparing thread, not on
its event loop, so that other requests on that worker do not wait for the tokenizer: the answers are the
in-process engine's; a call aborted while it is being prepared is never sent; a drain waits for a call
being prepared and answers it."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from server.engine_link.client import MAX_INLINE_CHARS, RemoteEngineThread
from tests.server.linked_engine import engine_process_over, link_of
from tests.tiny_models import SEED, save_tiny_bert
from wde import LLM, EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

pytestmark = [pytest.mark.slow, pytest.mark.anyio]  # an engine process per test, ~8 s

ATOL = 1e-5  # the engine process and this one may time different float32 GEMMs at load
TIMEOUT = 60.0
# 200 texts of ~130 characters: more than MAX_INLINE_CHARS together
LARGE = [
    f"document {i}: a command-line tool that reads mail, filters spam and sorts it into folders" * 2
    for i in range(200)
]
SMALL = ["which package reads mail"]


@pytest.fixture(scope="module")
def embedder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("large-calls"), seed=SEED + 41)


def remote_thread(engine: AsyncLLMEngine) -> RemoteEngineThread:
    link = link_of(engine)
    assert link is not None
    return link.threads[0]


class GatedPreparer:
    """Wraps a remote thread's preparer: records the thread each call is prepared on; a large call waits
    for ``gate`` (set by the test) before it is tokenized."""

    def __init__(self, thread: RemoteEngineThread) -> None:
        self.inner = thread._preparer
        self.threads: list[str] = []
        self.gate = threading.Event()
        self.entered = threading.Event()
        thread._preparer = self  # type: ignore[assignment]

    def prepare(self, request_ids: Any, prompts: Any, params: Any) -> Any:
        self.threads.append(threading.current_thread().name)
        if len(prompts) == len(LARGE):
            self.entered.set()
            assert self.gate.wait(TIMEOUT)
        return self.inner.prepare(request_ids, prompts, params)


async def test_a_large_call_is_prepared_off_the_event_loop(embedder_dir: Path) -> None:
    assert sum(len(text) for text in LARGE) > MAX_INLINE_CHARS
    with engine_process_over([EngineArgs(model=str(embedder_dir))]) as (_, (engine,)):
        thread = remote_thread(engine)
        preparer = GatedPreparer(thread)
        # 1. while the large call waits to be tokenized, a small call on the same loop is answered
        large = asyncio.ensure_future(engine.encode(LARGE))
        await asyncio.to_thread(preparer.entered.wait, TIMEOUT)
        (small,) = await asyncio.wait_for(engine.encode(SMALL), TIMEOUT)
        assert not large.done()
        preparer.gate.set()
        outputs = await asyncio.wait_for(large, TIMEOUT)
        assert preparer.threads[0].startswith("wde-prepare") and preparer.threads[1] == "MainThread"
        llm = LLM(model=str(embedder_dir))
        expected = np.array([output.embedding for output in llm.encode(LARGE)])
        got = np.array([output.embedding for output in outputs])
        assert got.shape == expected.shape and float(np.abs(got - expected).max()) <= ATOL
        np.testing.assert_allclose(small.embedding, llm.encode(SMALL)[0].embedding, atol=ATOL)
        # 2. a large call cancelled while it waits to be tokenized is never sent to the engine process
        preparer.gate.clear()
        preparer.entered.clear()
        cancelled = asyncio.ensure_future(engine.encode(LARGE))
        await asyncio.to_thread(preparer.entered.wait, TIMEOUT)
        cancelled.cancel()
        await asyncio.sleep(0.05)
        preparer.gate.set()
        await asyncio.to_thread(lambda: thread._preparing_thread.submit(lambda: None).result(TIMEOUT))
        assert thread._pending == {} and thread._preparing == set()


async def test_a_drain_answers_a_call_being_prepared(embedder_dir: Path) -> None:
    with engine_process_over([EngineArgs(model=str(embedder_dir))]) as (_, (engine,)):
        preparer = GatedPreparer(remote_thread(engine))
        large = asyncio.ensure_future(engine.encode(LARGE))
        await asyncio.to_thread(preparer.entered.wait, TIMEOUT)
        drained = asyncio.ensure_future(asyncio.to_thread(engine.shutdown, TIMEOUT))
        await asyncio.sleep(0.2)
        assert not drained.done()  # it waits for the call being prepared
        preparer.gate.set()
        outputs = await asyncio.wait_for(large, TIMEOUT)
        await asyncio.wait_for(drained, TIMEOUT)
        assert len(outputs) == len(LARGE)
