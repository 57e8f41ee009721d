"""--cache-size over HTTP: a repeated request runs no forward pass, /metrics counts hits, misses and bytes,
/info shows the settings; without it /info says off and the metrics stay 0."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.counted_forward import CountedForward
from tests.server.conftest import TEXTS, asgi_client
from wde import EngineArgs, LLMEngine
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def cached_engine() -> Iterator[tuple[AsyncLLMEngine, list[CountedForward]]]:
    args = EngineArgs(cache_size=2)
    forwards: list[CountedForward] = []

    def build() -> LLMEngine:
        engine = LLMEngine.from_engine_args(args)
        forwards.append(CountedForward(engine))
        return engine

    engine = AsyncLLMEngine(args, build_engine=build)
    engine.start()
    engine.wait_until_ready(timeout=120)
    yield engine, forwards
    engine.shutdown(timeout=60)


def samples(metrics_text: str) -> dict[str, float]:
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(metrics_text)
        for sample in family.samples
        if sample.name.startswith("wde_cache_")
    }


async def test_a_repeated_request_runs_no_forward_pass(cached_engine) -> None:
    engine, (forward,) = cached_engine
    async with asgi_client(engine) as (client, _):
        first = await client.post("/embed", json={"inputs": [*TEXTS, TEXTS[0]]})
        assert forward.batch_sizes == [len(TEXTS)]  # the duplicate ran once
        second = await client.post("/v1/embeddings", json={"input": TEXTS, "encoding_format": "float"})
        assert forward.batch_sizes == [len(TEXTS)]  # answered from the cache
        smaller = await client.post("/embed", json={"inputs": TEXTS[:1], "dimensions": 64})
        assert forward.batch_sizes == [len(TEXTS), 1]  # other dimensions: a miss
        metrics = samples((await client.get("/metrics")).text)
        info = (await client.get("/info")).json()
    assert first.status_code == second.status_code == smaller.status_code == 200
    assert first.json()[: len(TEXTS)] == [item["embedding"] for item in second.json()["data"]]
    assert first.json()[0] == first.json()[-1]
    assert second.json()["usage"]["prompt_tokens"] > 0  # cached inputs still count their tokens
    assert metrics["wde_cache_hits_total"] == len(TEXTS)
    assert metrics["wde_cache_misses_total"] == len(TEXTS) + 1
    assert metrics["wde_cache_deduplicated_total"] == 1
    assert metrics["wde_cache_entries"] == len(TEXTS) + 1
    assert 0 < metrics["wde_cache_bytes"] <= metrics["wde_cache_max_bytes"] == 2 * 2**20
    assert info["result_cache"] == {"size_mib": 2, "max_bytes": 2 * 2**20, "deduplicate": True}


async def test_without_cache_size_info_says_off_and_the_metrics_stay_0(async_engine: AsyncLLMEngine) -> None:
    async with asgi_client(async_engine) as (client, _):
        assert (await client.post("/embed", json={"inputs": ["same", "same"]})).status_code == 200
        metrics = samples((await client.get("/metrics")).text)
        info = (await client.get("/info")).json()
    assert info["result_cache"] == {"size_mib": 0.0, "max_bytes": 0, "deduplicate": False}
    assert metrics["wde_cache_hits_total"] == metrics["wde_cache_deduplicated_total"] == 0
    assert metrics["wde_cache_bytes"] == 0


async def test_an_api_workers_cache_is_counted_by_the_engine_process_metrics() -> None:
    """--api-workers: the cache lives in the worker (beside the plans), /metrics in the engine process."""
    from tests.server.linked_engine import engine_process_over

    with engine_process_over([EngineArgs(cache_size=2)]) as (_, (engine,)):
        async with asgi_client(engine) as (client, _):
            await client.post("/embed", json={"inputs": TEXTS})
            await client.post("/embed", json={"inputs": TEXTS})
            metrics = samples((await client.get("/metrics")).text)
    assert metrics["wde_cache_hits_total"] == len(TEXTS)
    assert metrics["wde_cache_misses_total"] == len(TEXTS)
    assert metrics["wde_cache_max_bytes"] == 2 * 2**20
