"""Over HTTP, one failing input fails only its own request (JSON 500 naming it); its batch-mates get 200."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest

from tests.poisoned_forward import INNOCENT_TEXTS, MARKER, PoisonedForward
from tests.server.conftest import TOLERANCE, asgi_client, max_abs_diff
from wde import EngineArgs
from wde.engine.llm_engine import LLMEngine
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def poisoned_engine() -> Iterator[AsyncLLMEngine]:
    """Its own engine (the session one stays unpatched), with a small budget so requests share batches."""
    args = EngineArgs(max_num_batched_tokens=128, executor="async")

    def build() -> LLMEngine:
        return PoisonedForward.install(LLMEngine.from_engine_args(args))

    engine = AsyncLLMEngine(args, build_engine=build)
    engine.start()
    engine.wait_until_ready(timeout=120)
    yield engine
    engine.shutdown(timeout=60)


async def test_the_culprit_gets_500_naming_its_input_and_the_others_200(
    poisoned_engine: AsyncLLMEngine, default_llm
) -> None:
    expected = np.stack([output.embedding for output in default_llm.encode(INNOCENT_TEXTS)])
    model = poisoned_engine.info.model_config.served_model_name
    async with asgi_client(poisoned_engine) as (client, _):
        innocent = [client.post("/embed", json={"inputs": text}) for text in INNOCENT_TEXTS]
        marked = client.post("/embed", json={"inputs": ["a fine text", f"the {MARKER} input"]})
        openai = client.post("/v1/embeddings", json={"input": [f"{MARKER}", "fine"], "model": model})
        responses = await asyncio.gather(*innocent[:15], marked, openai, *innocent[15:])
        after = await client.post("/embed", json={"inputs": INNOCENT_TEXTS[:2]})
    innocent_responses = [*responses[:15], *responses[17:]]
    assert [response.status_code for response in innocent_responses] == [200] * len(INNOCENT_TEXTS)
    got = np.concatenate([np.asarray(response.json(), dtype=np.float32) for response in innocent_responses])
    assert max_abs_diff(got, expected) <= TOLERANCE
    # TEI shape and OpenAI shape, both naming the failing input and what failed
    tei, openai_answer = responses[15], responses[16]
    assert tei.status_code == 500 and tei.json()["error_type"] == "Backend"
    assert tei.json()["error"].startswith(
        "inputs[1]: the forward pass failed for this input (request id req_"
    )
    assert "RuntimeError" not in tei.text  # the exception goes to the log only (test_error_answers.py)
    assert openai_answer.status_code == 500
    error = openai_answer.json()["error"]
    assert error["type"] == "server_error" and error["param"] == "input"
    assert error["message"].startswith("input[0]: the forward pass failed for this input")
    # the engine serves the next request
    assert after.status_code == 200 and max_abs_diff(after.json(), expected[:2]) <= TOLERANCE
