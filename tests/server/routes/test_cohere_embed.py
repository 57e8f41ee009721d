"""Cohere's embed API, ``POST /v2/embed`` and ``POST /v1/embed``.

The cohere SDK unmodified (``ClientV2.embed``, ``Client.embed``) against a real ``wde serve`` of the
bundled model with no flag: every type present, the floats equal sentence-transformers' (cosine >= 0.99999),
int8 / uint8 its quantize_embeddings with the bundled calibration set (within one bucket), a text's int8
codes the same alone and in a batch of 96, the set named in /info and the log. Against the bundled model
with saved prompts and a calibration file: the floats equal ``LLM.encode`` of the same model with the prompt
the input type names, every other encoding equals wde's own (``/v1/embeddings``' and ``/embed``'s
``precision``), the file's ranges, not the bundled set's. In process: Cohere's fields as wde's options
(truncate START / END, output_dimension, max_tokens, inputs), v1's two shapes, int8 equal on every door,
bad bodies and a cross-encoder answered with Cohere's ``{"id", "message"}`` and 400 naming the field, and
the routes in /openapi.json.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from server.doors import Door, door_of
from server.routes.cohere_embed import side_and_prompt
from tests.server.conftest import asgi_client
from tests.server.serve_process import ServeProcess, serve_process
from wde import LLM, EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.entrypoints.output_precision import Calibration

TIMEOUT = 60.0
TEXTS = ["What is Debian?", "A free operating system.", "a", "anti-virus toolkit for mail servers"]
PROMPTS = {"query": "query: ", "document": "passage: ", "Classification": "classify this: "}
# over max_model_len (256): its start and its end differ, so cutting one or the other shows
LONG = "Debian packages " + "and more words " * 120 + "the very end"
MIN_COSINE = 0.99999
WORDS = [
    *("debian", "package", "kernel", "server", "mail", "virus", "file", "carver", "toolkit", "network"),
    *("printer", "driver", "font", "editor", "shell", "archive", "compiler", "library", "python", "daemon"),
    *("cache", "proxy", "backup", "screen", "audio", "video", "image", "music", "game"),
]


def embeddings(outputs: list[Any]) -> np.ndarray:
    return np.stack([output.embedding for output in outputs])


def min_cosine(got: Any, expected: np.ndarray) -> float:
    a, b = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    return float(((a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))).min())


# ---- the cohere SDK against `wde serve` with no flag: the bundled calibration set -------------------------
# 96 texts of 3 to 19 words; BATCH[ONE] is also sent alone
BATCH = [" ".join(WORDS[(i * 5 + j * 11) % len(WORDS)] for j in range(3 + i % 17)) for i in range(96)]
ONE = 40
SDK_TYPES = ["float", "int8", "uint8", "binary"]


@pytest.fixture(scope="module")
def plain_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """``wde serve`` with no flag: the bundled model, int8 / uint8 ranges of the bundled set."""
    with serve_process(tmp_path_factory.mktemp("cohere-plain")) as server:
        server.wait_healthy(TIMEOUT)
        yield server


@pytest.fixture(scope="module")
def st_reference(default_model_path: str) -> tuple[np.ndarray, np.ndarray]:
    """sentence-transformers on the bundled model: (TEXTS' embeddings, the bundled set's embeddings)."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(default_model_path, device="cpu")
    return model.encode(TEXTS), model.encode(Calibration.bundled().texts)


