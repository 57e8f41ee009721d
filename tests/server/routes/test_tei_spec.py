"""Our answers on every route we share with TEI validate against TEI's own schemas.

The schemas are a copy of TEI's published OpenAPI document (``tests/server/data/tei_openapi.json``):
huggingface/text-embeddings-inference ``docs/openapi.json`` at v1.7.1 (commit 006e16b7), the newest version
of the document within reach here (v1.9.3's could not be fetched); its 12 operations are the 12 the issue
counted on v1.9.3. Paths, documented statuses and component schemas are copied as published, without
descriptions and examples. OpenAPI 3.0's ``nullable`` is read as JSON Schema's ``null`` type.

Every request below is first validated against TEI's request schema (so it is one a TEI client may send),
then sent to the in-process app: its status must be one TEI documents for that operation, a 2xx answer must
validate against TEI's response schema, an error against TEI's ``ErrorResponse`` (on ``/v1/embeddings``:
OpenAI's ``{"error": {...}}``, which OpenAI clients parse, with TEI's ``OpenAICompatErrorResponse`` fields
alongside).

Three additions to the v1.7.1 document, each stated below: v1.9.3's ``Info`` requires
``served_model_name``; TEI's later documents (the ``utoipa`` annotations of ``router/src/http/server.rs``
that generate ``docs/openapi.json``) add 400 "Batch is empty"
(``error_type`` ``Empty``) to its routes that take lists, and 413 "Batch size error" to /tokenize and
/decode (which TEI answered already), as we answer them; and ``/v1/embeddings`` is
OpenAI's door on wde, which keeps OpenAI's 400 ``invalid_request_error`` where TEI answers 413 (an over-long
input) or 424 (a model without embeddings), as OpenAI's clients expect (README's error table).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from tests.models.test_bge_m3 import save_bge_m3_heads
from tests.server.conftest import asgi_client
from tests.tiny_models import SEED, save_tiny_bert, save_tiny_xlmr
from wde import EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

pytestmark = pytest.mark.anyio

SPEC_PATH = Path(__file__).parents[1] / "data" / "tei_openapi.json"
LONG = "word " * 400  # longer than every model's max_model_len here
# What TEI's documents after v1.7.1 add: 400 "Batch is empty" (ErrorType Empty), and on /tokenize and /decode
# 413 "Batch size error" (more inputs than --max-client-batch-size, as its other routes document).
LATER_DOCUMENTED = {
    **dict.fromkeys(
        ("/embed", "/embed_all", "/embed_sparse", "/predict", "/rerank", "/similarity"), ("400",)
    ),
    **dict.fromkeys(("/tokenize", "/decode"), ("400", "413")),
}
# wde's OpenAI door: OpenAI's 400 invalid_request_error where TEI's OpenAI route answers 413 / 424.
OPENAI_DOOR = {"/v1/embeddings": "400"}


def _json_schema(node: Any) -> Any:
    """OpenAPI 3.0 -> JSON Schema: ``nullable: true`` becomes ``anyOf [.., null]``."""
    if isinstance(node, list):
        return [_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _json_schema(value) for key, value in node.items()}
    if node.pop("nullable", False):
        return {"anyOf": [node, {"type": "null"}]}
    return node


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    """TEI's v1.7.1 document with what its later ones add: the ``Empty`` error type, its 400, /tokenize's and
    /decode's 413, and Info's required ``served_model_name`` (v1.9.3)."""
    document = json.loads(SPEC_PATH.read_text(encoding="utf-8"))
    document["components"]["schemas"]["ErrorType"]["enum"].append("Empty")
    # v1.9.3's Info requires served_model_name (the name clients send; --served-model-name, else model_id)
    info = document["components"]["schemas"]["Info"]
    info["required"].append("served_model_name")
    info["properties"]["served_model_name"] = {"type": "string"}
    error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}}
    for path, statuses in LATER_DOCUMENTED.items():
        for status in statuses:
            document["paths"][path]["post"]["responses"][status] = error
    return document


def _expected_statuses(operation: dict[str, Any], path: str) -> set[str]:
    """The statuses TEI documents for an operation (and, on /v1/embeddings, OpenAI's 400)."""
    return set(operation["responses"]) | ({OPENAI_DOOR[path]} if path in OPENAI_DOOR else set())


@pytest.fixture(scope="module")
def registry(spec: dict[str, Any]) -> Registry:
    document = _json_schema({"components": spec["components"]})
    return Registry().with_resource(
        "tei", Resource.from_contents(document, default_specification=DRAFT202012)
    )


def _validate(registry: Registry, instance: Any, name: str) -> None:
    validator = jsonschema.Draft202012Validator(
        {"$ref": f"tei#/components/schemas/{name}"}, registry=registry
    )
    errors = sorted(validator.iter_errors(instance), key=str)
    assert not errors, f"{name}: " + "; ".join(error.message[:300] for error in errors[:3])


def _schema_name(reference: dict[str, Any]) -> str:
    return reference["$ref"].rsplit("/", 1)[-1]


def _operation(spec: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    return spec["paths"][path][method]


async def _check(
    client: Any, spec: dict[str, Any], registry: Registry, method: str, path: str, body: Any
) -> int:
    """Sends a TEI-valid request; returns the status after validating the answer against TEI's schemas."""
    operation = _operation(spec, method, path)
    if body is not None:
        request_schema = operation["requestBody"]["content"]["application/json"]["schema"]
        _validate(registry, body, _schema_name(request_schema))
    response = await client.request(method.upper(), path, json=body)
    status = str(response.status_code)
    documented = operation["responses"]
    assert status in _expected_statuses(operation, path), f"{path}: {status} {response.text}"
    if response.status_code >= 400:
        if path.startswith("/v1/"):  # OpenAI's shape, with TEI's fields alongside
            assert set(response.json()["error"]) >= {"message", "type", "code"}
            _validate(registry, response.json(), "OpenAICompatErrorResponse")
            if status not in documented:  # the OpenAI door's own status: OpenAI's error type
                assert response.json()["error"]["type"] == "invalid_request_error", response.text
        else:
            _validate(registry, response.json(), "ErrorResponse")
        return response.status_code
    content = documented[status].get("content", {})
    if "application/json" in content:
        _validate(registry, response.json(), _schema_name(content["application/json"]["schema"]))
    elif "text/plain" in content:
        assert response.headers["content-type"].startswith("text/plain")
    return response.status_code


# ---- models: the bundled embedding model, BGE-M3 (dense, sparse, token vectors), a reranker, a classifier
def _engine(path: Path) -> AsyncLLMEngine:
    engine = AsyncLLMEngine(EngineArgs(model=str(path), device="cpu"))
    engine.start()
    engine.wait_until_ready(timeout=120)
    return engine


@pytest.fixture(scope="module")
def m3_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsyncLLMEngine]:
    engine = _engine(
        save_bge_m3_heads(save_tiny_xlmr(tmp_path_factory.mktemp("tei-spec-m3"), seed=SEED + 96))
    )
    yield engine
    engine.shutdown(timeout=60)


@pytest.fixture(scope="module")
def reranker_engine(cross_encoder_dir: Path) -> Iterator[AsyncLLMEngine]:
    engine = _engine(cross_encoder_dir)
    yield engine
    engine.shutdown(timeout=60)


@pytest.fixture(scope="module")
def classifier_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsyncLLMEngine]:
    path = save_tiny_bert(
        tmp_path_factory.mktemp("tei-spec-cls"),
        seed=SEED + 41,
        architecture="BertForSequenceClassification",
        num_labels=3,
        id2label={0: "negative", 1: "neutral", 2: "positive"},
        label2id={"negative": 0, "neutral": 1, "positive": 2},
    )
    engine = _engine(path)
    yield engine
    engine.shutdown(timeout=60)


