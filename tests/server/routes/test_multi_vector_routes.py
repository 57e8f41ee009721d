"""Sparse and multi-vector output over HTTP, on a tiny BGE-M3 layout (dense + sparse + ColBERT) and a tiny
ColBERT (MultiVectorEncoder): TEI's ``POST /embed_all`` (``[[[float]]]``: each input's token vectors) and
``POST /embed_sparse``, ``/v1/embeddings`` with ``output`` (sparse ``{indices, values}``, token vectors,
several kinds as ``{kind: value}``; floats or base64) carrying the numbers of ``AsyncLLMEngine.encode``,
through the official openai SDK too; a model without a kind answers 424 on TEI's routes (400 on
/v1/embeddings) naming what it serves."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.models.test_bge_m3 import save_bge_m3_heads
from tests.models.test_colbert import save_colbert
from tests.server.conftest import asgi_client
from tests.tiny_models import SEED, save_tiny_bert, save_tiny_xlmr
from wde import EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

pytestmark = pytest.mark.anyio

TEXTS = ["Debian is a free operating system", "a", "scalpel is a fast file carver " * 10]
FP32_ATOL = 1e-6  # the same engine: the routes add nothing but JSON
ALL_KINDS = ["dense", "sparse", "multi_vector"]


def _engine(path: Path) -> AsyncLLMEngine:
    engine = AsyncLLMEngine(EngineArgs(model=str(path), device="cpu"))
    engine.start()
    engine.wait_until_ready(timeout=120)
    return engine


@pytest.fixture(scope="module")
def m3_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsyncLLMEngine]:
    path = save_bge_m3_heads(save_tiny_xlmr(tmp_path_factory.mktemp("m3-server"), seed=SEED + 96))
    engine = _engine(path)
    yield engine
    engine.shutdown(timeout=60)


@pytest.fixture(scope="module")
def colbert_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsyncLLMEngine]:
    root = tmp_path_factory.mktemp("colbert-server")
    engine = _engine(save_colbert(root / "model", save_tiny_bert(root / "hf", seed=SEED + 97)))
    yield engine
    engine.shutdown(timeout=60)


async def test_embed_all_has_tei_shape_and_engine_numbers(m3_engine: AsyncLLMEngine) -> None:
    expected = await m3_engine.encode(TEXTS, output="multi_vector")
    async with asgi_client(m3_engine) as (client, _):
        response = await client.post("/embed_all", json={"inputs": TEXTS})
    assert response.status_code == 200, response.text
    body = response.json()
    assert len(body) == len(TEXTS)
    for vectors, output in zip(body, expected, strict=True):
        array = np.asarray(vectors, dtype=np.float32)  # [num_vectors, size]
        assert array.shape == output.vectors.shape and array.shape[0] == output.num_tokens - 1  # no [CLS]
        np.testing.assert_allclose(array, output.vectors, atol=FP32_ATOL)


async def test_v1_embeddings_kinds_and_formats(m3_engine: AsyncLLMEngine) -> None:
    expected = await m3_engine.encode(TEXTS, output=tuple(ALL_KINDS))
    async with asgi_client(m3_engine) as (client, _):
        floats = await client.post("/v1/embeddings", json={"input": TEXTS, "output": ALL_KINDS})
        packed = await client.post(
            "/v1/embeddings", json={"input": TEXTS, "output": ALL_KINDS, "encoding_format": "base64"}
        )
        sparse = await client.post("/v1/embeddings", json={"input": TEXTS, "output": "sparse"})
        dense = await client.post("/v1/embeddings", json={"input": TEXTS})  # OpenAI's body: dense
    for response in (floats, packed, sparse, dense):
        assert response.status_code == 200, response.text
    for index, output in enumerate(expected):
        item = floats.json()["data"][index]["embedding"]
        assert set(item) == set(ALL_KINDS)
        np.testing.assert_allclose(item["dense"], output.dense.embedding, atol=FP32_ATOL)
        assert item["sparse"]["indices"] == output.sparse.indices.tolist()
        np.testing.assert_allclose(item["sparse"]["values"], output.sparse.values, atol=FP32_ATOL)
        np.testing.assert_allclose(item["multi_vector"], output.multi_vector.vectors, atol=FP32_ATOL)
        assert sparse.json()["data"][index]["embedding"] == item["sparse"]
        np.testing.assert_allclose(dense.json()["data"][index]["embedding"], item["dense"], atol=FP32_ATOL)
        # base64: the same numbers bit for bit
        item64 = packed.json()["data"][index]["embedding"]
        assert np.array_equal(_unpack(item64["dense"], "<f4"), output.dense.embedding)
        assert np.array_equal(_unpack(item64["sparse"]["indices"], "<i4"), output.sparse.indices)
        assert np.array_equal(_unpack(item64["sparse"]["values"], "<f4"), output.sparse.values)
        vectors = _unpack(item64["multi_vector"]["data"], "<f4").reshape(item64["multi_vector"]["shape"])
        assert np.array_equal(vectors, output.multi_vector.vectors)


def _unpack(text: str, dtype: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=dtype)


async def test_openai_sdk_with_extra_body(m3_engine: AsyncLLMEngine) -> None:
    import httpx
    from openai import AsyncOpenAI

    from server.app import create_app
    from server.settings import ServerSettings

    app = create_app(m3_engine, ServerSettings())
    http_client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://wde.test/v1")
    client = AsyncOpenAI(api_key="unused", base_url="http://wde.test/v1", http_client=http_client)
    try:
        response = await client.embeddings.create(
            model="m3", input=TEXTS[:2], extra_body={"output": "sparse", "max_active_dims": 4}
        )
    finally:
        await http_client.aclose()
        app.state.wde.detach()
    # the SDK asks for base64 unless told otherwise: a sparse embedding's fields come back packed
    for item in response.data:
        indices, values = _unpack(item.embedding["indices"], "<i4"), _unpack(item.embedding["values"], "<f4")
        assert 1 <= len(indices) == len(values) <= 4 and (values > 0).all()


async def test_colbert_root_route_and_query_side(colbert_engine: AsyncLLMEngine) -> None:
    queries = await colbert_engine.encode(TEXTS, output="multi_vector", input_type="query")
    async with asgi_client(colbert_engine) as (client, _):
        root = await client.post("/", json={"inputs": TEXTS, "input_type": "query"})
        all_route = await client.post("/embed_all", json={"inputs": TEXTS, "input_type": "query"})
        embed = await client.post("/embed", json={"inputs": TEXTS})
        paths = (await client.get("/openapi.json")).json()["paths"]
        info = (await client.get("/info")).json()
    assert root.status_code == 200 and root.json() == all_route.json()  # TEI's POST /: the model's kind
    for vectors, output in zip(all_route.json(), queries, strict=True):
        np.testing.assert_allclose(vectors, output.vectors, atol=FP32_ATOL)
    assert embed.status_code == 424 and "serves: multi_vector" in embed.json()["error"]  # TEI's Backend
    assert {"/embed_all", "/v1/embeddings", "/rerank"} <= set(paths) and "/embed" not in paths
    assert info["outputs"] == ["multi_vector"]


async def test_dense_only_model_answers_424_naming_its_kinds(async_engine: AsyncLLMEngine) -> None:
    async with asgi_client(async_engine) as (client, _):
        embed_all = await client.post("/embed_all", json={"inputs": ["a text"]})
        openai = await client.post("/v1/embeddings", json={"input": "a text", "output": ["dense", "sparse"]})
        paths = (await client.get("/openapi.json")).json()["paths"]
    assert embed_all.status_code == 424, embed_all.text  # TEI's route: TEI's status
    assert embed_all.json()["error_type"] == "Backend"
    assert "does not produce multi_vector output" in embed_all.json()["error"]
    assert "serves: dense" in embed_all.json()["error"]
    assert openai.status_code == 400 and "does not produce sparse output" in openai.json()["error"]["message"]
    assert "/embed_all" not in paths and "/embed_sparse" not in paths


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"inputs": []}, 400, "inputs"),  # TEI's "Empty"
        ({"inputs": "x", "input_type": "passage"}, 422, "input_type"),
        ({"inputs": "x", "truncation_direction": "middle"}, 422, "truncation_direction"),
        ({"inputs": ["a", "b", "c"]}, 413, "--max-client-batch-size"),
        ({"inputs": ["word " * 100], "truncate": False}, 413, "max_model_len"),  # TEI's "Validation"
    ],
)
async def test_embed_all_errors_as_embed(
    m3_engine: AsyncLLMEngine, body: dict, status: int, field: str
) -> None:
    async with asgi_client(m3_engine, max_client_batch_size=2) as (client, _):
        response = await client.post("/embed_all", json=body)
    assert response.status_code == status, response.text
    assert field in response.json()["error"] and "error_type" in response.json()


async def test_v1_embeddings_bad_output(m3_engine: AsyncLLMEngine) -> None:
    async with asgi_client(m3_engine) as (client, _):
        unknown = await client.post("/v1/embeddings", json={"input": "x", "output": "colbert"})
        twice = await client.post("/v1/embeddings", json={"input": "x", "output": ["dense", "dense"]})
        dims = await client.post("/v1/embeddings", json={"input": "x", "output": "sparse", "dimensions": 4})
    assert unknown.status_code == 422 and "output" in unknown.json()["error"]["message"]
    assert twice.status_code == 422 and "distinct" in twice.json()["error"]["message"]
    assert dims.status_code == 422 and "dimensions" in dims.json()["error"]["message"]


def test_token_vectors_are_streamed_an_input_at_a_time(m3_engine: AsyncLLMEngine) -> None:
    """Over a real uvicorn, the body of /embed_all (and of /v1/embeddings with token vectors) goes out
    chunked (a chunk per input), so its JSON never exists whole; the chunks join into the same JSON."""
    import httpx
    import orjson

    from server.settings import ServerSettings
    from tests.server.conftest import live_uvicorn

    with live_uvicorn(m3_engine, ServerSettings()) as server, httpx.Client(base_url=server.url) as client:
        with client.stream("POST", "/embed_all", json={"inputs": TEXTS}) as response:
            chunks = list(response.iter_raw())
            encoding = response.headers.get("transfer-encoding")
        whole = client.post("/v1/embeddings", json={"input": TEXTS, "output": "multi_vector"})
    assert response.status_code == 200 and encoding == "chunked"  # a whole body would have a length
    body = orjson.loads(b"".join(chunks))
    assert [len(vectors) for vectors in body] == [len(item["embedding"]) for item in whole.json()["data"]]
    assert whole.json()["usage"]["prompt_tokens"] > 0 and whole.json()["object"] == "list"
