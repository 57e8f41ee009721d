"""Drop-in routes of TEI, vLLM and Infinity, each checked against the numbers of our existing routes.

Bodies are the peers' clients' own: huggingface_hub's ``InferenceClient`` (run for real), langchain-community
``HuggingFaceInferenceAPIEmbeddings``' (its body: langchain is not installed here),
infinity_client's (read from its generated models: the package pins httpx < 0.28, which this environment's
clients need, so the bodies are copied as its ``to_dict`` writes them with default arguments), litellm's
``hosted_vllm/`` provider (as its transformation writes them) and the plain-HTTP examples of vLLM's docs.
Left truncation is checked against transformers' tokenizer with ``truncation_side="left"``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from server.settings import ServerSettings
from tests.server.conftest import LiveServer, asgi_client, live_uvicorn
from tests.tiny_models import SEED, save_tiny_bert
from wde import EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

pytestmark = pytest.mark.anyio

QUERY = "anti-virus toolkit for mail servers"
DOCUMENTS = [
    "Clam AntiVirus is an anti-virus toolkit for Unix, integrated with mail servers.",
    "scalpel is a fast file carver that reads a database of header and footer definitions.",
    "A daemon that scans mail attachments for viruses.",
]
LONG = "the start of a long text " + "filler words " * 200 + "and its very distinct ending"
ATOL = 1e-5  # the same engine: the routes differ only in how they read and write JSON
REFERENCE_ATOL = 1e-4  # transformers (eager, padded) against the engine
LABELS = {0: "negative", 1: "neutral", 2: "positive"}
INFINITY_DEFAULT_MODEL = "default/not-specified"  # what infinity_client sends when no model is named


def _engine(path: Path) -> AsyncLLMEngine:
    engine = AsyncLLMEngine(EngineArgs(model=str(path), device="cpu"))
    engine.start()
    engine.wait_until_ready(timeout=120)
    return engine


@pytest.fixture(scope="module")
def reranker_engine(cross_encoder_dir: Path) -> Iterator[AsyncLLMEngine]:
    engine = _engine(cross_encoder_dir)
    yield engine
    engine.shutdown(timeout=60)


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(
        tmp_path_factory.mktemp("dropin-cls"),
        seed=SEED + 41,
        architecture="BertForSequenceClassification",
        num_labels=3,
        id2label=LABELS,
        label2id={label: index for index, label in LABELS.items()},
    )


@pytest.fixture(scope="module")
def classifier_engine(classifier_dir: Path) -> Iterator[AsyncLLMEngine]:
    engine = _engine(classifier_dir)
    yield engine
    engine.shutdown(timeout=60)


def _close(got: Any, expected: Any, atol: float = ATOL) -> bool:
    return (
        float(np.abs(np.asarray(got, dtype=np.float64) - np.asarray(expected, dtype=np.float64)).max())
        <= atol
    )


# ---- unknown fields ---------------------------------------------------------------------------------------
async def test_langchain_options_body_is_embedded_and_the_field_named(async_engine: AsyncLLMEngine) -> None:
    """HuggingFaceInferenceAPIEmbeddings(api_url=URL/embed) posts this body (its answer read unchecked)."""
    texts = ["foo bar", "a second text"]
    body = {"inputs": texts, "options": {"wait_for_model": True, "use_cache": True}}
    async with asgi_client(async_engine) as (client, _):
        answer = await client.post("/embed", json=body)
        plain = await client.post("/embed", json={"inputs": texts})
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-wde-ignored-fields"] == "options" and "x-wde-ignored-fields" not in plain.headers
    assert _close(answer.json(), plain.json())


async def test_hostile_unknown_field_names_get_a_sane_header(async_engine: AsyncLLMEngine) -> None:
    """Field names are the client's: control characters and non-ASCII are replaced, the list is capped."""
    body = {"inputs": "x", "a\r\nSet-Cookie: x": 1, "ü": 2, **{f"f{index}": index for index in range(500)}}
    async with asgi_client(async_engine) as (client, _):
        response = await client.post("/embed", json=body)
    header = response.headers["x-wde-ignored-fields"]
    assert response.status_code == 200, response.text
    assert header.startswith("a??Set-Cookie: x, ?, f0, f1") and header.endswith("...") and len(header) <= 1000
    assert all(" " <= char <= "~" for char in header)


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/embed", {"inputs": "x", "options": {}}, "options"),
        ("/v1/embeddings", {"input": "x", "temperature": 1}, "temperature"),
        ("/similarity", {"inputs": {"source_sentence": "a", "sentences": ["b"], "extra": 1}}, "extra"),
    ],
)
async def test_strict_request_fields_refuses_unknown_fields(
    async_engine: AsyncLLMEngine, path: str, body: dict, field: str
) -> None:
    async with asgi_client(async_engine, strict_request_fields=True) as (client, _):
        response = await client.post(path, json=body)
        schema = (await client.get("/openapi.json")).json()
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    message = error["message"] if isinstance(error, dict) else error
    assert field in message and "--strict-request-fields" in message
    if isinstance(error, dict):  # OpenAI's shape names the field as the param
        assert error["param"] == field
    assert schema["components"]["schemas"]["EmbedRequest"]["additionalProperties"] is False