EMBEDDING_REQUESTS: list[tuple[str, str, Any]] = [
    ("get", "/health", None),
    ("get", "/info", None),
    ("get", "/metrics", None),
    ("post", "/embed", {"inputs": "What is Deep Learning?"}),
    ("post", "/embed", {"inputs": ["a", [101, 2023, 102]], "normalize": False, "truncate": None}),
    ("post", "/embed", {"inputs": LONG, "truncate": True, "truncation_direction": "Left"}),
    ("post", "/embed", {"inputs": LONG, "truncate": False}),  # over-long: refused, 413 (Validation)
    ("post", "/embed", {"inputs": ["x"] * 40}),  # over --max-client-batch-size: 413
    ("post", "/embed", {"inputs": "x", "prompt_name": "unknown"}),  # 422
    ("post", "/tokenize", {"inputs": ["test", "two texts"], "add_special_tokens": False}),
    ("post", "/decode", {"ids": [101, 7592, 102]}),
    ("post", "/decode", {"ids": [[101, 7592, 102], [7592]], "skip_special_tokens": False}),
    ("post", "/similarity", {"inputs": {"source_sentence": "a cat", "sentences": ["a cat", "a car"]}}),
    (
        "post",
        "/similarity",
        {
            "inputs": {"source_sentence": LONG, "sentences": [LONG + "end"]},
            "parameters": {"truncate": True, "truncation_direction": "Left"},
        },
    ),
    (
        "post",
        "/v1/embeddings",
        {"input": ["a", "b"], "model": "any", "encoding_format": "base64", "user": None},
    ),
    ("post", "/v1/embeddings", {"input": "a", "encoding_format": "float"}),
    ("post", "/embed_sparse", {"inputs": "a"}),  # a dense model: refused, 424 (Backend)
    ("post", "/similarity", {"inputs": {"source_sentence": "a", "sentences": []}}),  # 400 (Empty)
    ("post", "/tokenize", {"inputs": ["x"] * 40}),  # over --max-client-batch-size: 413
    ("post", "/tokenize", {"inputs": []}),  # 400 (Empty)
]
M3_REQUESTS: list[tuple[str, str, Any]] = [
    ("post", "/embed", {"inputs": ["a text", "another"]}),
    ("post", "/embed_sparse", {"inputs": ["a text", LONG], "truncate": True, "truncation_direction": "Left"}),
    ("post", "/embed_all", {"inputs": "a text"}),
]
RERANKER_REQUESTS: list[tuple[str, str, Any]] = [
    ("get", "/info", None),
    ("post", "/rerank", {"query": "What is Deep Learning?", "texts": ["Deep Learning is ...", "cats"]}),
    (
        "post",
        "/rerank",
        {
            "query": "q",
            "texts": [LONG, "b"],
            "raw_scores": True,
            "return_text": True,
            "truncation_direction": "Left",
        },
    ),
    ("post", "/predict", {"inputs": ["a question", "an answer"]}),
    ("post", "/embed", {"inputs": "a"}),  # not an embedding model: refused, 424 (Backend)
    ("post", "/rerank", {"query": "q", "texts": []}),  # 400 (Empty)
    ("post", "/v1/embeddings", {"input": "a"}),  # OpenAI's door: 400 invalid_request_error (TEI: 424)
]
CLASSIFIER_REQUESTS: list[tuple[str, str, Any]] = [
    ("get", "/info", None),
    ("post", "/predict", {"inputs": "I like you."}),
    ("post", "/predict", {"inputs": [["I like you."], ["a premise", "a hypothesis"]], "raw_scores": True}),
    ("post", "/predict", {"inputs": LONG, "truncate": True, "truncation_direction": "Left"}),
]


