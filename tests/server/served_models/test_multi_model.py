"""Several models in one ``wde serve``: the bundled embedding model and a tiny random cross-encoder.

The official SDKs through one process: openai embeds with the embedder, Cohere reranks with the
cross-encoder; answers equal the single-model server (the session engine's app) and transformers; an
unknown name is a 404 naming the served ones; TEI routes without ``model`` go to the first model of their
kind; metrics carry the model label. With ``--max-loaded-models 1`` alternating requests keep working while
the models are swapped (loads counted in ``wde_model_loads_total``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from openai import NotFoundError, OpenAI
from prometheus_client.parser import text_string_to_metric_families

from tests.server.conftest import TOLERANCE, asgi_client
from tests.server.routes.test_rerank_routes import DOCUMENTS, QUERY, SCORE_ATOL, reference_scores
from tests.server.serve_process import ServeProcess, serve_process
from wde import EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

pytestmark = pytest.mark.slow  # real `wde serve` processes, ~40 s

TEXTS = ["a fast file carver", "anti-virus toolkit for mail servers", "x " * 400]
TIMEOUT = 120


@pytest.fixture(scope="module")
def embedder_dir() -> str:
    return EngineArgs().create_engine_config().model_config.model  # the bundled all-MiniLM-L6-v2 folder


@pytest.fixture(scope="module")
def reranker_dir(cross_encoder_dir: Path) -> Path:
    return cross_encoder_dir  # tests/server/conftest.py: a tiny random one-label cross-encoder


@pytest.fixture(scope="module")
def two_models(
    tmp_path_factory: pytest.TempPathFactory, embedder_dir: str, reranker_dir: Path
) -> Iterator[ServeProcess]:
    tmp_path = tmp_path_factory.mktemp("multi-serve")
    config = tmp_path / "models.yaml"
    config.write_text(
        "models:\n"
        f"  - model: {embedder_dir}\n    served_model_name: minilm\n"
        f"  - model: {reranker_dir}\n    served_model_name: reranker\n    max_num_batched_tokens: 1024\n"
    )
    with serve_process(tmp_path, "--model-config", str(config), "--no-access-log") as server:
        server.wait_healthy(TIMEOUT)
        yield server


def metric_samples(url: str, name: str) -> dict[str, float]:
    """``name``'s samples by their model label."""
    text = httpx.get(f"{url}/metrics", timeout=TIMEOUT).text
    return {
        sample.labels["model"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and "model" in sample.labels
    }


@pytest.mark.anyio
async def test_sdks_reach_their_models_and_answer_as_single_model_servers(
    two_models: ServeProcess, reranker_dir: Path, async_engine: AsyncLLMEngine
) -> None:
    import cohere

    # 1. the openai SDK embeds with the embedder: equal to the single-model server over the same model
    client = OpenAI(base_url=f"{two_models.url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)
    response = client.embeddings.create(model="minilm", input=TEXTS)
    assert response.model == "minilm"
    got = np.array([item.embedding for item in response.data], dtype=np.float32)
    async with asgi_client(async_engine) as (single, _):
        expected = (await single.post("/v1/embeddings", json={"model": "x", "input": TEXTS})).json()
    want = np.array([item["embedding"] for item in expected["data"]], dtype=np.float32)
    assert float(np.abs(got - want).max()) <= TOLERANCE
    # 2. the Cohere SDK reranks with the cross-encoder: transformers' order and scores
    cohere_client = cohere.ClientV2(base_url=two_models.url, api_key="unused", timeout=TIMEOUT)
    reranked = cohere_client.rerank(model="reranker", query=QUERY, documents=DOCUMENTS)
    scores = reference_scores(reranker_dir, QUERY, DOCUMENTS)
    assert [result.index for result in reranked.results] == sorted(
        range(len(DOCUMENTS)), key=lambda i: -scores[i]
    )
    got_scores = np.array([result.relevance_score for result in reranked.results])
    assert float(np.abs(got_scores - scores[[r.index for r in reranked.results]]).max()) <= SCORE_ATOL
    # 3. an unknown name: 404 naming the served ones (OpenAI's error shape on /v1)
    with pytest.raises(NotFoundError) as raised:
        client.embeddings.create(model="text-embedding-3-small", input="hi")
    assert "'minilm'" in str(raised.value) and "'reranker'" in str(raised.value)
    tei = httpx.post(f"{two_models.url}/embed", json={"inputs": "hi", "model": "nope"}, timeout=TIMEOUT)
    assert tei.status_code == 404 and "'minilm', 'reranker'" in tei.json()["error"]


def test_tei_routes_pick_the_first_model_of_their_kind(two_models: ServeProcess, reranker_dir: Path) -> None:
    url = two_models.url
    # no model field: /embed goes to the embedder, /rerank to the cross-encoder
    embedded = httpx.post(f"{url}/embed", json={"inputs": TEXTS[0]}, timeout=TIMEOUT)
    named = httpx.post(f"{url}/embed", json={"inputs": TEXTS[0], "model": "minilm"}, timeout=TIMEOUT)
    assert embedded.status_code == 200 and embedded.json() == named.json()
    ranks = httpx.post(f"{url}/rerank", json={"query": QUERY, "texts": DOCUMENTS}, timeout=TIMEOUT).json()
    scores = reference_scores(reranker_dir, QUERY, DOCUMENTS)
    assert (
        float(np.abs(np.array([r["score"] for r in ranks]) - scores[[r["index"] for r in ranks]]).max())
        <= SCORE_ATOL
    )
    # the embedder can rank too (by cosine), when named
    by_cosine = httpx.post(
        f"{url}/rerank", json={"query": QUERY, "texts": DOCUMENTS, "model": "minilm"}, timeout=TIMEOUT
    )
    assert by_cosine.status_code == 200 and by_cosine.json() != ranks
    # the cross-encoder has no embeddings: TEI's 424 naming its task, as on its own server
    refused = httpx.post(f"{url}/embed", json={"inputs": "hi", "model": "reranker"}, timeout=TIMEOUT)
    assert refused.status_code == 424 and "score" in refused.json()["error"]


def test_models_info_and_metrics_list_every_model(two_models: ServeProcess) -> None:
    url = two_models.url
    models = httpx.get(f"{url}/v1/models", timeout=TIMEOUT).json()
    assert [card["id"] for card in models["data"]] == ["minilm", "reranker"]
    info = httpx.get(f"{url}/info", timeout=TIMEOUT).json()
    assert info["model_id"] == "minilm" and "embedding" in info["model_type"]  # TEI's fields: the first model
    assert [model["model_id"] for model in info["models"]] == ["minilm", "reranker"]
    assert "reranker" in info["models"][1]["model_type"] and info["models"][1]["max_batch_tokens"] == 1024
    assert all(model["loaded"] and model["num_loads"] == 1 for model in info["models"])
    httpx.post(f"{url}/embed", json={"inputs": "count me", "model": "minilm"}, timeout=TIMEOUT)
    httpx.post(
        f"{url}/rerank", json={"query": "q", "texts": ["count me"], "model": "reranker"}, timeout=TIMEOUT
    )
    batches = metric_samples(url, "wde_batch_size_tokens_count")
    assert batches["minilm"] >= 1 and batches["reranker"] >= 1
    assert metric_samples(url, "wde_model_loaded") == {"minilm": 1.0, "reranker": 1.0}
    # HTTP requests by the model they reached ("" for those that reached none, such as /health)
    answered = metric_samples(url, "wde_http_requests_total")
    assert answered["minilm"] >= 1 and answered["reranker"] >= 1 and answered[""] >= 1


@pytest.mark.parametrize("api_workers", ["1", "2"])
def test_one_loaded_model_at_a_time_swaps_on_demand(
    tmp_path: Path, embedder_dir: str, reranker_dir: Path, default_llm, api_workers: str
) -> None:
    """With API workers, the engine process swaps (server/engine_link/model_turns.py) and the workers say
    which model is loaded."""
    expected = default_llm.encode(TEXTS[:2])
    args = (embedder_dir, str(reranker_dir), "--max-loaded-models", "1", "--no-access-log")
    args += ("--api-workers", api_workers)
    with serve_process(tmp_path, *args) as server:
        server.wait_healthy(TIMEOUT)
        scores = reference_scores(reranker_dir, QUERY, DOCUMENTS)
        for _ in range(3):  # alternate: each request unloads the other model and loads its own
            embedded = httpx.post(
                f"{server.url}/v1/embeddings",
                json={"model": embedder_dir, "input": TEXTS[:2]},
                timeout=TIMEOUT,
            )
            assert embedded.status_code == 200, embedded.text
            got = np.array([item["embedding"] for item in embedded.json()["data"]], dtype=np.float32)
            assert float(np.abs(got - np.array([o.embedding for o in expected])).max()) <= TOLERANCE
            reranked = httpx.post(
                f"{server.url}/v1/rerank",
                json={"model": str(reranker_dir), "query": QUERY, "documents": DOCUMENTS},
                timeout=TIMEOUT,
            )
            assert reranked.status_code == 200, reranked.text
            results = reranked.json()["results"]
            assert (
                float(
                    np.abs(
                        np.array([r["relevance_score"] for r in results])
                        - scores[[r["index"] for r in results]]
                    ).max()
                )
                <= SCORE_ATOL
            )
        loads = metric_samples(server.url, "wde_model_loads_total")
        loaded = metric_samples(server.url, "wde_model_loaded")
        health = httpx.get(f"{server.url}/health", timeout=TIMEOUT)
        time.sleep(0.3)  # with API workers: the engine process's next state messages
        info = {model["model_id"]: model for model in httpx.get(f"{server.url}/info").json()["models"]}
    assert loads == {
        embedder_dir: 3.0,
        str(reranker_dir): 3.0,
    }  # start-up + 2 reloads; 3 loads of the reranker
    assert sum(loaded.values()) == 1.0 and loaded[str(reranker_dir)] == 1.0
    assert health.status_code == 200
    assert [(info[name]["loaded"], info[name]["num_loads"]) for name in loads] == [(False, 3), (True, 3)]
    assert info[embedder_dir]["attention_backend"] is None
