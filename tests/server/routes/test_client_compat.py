"""Unmodified third-party clients against a real uvicorn: huggingface_hub's InferenceClient (POST /),
tei-client (/info, /rerank, /predict on cross-encoders and classifiers) and the Cohere SDK (/v2/rerank with
max_tokens_per_doc); TEI's POST / and /invocations; the access log and the error wording."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from server.settings import ServerSettings
from tests.server.conftest import TOLERANCE, LiveServer, asgi_client, live_uvicorn, max_abs_diff, reference
from tests.tiny_models import BERT_MAX_POSITIONS, SEED, reference_logits, save_tiny_bert
from wde import EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

TIMEOUT = 60.0
QUERY = "anti-virus toolkit for mail servers"
DOCUMENTS = [
    "Clam AntiVirus is an anti-virus toolkit for Unix, integrated with mail servers.",
    "scalpel is a fast file carver that reads a database of header and footer definitions.",
    "A daemon that scans mail attachments for viruses, " + "and quarantines what it finds, " * 6,
]
TEXTS = ["What is Debian?", "A free operating system.", "x"]
SCORE_ATOL = 1e-5


@pytest.fixture(scope="module")
def live_server(async_engine: AsyncLLMEngine) -> Iterator[LiveServer]:
    with live_uvicorn(async_engine, ServerSettings()) as server:
        yield server


def _serve_dir(path: Path) -> Iterator[tuple[LiveServer, Path]]:
    engine = AsyncLLMEngine(EngineArgs(model=str(path)))
    engine.start()
    engine.wait_until_ready(timeout=120)
    try:
        with live_uvicorn(engine, ServerSettings()) as server:
            yield server, path
    finally:
        engine.shutdown(timeout=60)


@pytest.fixture(scope="module")
def reranker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Path]]:
    path = save_tiny_bert(
        tmp_path_factory.mktemp("compat-ce"),
        seed=SEED + 40,
        architecture="BertForSequenceClassification",
        num_labels=1,
    )
    yield from _serve_dir(path)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Path]]:
    path = save_tiny_bert(
        tmp_path_factory.mktemp("compat-cls"),
        seed=SEED + 41,
        architecture="BertForSequenceClassification",
        num_labels=3,
        id2label={0: "negative", 1: "neutral", 2: "positive"},
        label2id={"negative": 0, "neutral": 1, "positive": 2},
    )
    yield from _serve_dir(path)


def _token_offsets(path: Path) -> list[list[tuple[int, int]]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    encoded = tokenizer(DOCUMENTS, add_special_tokens=False, return_offsets_mapping=True)
    return encoded["offset_mapping"]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


# ---- POST / and /invocations ----------------------------------------------------------------------------
def test_huggingface_hub_inference_client_equals_embed(live_server: LiveServer, default_llm) -> None:
    from huggingface_hub import InferenceClient

    client = InferenceClient(model=live_server.url, timeout=TIMEOUT)
    got = client.feature_extraction(TEXTS)
    embed = httpx.post(f"{live_server.url}/embed", json={"inputs": TEXTS}, timeout=TIMEOUT).json()
    assert got.shape == (len(TEXTS), 384)
    assert max_abs_diff(got, np.asarray(embed, dtype=np.float32)) == 0.0
    assert max_abs_diff(got, reference(default_llm, TEXTS)) <= TOLERANCE
    raw = client.feature_extraction("What is Debian?", normalize=False)
    assert max_abs_diff(raw, reference(default_llm, ["What is Debian?"], normalize=False)) <= TOLERANCE


def test_invocations_takes_tei_and_openai_bodies(live_server: LiveServer, default_llm) -> None:
    tei = httpx.post(f"{live_server.url}/invocations", json={"inputs": TEXTS}, timeout=TIMEOUT)
    openai = httpx.post(f"{live_server.url}/invocations", json={"input": TEXTS}, timeout=TIMEOUT)
    assert tei.status_code == openai.status_code == 200
    assert max_abs_diff(tei.json(), reference(default_llm, TEXTS)) <= TOLERANCE
    assert (
        max_abs_diff([d["embedding"] for d in openai.json()["data"]], reference(default_llm, TEXTS))
        <= TOLERANCE
    )
    extra = httpx.post(f"{live_server.url}/", json={"inputs": TEXTS, "pooling": "cls"}, timeout=TIMEOUT)
    # an unknown field is ignored, as TEI does, and named in a header (--strict-request-fields: 422)
    assert extra.status_code == 200 and extra.headers["x-wde-ignored-fields"] == "pooling"


# ---- tei-client on a reranker and a classifier -------------------------------------------------------------
def test_tei_client_reranks_on_a_cross_encoder(reranker: tuple[LiveServer, Path]) -> None:
    from tei_client import HttpClient

    server, path = reranker
    client = HttpClient(server.url, timeout=TIMEOUT)
    info = client.info()
    assert info.server_model_type.value == "reranker"
    assert info.server_model_metadata.label2id == {"LABEL_0": 0}
    result = client.rerank(QUERY, DOCUMENTS, return_text=True, truncate=True)
    logits = reference_logits(path, [(QUERY, d) for d in DOCUMENTS], BERT_MAX_POSITIONS)[:, 0]
    order = sorted(range(len(DOCUMENTS)), key=lambda i: -logits[i])
    assert [rank.index for rank in result.ranks] == order
    assert np.abs(np.array([r.score for r in result.ranks]) - _sigmoid(logits[order])).max() <= SCORE_ATOL
    assert [rank.text for rank in result.ranks] == [DOCUMENTS[i] for i in order]
    # POST / with a rerank body reranks; with inputs it predicts
    root = httpx.post(f"{server.url}/", json={"query": QUERY, "texts": DOCUMENTS}, timeout=TIMEOUT).json()
    assert [rank["index"] for rank in root] == order
    pair = httpx.post(f"{server.url}/", json={"inputs": [QUERY, DOCUMENTS[0]]}, timeout=TIMEOUT).json()
    assert pair[0]["label"] == "LABEL_0" and abs(pair[0]["score"] - _sigmoid(logits[0])) <= SCORE_ATOL


def test_tei_client_classifies_texts_and_pairs(classifier: tuple[LiveServer, Path]) -> None:
    from tei_client import HttpClient

    server, path = classifier
    client = HttpClient(server.url, timeout=TIMEOUT)
    info = client.info()
    assert info.server_model_type.value == "classifier"
    assert info.server_model_metadata.label2id == {"negative": 0, "neutral": 1, "positive": 2}
    results = client.classify([(QUERY, DOCUMENTS[0]), (QUERY, DOCUMENTS[1])], truncate=True)
    logits = reference_logits(path, [(QUERY, DOCUMENTS[0]), (QUERY, DOCUMENTS[1])], BERT_MAX_POSITIONS)
    labels = ["negative", "neutral", "positive"]
    for result, row in zip(results, logits, strict=True):
        softmax = np.exp(row - row.max()) / np.exp(row - row.max()).sum()
        assert [s.label for s in result.scores] == [labels[i] for i in np.argsort(-softmax)]
        assert np.abs(np.array([s.score for s in result.scores]) - np.sort(softmax)[::-1]).max() <= SCORE_ATOL
    single = client.classify("a text alone", raw_scores=True)
    assert len(single) == 1 and len(single[0].scores) == 3


# ---- Cohere SDK and rerank request shapes ----------------------------------------------------------------
def test_cohere_sdk_reranks_with_max_tokens_per_doc(reranker: tuple[LiveServer, Path]) -> None:
    import cohere

    server, path = reranker
    client = cohere.ClientV2(base_url=server.url, api_key="unused", timeout=TIMEOUT)
    response = client.rerank(model="rerank-v3.5", query=QUERY, documents=DOCUMENTS, max_tokens_per_doc=4096)
    logits = reference_logits(path, [(QUERY, d) for d in DOCUMENTS], BERT_MAX_POSITIONS)[:, 0]
    assert [r.index for r in response.results] == sorted(range(len(DOCUMENTS)), key=lambda i: -logits[i])
    # a cap below the documents' length equals ranking the documents cut to their first 5 tokens
    capped = client.rerank(model="rerank-v3.5", query=QUERY, documents=DOCUMENTS, max_tokens_per_doc=5)
    cut = [d[: offsets[4][1]] for d, offsets in zip(DOCUMENTS, _token_offsets(path), strict=True)]
    assert cut[0] == "Clam AntiVirus is"  # clam anti ##vir ##us is
    expected = _sigmoid(reference_logits(path, [(QUERY, d) for d in cut], BERT_MAX_POSITIONS)[:, 0])
    got = {r.index: r.relevance_score for r in capped.results}
    assert np.abs(np.array([got[i] for i in range(len(DOCUMENTS))]) - expected).max() <= SCORE_ATOL


def test_rerank_with_documents_answers_the_cohere_shape(live_server: LiveServer, default_llm) -> None:
    """vLLM / Infinity / litellm (hosted_vllm/, infinity/) post {"query", "documents"} to /rerank."""
    expected = default_llm.rerank(QUERY, DOCUMENTS)
    body = {"model": "any", "query": QUERY, "documents": DOCUMENTS, "top_n": 2, "return_documents": True}
    response = httpx.post(f"{live_server.url}/rerank", json=body, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["index"] for r in results] == [r.index for r in expected[:2]]
    assert abs(results[0]["relevance_score"] - expected[0].score) <= SCORE_ATOL
    assert results[0]["document"] == {"text": DOCUMENTS[expected[0].index]}


# ---- access log, metrics, error wording --------------------------------------------------------------------
@pytest.mark.anyio
async def test_one_access_log_line_per_request_and_errors_counted(
    async_engine: AsyncLLMEngine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="wde.access")
    async with asgi_client(async_engine) as (client, _):
        # a linked engine's registry lives as long as the session's engine process: count from here
        before = embed_400s((await client.get("/metrics")).text)
        caplog.clear()
        assert (await client.post("/embed", json={"inputs": TEXTS})).status_code == 200
        assert (await client.post("/embed", json={"inputs": []})).status_code == 400  # TEI's "Empty"
        assert (await client.post("/v1/embeddings", json={"input": "x"})).status_code == 200
        metrics = (await client.get("/metrics")).text
    lines = [record for record in caplog.records if record.name == "wde.access"]
    assert len(lines) == 4, [record.getMessage() for record in lines]
    ok, bad, openai, _ = (record.getMessage() for record in lines)
    assert ok.startswith("POST /embed 200 ") and "inputs=3 tokens=" in ok and " ms " in ok
    assert bad.startswith("POST /embed 400 ") and "error=" in bad and "inputs" in bad
    assert lines[1].levelno == logging.WARNING
    assert openai.startswith("POST /v1/embeddings 200 ") and "inputs=1 tokens=3" in openai
    assert embed_400s(metrics) == before + 1


def embed_400s(metrics: str) -> float:
    """``wde_http_requests_total`` of POST /embed answered 400, from a /metrics text (0 before the first)."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = {"method": "POST", "model": "", "route": "/embed", "status": "400"}
    return sum(
        sample.value
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if sample.name == "wde_http_requests_total" and sample.labels == wanted
    )


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("method", "path", "content", "status", "error_type", "needle"),
    [
        ("POST", "/embedd", b"{}", 404, "NotFound", "no route POST /embedd; GET /docs"),
        ("GET", "/embed", None, 405, "MethodNotAllowed", "/embed does not take GET; use POST"),
        ("POST", "/embed", b'{"inputs": "\xff"}', 400, "Validation", "not valid UTF-8 (byte 0xff"),
        ("POST", "/embed", b'{"inputs": "a\\ud800"}', 422, "Validation", "lone UTF-16 surrogate (U+D800"),
    ],
)
async def test_error_wording(
    async_engine: AsyncLLMEngine, method: str, path: str, content, status: int, error_type: str, needle: str
) -> None:
    headers = {"content-type": "application/json"}
    async with asgi_client(async_engine) as (client, _):
        response = await client.request(method, path, content=content, headers=headers)
    assert response.status_code == status, response.text
    assert response.json()["error_type"] == error_type and needle in response.json()["error"]
    assert "TextEncodeInput" not in response.text


@pytest.mark.anyio
async def test_embedding_model_asked_to_classify_names_the_routes(async_engine: AsyncLLMEngine) -> None:
    async with asgi_client(async_engine) as (client, _):
        response = await client.post("/predict", json={"inputs": "x"})
    assert response.status_code == 424  # TEI's status: not a classifier
    assert "/embed" in response.json()["error"] and "score endpoints" not in response.json()["error"]


@pytest.mark.anyio
async def test_empty_strings_are_embedded_like_sentence_transformers(
    async_engine: AsyncLLMEngine, default_llm
) -> None:
    async with asgi_client(async_engine) as (client, _):
        response = await client.post("/embed", json={"inputs": ["", "x"]})
    assert response.status_code == 200
    assert max_abs_diff(response.json(), reference(default_llm, ["", "x"])) <= TOLERANCE