# ---- TEI -------------------------------------------------------------------------------------------------
async def test_similarity_is_the_cosine_of_embed(async_engine: AsyncLLMEngine) -> None:
    source, sentences = (
        "a cat sits on the mat",
        ["a cat is on the mat", "stock prices fell", "a cat sits on the mat"],
    )
    body = {"inputs": {"source_sentence": source, "sentences": sentences}, "parameters": {}}
    async with asgi_client(async_engine) as (client, _):
        scores = await client.post("/similarity", json=body)
        vectors = np.asarray((await client.post("/embed", json={"inputs": [source, *sentences]})).json())
        root = await client.post("/", json=body)  # InferenceClient.sentence_similarity posts to the URL
    assert scores.status_code == 200 and root.status_code == 200, scores.text + root.text
    assert _close(scores.json(), vectors[1:] @ vectors[0]) and _close(root.json(), scores.json())
    assert abs(scores.json()[2] - 1.0) <= ATOL


async def test_decode_inverts_tokenize(async_engine: AsyncLLMEngine) -> None:
    text = "Debian package descriptions are short"
    async with asgi_client(async_engine) as (client, _):
        tokens = (await client.post("/tokenize", json={"inputs": text})).json()[0]
        ids = [token["id"] for token in tokens]
        decoded = (await client.post("/decode", json={"ids": ids})).json()
        with_specials = (
            await client.post("/decode", json={"ids": [ids], "skip_special_tokens": False})
        ).json()
        outside = await client.post("/decode", json={"ids": [10**7]})
    assert decoded == [text.lower()]  # the model's tokenizer lower-cases
    assert with_specials[0].startswith("[CLS]") and with_specials[0].endswith("[SEP]")
    assert outside.status_code == 422 and "vocabulary" in outside.json()["error"]


async def test_health_routes_and_unversioned_embeddings(async_engine: AsyncLLMEngine) -> None:
    async with asgi_client(async_engine) as (client, _):
        probes = [await client.get(path) for path in ("/", "/ping", "/health")]
        unversioned = await client.post("/embeddings", json={"input": ["a", "b"], "model": "any"})
        versioned = await client.post("/v1/embeddings", json={"input": ["a", "b"], "model": "any"})
    assert [probe.status_code for probe in probes] == [200, 200, 200]
    assert unversioned.status_code == 200 and unversioned.json()["usage"] == versioned.json()["usage"]
    assert _close(
        [item["embedding"] for item in unversioned.json()["data"]],
        [item["embedding"] for item in versioned.json()["data"]],
    )


async def test_left_truncation_keeps_the_end_as_transformers_does(async_engine: AsyncLLMEngine) -> None:
    from transformers import AutoTokenizer

    info = async_engine.info
    tokenizer = AutoTokenizer.from_pretrained(info.engine_config.model_config.model, truncation_side="left")
    max_length = info.model_config.max_model_len
    ids = tokenizer(LONG, truncation=True, max_length=max_length)["input_ids"]
    async with asgi_client(async_engine) as (client, _):
        left = (await client.post("/embed", json={"inputs": LONG, "truncation_direction": "Left"})).json()
        by_ids = (await client.post("/embed", json={"inputs": [ids]})).json()
        right = (await client.post("/embed", json={"inputs": LONG})).json()
    assert len(ids) == max_length and tokenizer.decode(ids[-3:-1]) == "distinct ending"
    assert _close(left, by_ids) and not _close(left, right, atol=1e-2)