async def test_embedding_model_answers_tei_schemas(
    async_engine: AsyncLLMEngine, spec: dict[str, Any], registry: Registry
) -> None:
    async with asgi_client(async_engine, max_client_batch_size=32) as (client, _):
        statuses = [await _check(client, spec, registry, *request) for request in EMBEDDING_REQUESTS]
    assert statuses == [200] * 6 + [413, 413, 422] + [200] * 7 + [424, 400, 413, 400]


async def test_bge_m3_answers_tei_schemas_on_every_embed_route(
    m3_engine: AsyncLLMEngine, spec: dict[str, Any], registry: Registry
) -> None:
    async with asgi_client(m3_engine) as (client, _):
        statuses = [await _check(client, spec, registry, *request) for request in M3_REQUESTS]
    assert statuses == [200, 200, 200]


async def test_reranker_and_classifier_answer_tei_schemas(
    reranker_engine: AsyncLLMEngine,
    classifier_engine: AsyncLLMEngine,
    spec: dict[str, Any],
    registry: Registry,
) -> None:
    async with asgi_client(reranker_engine) as (client, _):
        reranker = [await _check(client, spec, registry, *request) for request in RERANKER_REQUESTS]
    async with asgi_client(classifier_engine) as (client, _):
        classifier = [await _check(client, spec, registry, *request) for request in CLASSIFIER_REQUESTS]
    assert reranker == [200, 200, 200, 200, 424, 400, 400] and classifier == [200] * 4


