"""TEI's ``POST /embed_sparse`` over a tiny SPLADE model (BertForMaskedLM + SpladePooling saved by
sentence-transformers): TEI's answer shape ``[[{"index", "value"}, ...], ...]`` with the numbers of
``LLM.encode(output="sparse")``, limits and error shapes as /embed, ``/info`` and ``/openapi.json`` saying
what the model serves; a dense-only model asked for sparse output (and a SPLADE model asked for dense)
answers TEI's 424 (on /v1/embeddings OpenAI's 400) naming the outputs it serves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.models.test_splade import save_splade
from tests.server.conftest import asgi_client
from tests.tiny_models import SEED, save_tiny_bert
from wde import EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

pytestmark = pytest.mark.anyio

TEXTS = ["Debian is a free operating system", "a", "", "scalpel is a fast file carver " * 10]
FP32_ATOL = 1e-6  # the same engine, the same batch shapes: the route adds nothing but JSON


@pytest.fixture(scope="module")
def splade_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsyncLLMEngine]:
    root = tmp_path_factory.mktemp("splade-server")
    hf_dir = save_tiny_bert(root / "hf", seed=SEED + 70, architecture="BertForMaskedLM")
    path: Path = save_splade(root / "model", hf_dir)
    engine = AsyncLLMEngine(EngineArgs(model=str(path), device="cpu"))
    engine.start()
    engine.wait_until_ready(timeout=120)
    yield engine
    engine.shutdown(timeout=60)


def _dense(pairs: list[dict], vocab_size: int) -> np.ndarray:
    vector = np.zeros(vocab_size, dtype=np.float32)
    for pair in pairs:
        vector[pair["index"]] = pair["value"]
    return vector


async def test_embed_sparse_has_tei_shape_and_engine_numbers(splade_engine: AsyncLLMEngine) -> None:
    expected = await splade_engine.encode(TEXTS, output="sparse")
    async with asgi_client(splade_engine) as (client, _):
        response = await client.post("/embed_sparse", json={"inputs": TEXTS})
        single = await client.post("/embed_sparse", json={"inputs": TEXTS[0], "truncate": True})
        ids = splade_engine.info.tokenizer.encode(TEXTS[0]).ids
        by_ids = await client.post("/embed_sparse", json={"inputs": ids})
    assert response.status_code == 200, response.text
    body = response.json()
    assert len(body) == len(TEXTS)
    for pairs, output in zip(body, expected, strict=True):
        assert all(set(pair) == {"index", "value"} and isinstance(pair["index"], int) for pair in pairs)
        indices = [pair["index"] for pair in pairs]
        assert indices == sorted(indices) and all(pair["value"] > 0 for pair in pairs)
        assert indices == output.indices.tolist()
        np.testing.assert_allclose([pair["value"] for pair in pairs], output.values, atol=FP32_ATOL)
    assert single.status_code == 200 and len(single.json()) == 1
    vocab_size = splade_engine.info.model_config.vocab_size
    for other in (single, by_ids):  # alone, or as token ids: other batch shapes, the same weights
        np.testing.assert_allclose(
            _dense(other.json()[0], vocab_size), _dense(body[0], vocab_size), atol=1e-5
        )


async def test_async_engine_decodes_tokens(splade_engine: AsyncLLMEngine) -> None:
    (output,) = await splade_engine.encode(["Debian"], output="sparse", decode=True)
    tokenizer = splade_engine.info.tokenizer
    assert output.tokens == [tokenizer.id_to_token(index) for index in output.indices.tolist()]


async def test_max_active_dims_and_root_route(splade_engine: AsyncLLMEngine) -> None:
    async with asgi_client(splade_engine) as (client, _):
        pruned = await client.post("/embed_sparse", json={"inputs": TEXTS[:2], "max_active_dims": 5})
        full = await client.post("/embed_sparse", json={"inputs": TEXTS[:2]})
        root = await client.post("/", json={"inputs": TEXTS[:2]})
    assert pruned.status_code == 200 and [len(pairs) for pairs in pruned.json()] == [5, 5]
    for kept, pairs in zip(pruned.json(), full.json(), strict=True):
        top = sorted(pairs, key=lambda pair: -pair["value"])[:5]
        assert sorted(pair["index"] for pair in kept) == sorted(pair["index"] for pair in top)
    assert root.status_code == 200 and root.json() == full.json()  # TEI's POST / of a SPLADE model


async def test_info_and_openapi_say_sparse(splade_engine: AsyncLLMEngine) -> None:
    async with asgi_client(splade_engine) as (client, _):
        info = (await client.get("/info")).json()
        paths = (await client.get("/openapi.json")).json()["paths"]
    assert info["model_type"] == {"embedding": {"pooling": "splade"}}
    assert info["outputs"] == ["sparse"] and info["model_architecture"] == "BertForMaskedLM"
    assert {"/embed_sparse", "/rerank", "/v1/rerank"} <= set(paths)  # rerank: sparse dot products
    assert "/v1/embeddings" in paths  # {"output": "sparse"}
    assert not {"/embed", "/embed_all", "/predict"} & set(paths)


async def test_dense_routes_of_a_splade_model_answer_424_on_tei_400_on_openai(
    splade_engine: AsyncLLMEngine,
) -> None:
    async with asgi_client(splade_engine) as (client, _):
        embed = await client.post("/embed", json={"inputs": "x"})
        openai = await client.post("/v1/embeddings", json={"input": "x"})
    assert embed.status_code == 424, embed.text  # TEI's status for a route the model does not serve
    assert embed.json()["error_type"] == "Backend"
    assert "serves: sparse" in embed.json()["error"] and "/embed_sparse" in embed.json()["error"]
    assert openai.status_code == 400 and openai.json()["error"]["code"] == "unsupported_task"
    assert "serves: sparse" in openai.json()["error"]["message"]


async def test_rerank_by_sparse_dot_product(splade_engine: AsyncLLMEngine) -> None:
    query, documents = "Debian operating system", TEXTS
    vectors = await splade_engine.encode([query, *documents], output="sparse")
    vocab_size = splade_engine.info.model_config.vocab_size
    dense = [np.zeros(vocab_size, dtype=np.float64) for _ in vectors]
    for row, output in zip(dense, vectors, strict=True):
        row[output.indices] = output.values
    expected = [float(np.dot(dense[0], row)) for row in dense[1:]]
    async with asgi_client(splade_engine) as (client, _):
        response = await client.post("/rerank", json={"query": query, "texts": documents})
    assert response.status_code == 200, response.text
    ranks = response.json()
    assert [rank["index"] for rank in ranks] == sorted(range(len(documents)), key=lambda i: -expected[i])
    np.testing.assert_allclose(
        [rank["score"] for rank in ranks], sorted(expected, reverse=True), rtol=1e-5, atol=1e-4
    )


async def test_dense_only_model_asked_for_sparse_answers_424(async_engine: AsyncLLMEngine) -> None:
    async with asgi_client(async_engine) as (client, _):
        response = await client.post("/embed_sparse", json={"inputs": ["a text"]})
        paths = (await client.get("/openapi.json")).json()["paths"]
        info = (await client.get("/info")).json()
    assert response.status_code == 424, response.text  # TEI's answer: not a SPLADE model
    assert response.json()["error_type"] == "Backend"
    assert "does not produce sparse output" in response.json()["error"]
    assert "serves: dense" in response.json()["error"] and "POST /embed" in response.json()["error"]
    assert "/embed_sparse" not in paths and info["outputs"] == ["dense"]


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"inputs": []}, 400, "inputs"),  # TEI's "Empty"
        ({"inputs": "x", "max_active_dims": 0}, 422, "max_active_dims"),
        ({"inputs": "x", "truncation_direction": "middle"}, 422, "truncation_direction"),
        ({"inputs": "x", "prompt_name": "nope"}, 422, "prompt_name"),
        ({"inputs": ["a", "b", "c"]}, 413, "--max-client-batch-size"),
        ({"inputs": ["word " * 100], "truncate": False}, 413, "max_model_len"),  # TEI's "Validation"
    ],
)
async def test_errors_as_embed(splade_engine: AsyncLLMEngine, body: dict, status: int, field: str) -> None:
    async with asgi_client(splade_engine, max_client_batch_size=2) as (client, _):
        response = await client.post("/embed_sparse", json=body)
    assert response.status_code == status, response.text
    assert field in response.json()["error"] and "error_type" in response.json()


@pytest.mark.slow  # hypothesis over every route of the SPLADE server: ~30 s
def test_splade_server_agrees_with_its_schema(splade_engine: AsyncLLMEngine, tmp_path: Path) -> None:
    from server.settings import ServerSettings
    from tests.server.conftest import live_uvicorn
    from tests.server.routes.test_openapi_schemathesis import run_schemathesis

    settings = ServerSettings(max_client_batch_size=64, batch_dir=str(tmp_path / "batches"))
    with live_uvicorn(splade_engine, settings) as server:
        failures = run_schemathesis(server.url)
    assert not failures, "\n\n".join(failures)