async def test_left_truncation_of_pairs_equals_transformers(
    reranker_engine: AsyncLLMEngine, cross_encoder_dir: Path
) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    max_length = reranker_engine.info.model_config.max_model_len
    tokenizer = AutoTokenizer.from_pretrained(cross_encoder_dir, truncation_side="left")
    model = AutoModelForSequenceClassification.from_pretrained(cross_encoder_dir, attn_implementation="eager")
    features = tokenizer(
        [QUERY] * 2, [LONG, DOCUMENTS[0]], truncation=True, max_length=max_length, padding=True
    )
    with torch.inference_mode():
        logits = model.eval()(**features.convert_to_tensors("pt")).logits[:, 0].numpy()
    body = {"query": QUERY, "texts": [LONG, DOCUMENTS[0]], "raw_scores": True, "truncation_direction": "Left"}
    async with asgi_client(reranker_engine) as (client, _):
        ranks = (await client.post("/rerank", json=body)).json()
    by_index = {rank["index"]: rank["score"] for rank in ranks}
    assert _close([by_index[0], by_index[1]], logits, REFERENCE_ATOL)


# ---- vLLM ------------------------------------------------------------------------------------------------
async def test_score_one_to_one_one_to_n_and_n_to_n(reranker_engine: AsyncLLMEngine) -> None:
    expected = await reranker_engine.score(QUERY, DOCUMENTS)  # LLM.score's numbers
    async with asgi_client(reranker_engine) as (client, _):
        one_to_n = (await client.post("/score", json={"text_1": QUERY, "text_2": DOCUMENTS})).json()
        versioned = (await client.post("/v1/score", json={"text_1": QUERY, "text_2": DOCUMENTS})).json()
        one = (await client.post("/score", json={"text_1": QUERY, "text_2": DOCUMENTS[1]})).json()
        pairs = {"queries": [QUERY, QUERY], "documents": DOCUMENTS[:2]}  # vLLM's other spelling
        n_to_n = (await client.post("/score", json=pairs)).json()
        unpaired = await client.post("/score", json={"text_1": [QUERY] * 2, "text_2": DOCUMENTS})
        ranks = (await client.post("/v1/rerank", json={"query": QUERY, "documents": DOCUMENTS})).json()
    scores = [item["score"] for item in one_to_n["data"]]
    assert _close(scores, [output.score for output in expected])
    assert [item["score"] for item in versioned["data"]] == scores
    assert _close([one["data"][0]["score"]], [scores[1]]) and _close(
        [d["score"] for d in n_to_n["data"]], scores[:2]
    )
    assert _close(
        scores, [dict((r["index"], r["relevance_score"]) for r in ranks["results"])[i] for i in range(3)]
    )
    assert one_to_n["object"] == "list" and [item["object"] for item in one_to_n["data"]] == ["score"] * 3
    assert one_to_n["usage"]["prompt_tokens"] == one_to_n["usage"]["total_tokens"] > 0
    assert unpaired.status_code == 400 and "1:1, 1:N or N:N" in unpaired.json()["error"]["message"]


async def test_score_truncate_prompt_tokens_and_vllm_docs_body(
    reranker_engine: AsyncLLMEngine, cross_encoder_dir: Path
) -> None:
    from tests.tiny_models import reference_logits

    logits = reference_logits(cross_encoder_dir, [(QUERY, document) for document in DOCUMENTS], max_length=12)
    docs_body = {  # vLLM's docs: curl -X POST http://localhost:8000/score (encoding_format is ignored)
        "model": "BAAI/bge-reranker-v2-m3",
        "encoding_format": "float",
        "text_1": QUERY,
        "text_2": DOCUMENTS,
        "truncate_prompt_tokens": 12,
        "use_activation": False,
    }
    async with asgi_client(reranker_engine) as (client, _):
        response = await client.post("/score", json=docs_body)
        too_many = await client.post("/score", json={**docs_body, "truncate_prompt_tokens": 10**6})
    assert response.status_code == 200, response.text
    assert response.headers["x-wde-ignored-fields"] == "encoding_format"
    assert _close([item["score"] for item in response.json()["data"]], logits[:, 0], REFERENCE_ATOL)
    assert too_many.status_code == 422 and "max_model_len" in too_many.json()["error"]["message"]