def _check_every_type(embeddings: Any, st_reference: tuple[np.ndarray, np.ndarray]) -> None:
    """Each type present and shaped; the floats sentence-transformers'; int8 / uint8 its quantize_embeddings
    with the bundled set as calibration (within one bucket); binary the packed signs."""
    from sentence_transformers.util.quantization import quantize_embeddings

    floats, calibration = st_reference
    assert min_cosine(embeddings.float_, floats) >= MIN_COSINE
    for name, dtype in (("int8", np.int8), ("uint8", np.uint8)):
        got = np.asarray(getattr(embeddings, name))
        assert got.shape == (len(TEXTS), 384), name
        assert np.iinfo(dtype).min <= got.min() and got.max() <= np.iinfo(dtype).max, name
        expected = quantize_embeddings(floats, precision=name, calibration_embeddings=calibration)
        assert int(np.abs(got - expected.astype(np.int16)).max()) <= 1, name
    binary = np.asarray(embeddings.binary)
    assert binary.shape == (len(TEXTS), 384 // 8)
    signs = np.packbits(np.asarray(embeddings.float_) > 0, axis=-1).astype(np.int16) - 128
    assert np.array_equal(binary, signs)


def test_client_v2_every_type_without_flags(
    plain_server: ServeProcess, st_reference: tuple[np.ndarray, np.ndarray]
) -> None:
    import cohere

    client = cohere.ClientV2(base_url=plain_server.url, api_key="x", timeout=TIMEOUT)
    response = client.embed(
        texts=TEXTS, model="embed-v4.0", input_type="search_document", embedding_types=SDK_TYPES
    )
    _check_every_type(response.embeddings, st_reference)
    # the codes of a text do not depend on the batch it came in
    alone = client.embed(
        texts=[BATCH[ONE]], model="embed-v4.0", input_type="search_document", embedding_types=["int8"]
    )
    batch = client.embed(
        texts=BATCH, model="embed-v4.0", input_type="search_document", embedding_types=["int8"]
    )
    assert len(batch.embeddings.int8) == 96 and batch.embeddings.int8[ONE] == alone.embeddings.int8[0]


def test_client_v1_every_type_without_flags(
    plain_server: ServeProcess, st_reference: tuple[np.ndarray, np.ndarray]
) -> None:
    import cohere

    client = cohere.Client(base_url=plain_server.url, api_key="x", timeout=TIMEOUT)
    response = client.embed(texts=TEXTS, model="embed-english-v3.0", embedding_types=SDK_TYPES)
    assert response.response_type == "embeddings_by_type"
    _check_every_type(response.embeddings, st_reference)
    alone = client.embed(texts=[BATCH[ONE]], input_type="search_query", embedding_types=["int8", "uint8"])
    batch = client.embed(texts=BATCH, input_type="search_query", embedding_types=["int8", "uint8"])
    assert batch.embeddings.int8[ONE] == alone.embeddings.int8[0]
    assert batch.embeddings.uint8[ONE] == alone.embeddings.uint8[0]


def test_the_bundled_set_is_named_in_info_and_the_log(plain_server: ServeProcess) -> None:
    info = httpx.get(f"{plain_server.url}/info", timeout=TIMEOUT).json()
    assert info["calibration"] == {"source": "bundled", "num_texts": len(Calibration.bundled().texts)}
    log = plain_server.log()
    assert (
        "int8 / uint8 ranges: 300 texts of the bundled set (wde/calibration) embedded for 1 option set" in log
    )


def test_a_calibration_file_overrides_the_bundled_set(
    plain_server: ServeProcess, cohere_server: ServeProcess
) -> None:
    info = httpx.get(f"{cohere_server.url}/info", timeout=TIMEOUT).json()
    assert (
        info["calibration"]["source"].endswith("calibration.txt") and info["calibration"]["num_texts"] == 96
    )
    # the same floats (the prompted model has no default prompt), other ranges: other codes
    plain, with_file = (
        _own(server.url, "/embed", {"inputs": TEXTS}) for server in (plain_server, cohere_server)
    )
    assert min_cosine(plain, np.asarray(with_file)) >= MIN_COSINE
    body = {"inputs": TEXTS, "precision": "int8"}
    assert _own(plain_server.url, "/embed", body) != _own(cohere_server.url, "/embed", body)


# ---- the cohere SDK against `wde serve` of a prompted model with a calibration file ------------------------
@pytest.fixture(scope="module")
def prompted_model(tmp_path_factory: pytest.TempPathFactory, default_model_path: str) -> Path:
    """The bundled model with saved prompts, as sentence-transformers writes them."""
    path = tmp_path_factory.mktemp("cohere-prompted")
    for item in Path(default_model_path).iterdir():
        if item.name != "config_sentence_transformers.json":
            (path / item.name).symlink_to(item)
    (path / "config_sentence_transformers.json").write_text(json.dumps({"prompts": PROMPTS}))
    return path


@pytest.fixture(scope="module")
def cohere_server(tmp_path_factory: pytest.TempPathFactory, prompted_model: Path) -> Iterator[ServeProcess]:
    tmp_path = tmp_path_factory.mktemp("cohere-serve")
    calibration = tmp_path / "calibration.txt"
    texts = [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(4 + i % 9)) for i in range(96)]
    calibration.write_text("\n".join(texts) + "\n")
    args = (str(prompted_model), "--calibration-file", str(calibration), "--no-access-log")
    with serve_process(tmp_path, *args) as server:
        server.wait_healthy(TIMEOUT)
        yield server