# ---- TEI's spec driving schemathesis (as the issue measured it): every TEI-valid request it generates ------
@pytest.mark.slow  # hypothesis over TEI's 12 operations on two servers: about a minute
def test_tei_spec_requests_get_documented_answers(
    async_engine: AsyncLLMEngine, reranker_engine: AsyncLLMEngine, tmp_path: Path, spec: dict[str, Any]
) -> None:
    """Schema-valid requests from TEI's own document get a status TEI documents for the operation (on
    /v1/embeddings also OpenAI's 400), never a 5xx, and every answer conforms to TEI's response schemas; on an
    embedding model and a reranker."""
    from server.settings import ServerSettings
    from tests.server.conftest import live_uvicorn
    from tests.server.routes.test_openapi_schemathesis import MAX_EXAMPLES, MAX_MESSAGE_CHARS

    failures: list[str] = []
    for name, engine in (("embedding", async_engine), ("reranker", reranker_engine)):
        settings = ServerSettings(max_client_batch_size=32, batch_dir=str(tmp_path / name))
        with live_uvicorn(engine, settings) as server:
            failures += _run_tei_spec(spec, server.url, name, MAX_EXAMPLES, MAX_MESSAGE_CHARS)
    assert not failures, "\n\n".join(failures)


def _run_tei_spec(spec: dict[str, Any], url: str, name: str, max_examples: int, max_chars: int) -> list[str]:
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from schemathesis.core.failures import FailureGroup  # a BaseExceptionGroup: no Exception
    from schemathesis.generation import GenerationMode

    schema = schemathesis.openapi.from_dict(spec)
    # Every request is schema-valid, and TEI itself refuses some (400 an empty batch, 413 too many inputs or
    # an over-long one, 422 an unknown prompt or ids outside the vocabulary, 424 a route of another model
    # kind): each operation accepts exactly the statuses TEI documents for it (on /v1/embeddings also the
    # OpenAI door's 400, which status_code_conformance would not know: the acceptance list checks statuses)
    acceptance = schema.config.checks.positive_data_acceptance
    schema.config.checks.status_code_conformance.enabled = False
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        documented = _operation(spec, operation.method, operation.path)
        acceptance.expected_statuses = sorted(_expected_statuses(documented, operation.path))

        @given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE))
        @settings(
            max_examples=max_examples, deadline=None, suppress_health_check=list(HealthCheck), database=None
        )
        def check(case: Any) -> None:
            case.call_and_validate(base_url=url)

        try:
            check()
        except (Exception, FailureGroup) as e:  # one operation's failures must not hide another's
            failures.append(f"{name}: {operation.method.upper()} {operation.path}: {str(e)[:max_chars]}")
    return failures