async def test_score_on_an_embedding_model_is_cosine(async_engine: AsyncLLMEngine) -> None:
    async with asgi_client(async_engine) as (client, _):
        scores = (await client.post("/score", json={"text_1": QUERY, "text_2": DOCUMENTS})).json()
        vectors = np.asarray((await client.post("/embed", json={"inputs": [QUERY, *DOCUMENTS]})).json())
    assert _close([item["score"] for item in scores["data"]], vectors[1:] @ vectors[0])


async def test_vllm_classify_and_pooling_equal_predict(classifier_engine: AsyncLLMEngine) -> None:
    texts = ["Loved the new café, the coffee was great.", "This phone battery dies way too fast."]
    async with asgi_client(classifier_engine) as (client, _):
        predictions = (await client.post("/predict", json={"inputs": [[text] for text in texts]})).json()
        classify = (await client.post("/classify", json={"model": "any", "input": texts})).json()
        versioned = (await client.post("/v1/classify", json={"input": texts})).json()
        raw = (await client.post("/classify", json={"input": texts, "use_activation": False})).json()
        pooled = (await client.post("/pooling", json={"input": texts})).json()
        logits = (
            await client.post("/predict", json={"inputs": [[t] for t in texts], "raw_scores": True})
        ).json()
    for index, labels in enumerate(predictions):
        by_label = {item["label"]: item["score"] for item in labels}
        probs = [by_label[LABELS[i]] for i in range(3)]
        item = classify["data"][index]
        assert item["index"] == index and item["num_classes"] == 3 and item["label"] == labels[0]["label"]
        assert _close(item["probs"], probs) and versioned["data"][index]["probs"] == item["probs"]
        assert _close(pooled["data"][index]["data"], probs) and pooled["data"][index]["object"] == "pooling"
        raw_by_label = {entry["label"]: entry["score"] for entry in logits[index]}
        assert _close(raw["data"][index]["probs"], [raw_by_label[LABELS[i]] for i in range(3)])
    assert classify["object"] == "list" and classify["usage"]["completion_tokens"] == 0


async def test_pooling_embeds_as_embed(async_engine: AsyncLLMEngine) -> None:
    async with asgi_client(async_engine) as (client, _):
        pooled = (await client.post("/pooling", json={"model": "any", "input": "vLLM is great!"})).json()
        embed = (await client.post("/embed", json={"inputs": "vLLM is great!"})).json()
        short = (
            await client.post("/pooling", json={"input": ["a"], "task": "embed", "dimensions": 8})
        ).json()
        classify = await client.post("/pooling", json={"input": "a", "task": "classify"})
    assert _close([pooled["data"][0]["data"]], embed) and len(short["data"][0]["data"]) == 8
    assert classify.status_code == 400 and classify.json()["error"]["code"] == "unsupported_task"


async def test_litellm_hosted_vllm_rerank_and_embedding_bodies(
    reranker_engine: AsyncLLMEngine, async_engine: AsyncLLMEngine
) -> None:
    """As litellm's HostedVLLMRerankConfig / HostedVLLMEmbeddingConfig write them (api_base without /v1)."""
    rerank_body = {
        "model": "my-reranker",
        "query": QUERY,
        "documents": DOCUMENTS,
        "top_n": 2,
        "return_documents": True,
    }
    async with asgi_client(reranker_engine) as (client, _):
        answer = (await client.post("/rerank", json=rerank_body)).json()
        cohere = (await client.post("/v1/rerank", json=rerank_body)).json()
    async with asgi_client(async_engine) as (client, _):
        embedded = await client.post("/embeddings", json={"model": "my-embedder", "input": ["a text"]})
        reference = (await client.post("/embed", json={"inputs": ["a text"]})).json()
    assert [(r["index"], r["document"]["text"]) for r in answer["results"]] == [
        (r["index"], DOCUMENTS[r["index"]]) for r in cohere["results"]
    ]
    assert len(answer["results"]) == 2 and answer["usage"]["total_tokens"] > 0
    assert embedded.status_code == 200 and _close([embedded.json()["data"][0]["embedding"]], reference)


