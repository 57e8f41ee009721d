"""Rerank over HTTP: TEI /rerank and Cohere-style /v1/rerank, /v2/rerank.

The embedding model (session engine) ranks by cosine like LLM.rerank; a tiny random cross-encoder behind a
real uvicorn returns Cohere's shape in the order of transformers' logits.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from server.settings import ServerSettings
from tests.server.conftest import LiveServer, asgi_client, live_uvicorn
from tests.tiny_models import BERT_MAX_POSITIONS, reference_logits
from wde import EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

pytestmark = pytest.mark.anyio

QUERY = "anti-virus toolkit for mail servers"
DOCUMENTS = [
    "Clam AntiVirus is an anti-virus toolkit for Unix, integrated with mail servers.",
    "scalpel is a fast file carver that reads a database of header and footer definitions.",
    "This package contains the source for the Rust universal-hash crate.",
    "A daemon that scans mail attachments for viruses.",
]
SCORE_ATOL = 1e-5


async def test_tei_rerank_equals_llm_rerank(async_engine: AsyncLLMEngine, default_llm) -> None:
    expected = default_llm.rerank(QUERY, DOCUMENTS, return_documents=True)
    async with asgi_client(async_engine) as (client, _):
        response = await client.post(
            "/rerank", json={"query": QUERY, "texts": DOCUMENTS, "return_text": True}
        )
    assert response.status_code == 200, response.text
    ranks = response.json()
    assert [rank["index"] for rank in ranks] == [result.index for result in expected]
    assert np.abs(np.array([r["score"] for r in ranks]) - [r.score for r in expected]).max() <= SCORE_ATOL
    assert [rank["text"] for rank in ranks] == [result.document for result in expected]
    async with asgi_client(async_engine) as (client, _):
        plain = (await client.post("/rerank", json={"query": QUERY, "texts": DOCUMENTS})).json()
    assert all(set(rank) == {"index", "score"} for rank in plain)


async def test_cohere_rerank_shape_top_n_and_documents(async_engine: AsyncLLMEngine, default_llm) -> None:
    expected = default_llm.rerank(QUERY, DOCUMENTS)
    documents = [DOCUMENTS[0], {"text": DOCUMENTS[1], "id": "doc-1"}, *DOCUMENTS[2:]]
    async with asgi_client(async_engine) as (client, _):
        for path, version in (("/v1/rerank", "1"), ("/v2/rerank", "2")):
            body = {"query": QUERY, "documents": documents, "top_n": 3, "return_documents": True}
            response = await client.post(path, json=body)
            assert response.status_code == 200, response.text
            payload = response.json()
            assert set(payload) == {"id", "results", "meta", "model", "usage", "object", "created"}
            assert payload["meta"]["api_version"] == {"version": version}
            assert payload["usage"]["total_tokens"] > 0
            results = payload["results"]
            assert [r["index"] for r in results] == [r.index for r in expected[:3]]
            for result in results:
                original = documents[result["index"]]
                assert result["document"] == ({"text": original} if isinstance(original, str) else original)
        bare = (await client.post("/v1/rerank", json={"query": QUERY, "documents": DOCUMENTS})).json()
    assert len(bare["results"]) == len(DOCUMENTS)
    assert all("document" not in result for result in bare["results"])


async def test_cohere_rank_fields_rank_structured_documents(
    async_engine: AsyncLLMEngine, default_llm
) -> None:
    documents = [{"title": "ClamAV", "body": DOCUMENTS[0]}, {"title": "scalpel", "body": DOCUMENTS[1]}]
    flattened = [f"title: {d['title']}\nbody: {d['body']}" for d in documents]
    expected = default_llm.rerank(QUERY, flattened)
    async with asgi_client(async_engine) as (client, _):
        body = {"query": QUERY, "documents": documents, "rank_fields": ["title", "body"]}
        results = (await client.post("/v1/rerank", json=body)).json()["results"]
    assert [r["index"] for r in results] == [r.index for r in expected]
    assert abs(results[0]["relevance_score"] - expected[0].score) <= SCORE_ATOL


@pytest.mark.parametrize(
    ("path", "body", "status", "needle"),
    [
        ("/rerank", {"query": QUERY, "texts": []}, 400, "texts"),  # TEI's "Empty"
        ("/rerank", {"query": ["not", "a", "str"], "texts": ["a"]}, 422, "query"),
        ("/rerank", {"query": QUERY, "texts": ["a", 3]}, 422, "texts"),
        ("/rerank", {"query": QUERY, "texts": ["a"], "truncation_direction": "middle"}, 422, "right"),
        ("/v1/rerank", {"query": QUERY, "documents": []}, 422, "documents"),
        ("/v1/rerank", {"query": QUERY, "documents": [{"title": "no text"}]}, 422, "no string field 'text'"),
        ("/v1/rerank", {"query": QUERY, "documents": ["a"], "top_n": 0}, 422, "top_n"),
        (
            "/v1/rerank",
            {"query": QUERY, "documents": ["a"], "max_tokens_per_doc": 0},
            422,
            "max_tokens_per_doc",
        ),
        (
            "/v1/rerank",
            {"query": QUERY, "documents": ["a"], "max_chunks_per_doc": 2},
            422,
            "max_chunks_per_doc",
        ),
        ("/rerank", {"query": QUERY, "documents": ["a"], "texts": ["b"]}, 422, "texts"),
        ("/v2/rerank", {"query": QUERY, "documents": ["a"], "top_n": "all"}, 422, "top_n"),
    ],
)
async def test_bad_rerank_requests_are_4xx_with_a_json_body(
    async_engine: AsyncLLMEngine, path: str, body: dict, status: int, needle: str
) -> None:
    async with asgi_client(async_engine) as (client, _):
        response = await client.post(path, json=body)
        assert response.status_code == status, response.text
        assert needle in response.text
        payload = response.json()
        assert "message" in payload["error"] if path.startswith("/v") else "error_type" in payload
        assert (await client.post("/rerank", json={"query": QUERY, "texts": ["still up"]})).status_code == 200


@pytest.fixture(scope="module")
def cross_encoder_server(cross_encoder_dir: Path) -> Iterator[LiveServer]:
    engine = AsyncLLMEngine(EngineArgs(model=str(cross_encoder_dir)))
    engine.start()
    engine.wait_until_ready(timeout=120)
    try:
        with live_uvicorn(engine, ServerSettings()) as server:
            yield server
    finally:
        engine.shutdown(timeout=60)


def reference_scores(path: Path, query: str, documents: list[str]) -> np.ndarray:
    logits = reference_logits(path, [(query, document) for document in documents], BERT_MAX_POSITIONS)
    return 1 / (1 + np.exp(-logits[:, 0]))  # CrossEncoder's sigmoid for one label


def test_cross_encoder_over_uvicorn_returns_cohere_shape_in_reference_order(
    cross_encoder_server: LiveServer, cross_encoder_dir: Path
) -> None:
    scores = reference_scores(cross_encoder_dir, QUERY, DOCUMENTS)
    order = sorted(range(len(DOCUMENTS)), key=lambda i: -scores[i])
    body = {"model": str(cross_encoder_dir), "query": QUERY, "documents": DOCUMENTS, "top_n": 2}
    response = httpx.post(f"{cross_encoder_server.url}/v1/rerank", json=body, timeout=60)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["index"] for r in results] == order[:2]
    assert np.abs(np.array([r["relevance_score"] for r in results]) - scores[order[:2]]).max() <= SCORE_ATOL
    tei = httpx.post(
        f"{cross_encoder_server.url}/rerank", json={"query": QUERY, "texts": DOCUMENTS, "raw_scores": True}
    ).json()
    logits = np.log(scores / (1 - scores))
    assert np.abs(np.array([r["score"] for r in tei]) - logits[[r["index"] for r in tei]]).max() <= 1e-4
    embed = httpx.post(
        f"{cross_encoder_server.url}/embed", json={"inputs": "a cross-encoder has no embeddings"}
    )
    assert embed.status_code == 424 and "score" in embed.json()["error"]  # TEI's status: not an embedder
    info = httpx.get(f"{cross_encoder_server.url}/info").json()
    assert info["model_type"]["reranker"] is not None