@pytest.fixture(scope="module")
def prompted_llm(prompted_model: Path) -> LLM:
    return LLM(str(prompted_model))


def _own(url: str, path: str, body: dict[str, Any]) -> Any:
    response = httpx.post(f"{url}{path}", json=body, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    return response.json()


def test_client_v2_embeds_floats_and_int8_as_wde(cohere_server: ServeProcess, prompted_llm: LLM) -> None:
    import cohere

    client = cohere.ClientV2(base_url=cohere_server.url, api_key="x", timeout=TIMEOUT)
    response = client.embed(
        model="embed-v4.0", texts=TEXTS, input_type="search_document", embedding_types=["float", "int8"]
    )
    # the floats: LLM.encode with the model's document prompt (and not without it)
    expected = prompted_llm.encode(TEXTS, input_type="document")
    assert min_cosine(response.embeddings.float_, embeddings(expected)) >= MIN_COSINE
    assert min_cosine(response.embeddings.float_, embeddings(prompted_llm.encode(TEXTS))) < 0.9999
    # int8: wde's own encoding of the same texts (/v1/embeddings' precision with the same side)
    own = _own(
        cohere_server.url,
        "/v1/embeddings",
        {"input": TEXTS, "input_type": "document", "precision": "int8", "encoding_format": "float"},
    )
    assert response.embeddings.int8 == [item["embedding"] for item in own["data"]]
    assert response.embeddings.uint8 is None and response.texts == TEXTS
    assert response.meta.api_version.version == "2"
    assert response.meta.billed_units.input_tokens == sum(output.num_tokens for output in expected)


def test_client_v2_every_embedding_type(cohere_server: ServeProcess, prompted_llm: LLM) -> None:
    import cohere

    client = cohere.ClientV2(base_url=cohere_server.url, api_key="x", timeout=TIMEOUT)
    types = ["float", "int8", "uint8", "binary", "ubinary", "base64"]
    response = client.embed(model="m", texts=TEXTS, input_type="classification", embedding_types=types)
    # "classification" picks the model's prompt "Classification" (case aside)
    expected = prompted_llm.encode(TEXTS, prompt_name="Classification")
    assert min_cosine(response.embeddings.float_, embeddings(expected)) >= MIN_COSINE
    for precision in ("int8", "uint8", "binary", "ubinary"):
        body = {"inputs": TEXTS, "prompt_name": "Classification", "precision": precision}
        assert getattr(response.embeddings, precision) == _own(cohere_server.url, "/embed", body), precision
    decoded = [np.frombuffer(base64.b64decode(item), dtype="<f4") for item in response.embeddings.base64]
    assert np.array_equal(np.stack(decoded), np.asarray(response.embeddings.float_, dtype=np.float32))


def test_client_v1_embeds_floats_or_by_type(cohere_server: ServeProcess, prompted_llm: LLM) -> None:
    import cohere

    client = cohere.Client(base_url=cohere_server.url, api_key="x", timeout=TIMEOUT)
    response = client.embed(texts=TEXTS, input_type="search_query")
    assert response.response_type == "embeddings_floats"
    expected = prompted_llm.encode(TEXTS, input_type="query")
    assert min_cosine(response.embeddings, embeddings(expected)) >= MIN_COSINE
    assert response.meta.api_version.version == "1"
    by_type = client.embed(texts=TEXTS, embedding_types=["ubinary", "float"])  # no input_type: optional in v1
    assert by_type.response_type == "embeddings_by_type"
    assert min_cosine(by_type.embeddings.float_, embeddings(prompted_llm.encode(TEXTS))) >= MIN_COSINE
    own = _own(cohere_server.url, "/embed", {"inputs": TEXTS, "precision": "ubinary"})
    assert by_type.embeddings.ubinary == own


# ---- Cohere's fields as wde's options (in process) -------------------------------------------------------
async def _post(engine: AsyncLLMEngine, path: str, body: dict[str, Any], **settings: Any) -> httpx.Response:
    async with asgi_client(engine, **settings) as (client, _):
        return await client.post(path, json=body)


def _floats(response: httpx.Response) -> list[list[float]]:
    assert response.status_code == 200, response.text
    return response.json()["embeddings"]["float"]


@pytest.mark.anyio
async def test_v2_truncate_dimension_max_tokens_and_inputs(
    async_engine: AsyncLLMEngine, default_llm: LLM
) -> None:
    base = {"model": "embed-v4.0", "input_type": "search_document"}
    # truncate END cuts the end (as wde's default), START the start (TEI's truncation_direction left)
    end = _floats(await _post(async_engine, "/v2/embed", {**base, "texts": [LONG], "truncate": "END"}))
    start = _floats(await _post(async_engine, "/v2/embed", {**base, "texts": [LONG], "truncate": "START"}))
    assert min_cosine(end, embeddings(default_llm.encode([LONG]))) >= MIN_COSINE
    left = default_llm.encode([LONG], truncation_direction="left")
    assert min_cosine(start, embeddings(left)) >= MIN_COSINE and min_cosine(start, np.asarray(end)) < 0.999
    # output_dimension: Matryoshka's first dimensions, renormalized
    short = _floats(await _post(async_engine, "/v2/embed", {**base, "texts": TEXTS, "output_dimension": 128}))
    assert min_cosine(short, embeddings(default_llm.encode(TEXTS, dimensions=128))) >= MIN_COSINE
    # max_tokens: each input cut to that many tokens (special tokens included)
    cut = await _post(async_engine, "/v2/embed", {**base, "texts": TEXTS, "max_tokens": 4})
    expected = default_llm.encode(TEXTS, truncate=True, max_input_tokens=4)
    assert min_cosine(_floats(cut), embeddings(expected)) >= MIN_COSINE
    assert cut.json()["meta"]["billed_units"]["input_tokens"] == sum(output.num_tokens for output in expected)
    # inputs of text items: each input's items embedded as one text
    items = [{"content": [{"type": "text", "text": "What is"}, {"type": "text", "text": "Debian?"}]}]
    fused = await _post(async_engine, "/v2/embed", {**base, "inputs": items})
    assert fused.json()["texts"] == ["What is\nDebian?"]
    assert min_cosine(_floats(fused), embeddings(default_llm.encode(["What is\nDebian?"]))) >= MIN_COSINE


@pytest.mark.anyio
async def test_v1_answers_floats_without_embedding_types(async_engine: AsyncLLMEngine) -> None:
    plain = await _post(async_engine, "/v1/embed", {"texts": TEXTS})
    assert plain.status_code == 200, plain.text
    payload = plain.json()
    assert set(payload) == {"id", "embeddings", "texts", "meta", "response_type"}
    assert payload["response_type"] == "embeddings_floats" and len(payload["embeddings"]) == len(TEXTS)
    by_type = (await _post(async_engine, "/v1/embed", {"texts": TEXTS, "embedding_types": ["binary"]})).json()
    assert by_type["response_type"] == "embeddings_by_type" and set(by_type["embeddings"]) == {"binary"}
    own = await _post(async_engine, "/embed", {"inputs": TEXTS, "precision": "binary"})
    assert by_type["embeddings"]["binary"] == own.json()
    assert by_type["meta"]["api_version"] == {"version": "1"}


@pytest.mark.anyio
async def test_int8_is_the_same_on_every_door(async_engine: AsyncLLMEngine) -> None:
    """Requests with no option share one set of ranges (the bundled set's), whatever the door spells."""
    v2 = await _post(async_engine, "/v2/embed", {**V2, "texts": TEXTS, "embedding_types": ["uint8", "int8"]})
    v1 = await _post(async_engine, "/v1/embed", {"texts": TEXTS, "embedding_types": ["int8"]})
    tei = await _post(async_engine, "/embed", {"inputs": TEXTS, "precision": "int8"})
    openai = await _post(async_engine, "/v1/embeddings", {"input": TEXTS, "precision": "int8"})
    int8 = v2.json()["embeddings"]["int8"]
    assert v1.json()["embeddings"]["int8"] == tei.json() == int8
    assert [item["embedding"] for item in openai.json()["data"]] == int8
    uint8 = np.asarray(v2.json()["embeddings"]["uint8"])
    assert np.array_equal(uint8 - 128, np.asarray(int8))  # one set of buckets, shifted


def test_input_type_as_side_and_prompt() -> None:
    assert side_and_prompt("search_query", {}) == ("query", None)
    assert side_and_prompt("search_document", {"document": "d: "}) == ("document", None)  # the engine's pick
    assert side_and_prompt("clustering", {"Clustering": "c: "}) == (None, "Clustering")
    assert side_and_prompt("classification", {"query": "q: "}) == (None, None)
    assert side_and_prompt("search_query", {"search_query": "s: ", "query": "q: "}) == (
        "query",
        "search_query",
    )
    assert side_and_prompt(None, PROMPTS) == (None, None)


# ---- refusals: Cohere's shape, 400 naming the field --------------------------------------------------------
V2 = {"input_type": "search_query", "texts": ["hello"]}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("path", "body", "needle"),
    [
        ("/v2/embed", {"texts": ["hello"]}, "input_type: Field required"),
        ("/v2/embed", {**V2, "input_type": "image"}, "input_type"),
        ("/v2/embed", {**V2, "embedding_types": ["float16"]}, "embedding_types[0]"),
        ("/v2/embed", {**V2, "texts": "hello"}, "texts: Input should be a valid list"),
        ("/v1/embed", {"texts": "hello"}, "texts: Input should be a valid list"),
        ("/v1/embed", {"texts": []}, "texts: List should have at least 1 item"),
        ("/v2/embed", {"input_type": "search_query"}, "texts: send texts"),
        ("/v2/embed", {**V2, "images": ["data:image/png;base64,AA=="]}, "images: wde embeds text"),
        ("/v2/embed", {**V2, "truncate": "MIDDLE"}, "truncate"),
        ("/v2/embed", {**V2, "texts": [LONG], "truncate": "NONE"}, "send truncate END or START"),
        ("/v2/embed", {**V2, "max_tokens": 8, "truncate": "NONE"}, "max_tokens"),
        ("/v2/embed", {**V2, "output_dimension": 999}, "output_dimension (999)"),
        ("/v2/embed", {**V2, "output_dimension": 0}, "output_dimension"),
        (
            "/v2/embed",
            {"input_type": "search_query", "inputs": [{"content": [{"type": "image_url", "image_url": {}}]}]},
            "inputs[0].content[0].type",
        ),
    ],
)
async def test_bad_bodies_answer_cohere_400_naming_the_field(
    async_engine: AsyncLLMEngine, path: str, body: dict[str, Any], needle: str
) -> None:
    response = await _post(async_engine, path, body)
    assert response.status_code == 400, response.text
    payload = response.json()
    assert set(payload) == {"id", "message"} and needle in payload["message"], payload