# ---- Infinity --------------------------------------------------------------------------------------------
async def test_infinity_client_bodies(
    async_engine: AsyncLLMEngine, reranker_engine: AsyncLLMEngine, classifier_engine: AsyncLLMEngine
) -> None:
    texts = ["a text", "another"]
    async with asgi_client(async_engine) as (client, _):
        embedded = await client.post(
            "/embeddings",
            json={"input": texts, "model": INFINITY_DEFAULT_MODEL, "dimensions": 0, "modality": "text"},
        )
        models = (await client.get("/models")).json()
        reference = (await client.post("/embed", json={"inputs": texts})).json()
    body = {
        "query": QUERY,
        "documents": DOCUMENTS,
        "return_documents": False,
        "raw_scores": False,
        "model": INFINITY_DEFAULT_MODEL,
    }
    async with asgi_client(reranker_engine) as (client, _):
        reranked = await client.post("/rerank", json=body)
        raw = (await client.post("/rerank", json={**body, "raw_scores": True})).json()
        tei_raw = (
            await client.post("/rerank", json={"query": QUERY, "texts": DOCUMENTS, "raw_scores": True})
        ).json()
        tei = (await client.post("/rerank", json={"query": QUERY, "texts": DOCUMENTS})).json()
    async with asgi_client(classifier_engine) as (client, _):
        classified = await client.post(
            "/classify", json={"input": texts, "model": INFINITY_DEFAULT_MODEL, "raw_scores": False}
        )
        predictions = (await client.post("/predict", json={"inputs": [[text] for text in texts]})).json()
    # /embeddings: OpenAI's shape, /embed's numbers; /models: what infinity_client's ModelInfo.from_dict needs
    assert embedded.status_code == 200, embedded.text
    assert _close([item["embedding"] for item in embedded.json()["data"]], reference)
    card = models["data"][0]
    assert card["owned_by"] == "infinity" and card["stats"] == {} and card["capabilities"] == ["embed"]
    # /rerank: Cohere's results with Infinity's usage.prompt_tokens, TEI's scores (raw_scores: the logits)
    assert reranked.status_code == 200, reranked.text
    payload = reranked.json()
    assert payload["object"] == "rerank" and set(payload["usage"]) == {"prompt_tokens", "total_tokens"}
    for results, ranks in ((payload["results"], tei), (raw["results"], tei_raw)):
        assert [result["index"] for result in results] == [rank["index"] for rank in ranks]
        assert _close([r["relevance_score"] for r in results], [rank["score"] for rank in ranks])
    assert all("document" not in result for result in payload["results"])
    # /classify: per input every label, best first, as /predict
    assert classified.status_code == 200, classified.text
    assert classified.json()["object"] == "classify"
    for labels, expected in zip(classified.json()["data"], predictions, strict=True):
        assert [item["label"] for item in labels] == [item["label"] for item in expected]
        assert _close([item["score"] for item in labels], [item["score"] for item in expected])


# ---- huggingface_hub's InferenceClient, for real ----------------------------------------------------------
@pytest.fixture(scope="module")
def classifier_server(
    classifier_engine: AsyncLLMEngine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    settings = ServerSettings(batch_dir=str(tmp_path_factory.mktemp("dropin-batches")))
    with live_uvicorn(classifier_engine, settings) as server:
        yield server


@pytest.fixture(scope="module")
def embedding_server(
    async_engine: AsyncLLMEngine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    settings = ServerSettings(batch_dir=str(tmp_path_factory.mktemp("dropin-batches")))
    with live_uvicorn(async_engine, settings) as server:
        yield server


def test_inference_client_text_classification(classifier_server: LiveServer) -> None:
    """It posts {"inputs": text, "parameters": {}} to the URL (POST /), which TEI answers as /predict."""
    import httpx
    from huggingface_hub import InferenceClient

    text = "I like you. I love you"
    result = InferenceClient(model=classifier_server.url).text_classification(text)
    expected = httpx.post(f"{classifier_server.url}/predict", json={"inputs": text}, timeout=60).json()
    top = result[0] if isinstance(result, list) else result
    assert top.label == expected[0]["label"] and abs(top.score - expected[0]["score"]) <= ATOL


def test_inference_client_sentence_similarity(embedding_server: LiveServer) -> None:
    import httpx
    from huggingface_hub import InferenceClient

    sentences = ["a cat is on the mat", "stock prices fell"]
    scores = InferenceClient(model=embedding_server.url).sentence_similarity(
        "a cat sits on the mat", sentences
    )
    body = {"inputs": {"source_sentence": "a cat sits on the mat", "sentences": sentences}}
    expected = httpx.post(f"{embedding_server.url}/similarity", json=body, timeout=60).json()
    assert _close(scores, expected)