@pytest.mark.anyio
async def test_too_many_texts_and_unreadable_bodies(async_engine: AsyncLLMEngine) -> None:
    many = await _post(async_engine, "/v2/embed", {**V2, "texts": TEXTS}, max_client_batch_size=2)
    assert many.status_code == 400 and "--max-client-batch-size (2)" in many.json()["message"], many.text
    inputs = [{"content": [{"type": "text", "text": text}]} for text in TEXTS]
    body = {"input_type": "search_query", "inputs": inputs}
    too_many = await _post(async_engine, "/v2/embed", body, max_client_batch_size=2)
    assert too_many.status_code == 400 and too_many.json()["message"].startswith("inputs has 4 items")
    async with asgi_client(async_engine) as (client, _):
        broken = await client.post(
            "/v1/embed", content=b'{"texts": [', headers={"content-type": "application/json"}
        )
        wrong_method = await client.get("/v2/embed")
    assert broken.status_code == 400 and "not valid JSON" in broken.json()["message"], broken.text
    assert wrong_method.status_code == 405 and "use POST" in wrong_method.json()["message"]
    assert door_of("/v2/embed") is door_of("/v1/embed") is Door.COHERE
    assert door_of("/v2/rerank") is Door.OPENAI  # Cohere's rerank routes are Jina's / vLLM's too


@pytest.fixture(scope="module")
def cross_encoder_engine(cross_encoder_dir: Path) -> Iterator[AsyncLLMEngine]:
    engine = AsyncLLMEngine(EngineArgs(model=str(cross_encoder_dir)))
    engine.start()
    engine.wait_until_ready(timeout=120)
    yield engine
    engine.shutdown(timeout=60)


@pytest.mark.anyio
async def test_a_cross_encoder_refuses_with_its_task(cross_encoder_engine: AsyncLLMEngine) -> None:
    for path, body in (("/v2/embed", V2), ("/v1/embed", {"texts": ["hello"]})):
        response = await _post(cross_encoder_engine, path, body)
        assert response.status_code == 400, response.text
        message = response.json()["message"]
        assert "serves task 'score'" in message and "load an embedding model for embeddings" in message
    async with asgi_client(cross_encoder_engine) as (client, _):
        paths = (await client.get("/openapi.json")).json()["paths"]
    assert "/v2/embed" not in paths and "/v1/embed" not in paths  # only the routes of its task


@pytest.mark.anyio
async def test_openapi_documents_the_routes_in_cohere_shape(async_engine: AsyncLLMEngine) -> None:
    async with asgi_client(async_engine, max_client_batch_size=64) as (client, _):
        schema = (await client.get("/openapi.json")).json()
    cohere_error = {"$ref": "#/components/schemas/CohereErrorResponse"}
    for path in ("/v2/embed", "/v1/embed"):
        responses = schema["paths"][path]["post"]["responses"]
        assert "422" not in responses  # Cohere answers invalid bodies 400
        assert responses["400"]["content"]["application/json"]["schema"] == cohere_error
    request = schema["components"]["schemas"]["CohereEmbedRequest"]
    assert "input_type" in request["required"]
    types = next(o for o in request["properties"]["embedding_types"]["anyOf"] if o.get("type") == "array")
    assert types["items"]["enum"] == ["float", "int8", "uint8", "binary", "ubinary", "base64"]
    texts = next(o for o in request["properties"]["texts"]["anyOf"] if o.get("type") == "array")
    assert texts["maxItems"] == 64
