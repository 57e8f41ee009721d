"""The same refusal answers each door's status: TEI's routes TEI's (an over-long input with truncation off 413
``Validation``, a route the model does not serve 424 ``Backend``, an empty list of inputs 400 ``Empty``), the
OpenAI-shaped ones (OpenAI's, vLLM's, Cohere's) OpenAI's 400 ``invalid_request_error`` (and 422 for an empty
list, as for other invalid input); ``/openapi.json`` documents each route's."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.exceptions import RequestValidationError

from server.doors import Door, door_of
from server.error_answers import error_kind
from tests.server.conftest import asgi_client
from wde.engine.errors import InputTooLongError, OutputNotSupportedError, TaskNotSupportedError
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

LONG = "word " * 400  # over the bundled model's max_model_len (256)


@pytest.mark.parametrize(
    ("path", "door"),
    [
        ("/embed", Door.TEI),
        ("/rerank", Door.TEI),  # TEI's path, whichever body (TEI's or Cohere's) it gets
        ("/", Door.TEI),
        ("/tokenize", Door.TEI),
        ("/v1/embeddings", Door.OPENAI),
        ("/embeddings", Door.OPENAI),
        ("/v1/rerank", Door.OPENAI),
        ("/v2/rerank", Door.OPENAI),
        ("/score", Door.OPENAI),
        ("/classify", Door.OPENAI),
        ("/pooling", Door.OPENAI),
    ],
)
def test_door_of_path(path: str, door: Door) -> None:
    assert door_of(path) is door


@pytest.mark.parametrize(
    ("error", "tei", "openai"),
    [
        (InputTooLongError("inputs[0]: too long"), (413, "Validation"), (400, "context_length_exceeded")),
        (TaskNotSupportedError("serves score"), (424, "Backend"), (400, "unsupported_task")),
        (OutputNotSupportedError("no sparse output"), (424, "Backend"), (400, "unsupported_task")),
        (ValueError("dimensions: too large"), (422, "Validation"), (422, None)),
    ],
)
def test_error_kind_by_door(error: Exception, tei: tuple[int, str], openai: tuple[int, str | None]) -> None:
    tei_kind, openai_kind = error_kind(error, "/embed"), error_kind(error, "/v1/embeddings")
    assert (tei_kind.status, tei_kind.tei_type) == tei
    assert (openai_kind.status, openai_kind.openai_code) == openai


def test_empty_inputs_are_400_on_tei_routes_only() -> None:
    empty = RequestValidationError([{"type": "too_short", "loc": ("body", "texts"), "msg": "", "input": []}])
    assert error_kind(empty, "/rerank").status == 400 and error_kind(empty, "/rerank").tei_type == "Empty"
    assert error_kind(empty, "/v1/rerank").status == 422  # OpenAI's door: a validation error
    not_empty = RequestValidationError(
        [{"type": "too_short", "loc": ("body", "query"), "msg": "", "input": []}]
    )
    assert error_kind(not_empty, "/rerank").status == 422  # not the list of inputs
    also_bad = RequestValidationError(
        [*empty.errors(), {"type": "bool_type", "loc": ("body", "truncate"), "msg": "", "input": 3}]
    )
    assert error_kind(also_bad, "/rerank").status == 422  # more than an empty list is wrong


async def _post_all(engine: AsyncLLMEngine, requests: list[tuple[str, Any]]) -> list[Any]:
    async with asgi_client(engine, max_client_batch_size=32) as (client, _):
        return [await client.post(path, json=body) for path, body in requests]


@pytest.mark.anyio
async def test_same_refusal_answers_each_doors_status(async_engine: AsyncLLMEngine) -> None:
    (
        embed,
        root,
        openai,
        unversioned,
        predict,
        classify,
        v1_classify,
        tei_rerank,
        cohere_rerank,
    ) = await _post_all(
        async_engine,
        [
            ("/embed", {"inputs": LONG, "truncate": False}),
            ("/", {"inputs": LONG, "truncate": False}),
            ("/v1/embeddings", {"input": LONG, "long_input": "error"}),
            ("/embeddings", {"input": LONG, "long_input": "error"}),
            ("/predict", {"inputs": "a"}),  # an embedding model: no classifier
            ("/classify", {"input": ["a"]}),
            ("/v1/classify", {"input": ["a"]}),
            ("/rerank", {"query": "q", "texts": [LONG], "truncate": False}),
            ("/v1/rerank", {"query": "q", "documents": [LONG], "long_input": "error"}),
        ],
    )
    # an over-long input with truncation off: TEI 413 Validation, OpenAI 400 context_length_exceeded
    for response in (embed, root, tei_rerank):
        assert response.status_code == 413, response.text
        assert response.json()["error_type"] == "Validation" and "max_model_len" in response.json()["error"]
    for response in (openai, unversioned, cohere_rerank):
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and error["code"] == "context_length_exceeded"
    assert openai.json()["code"] == 400  # TEI's OpenAICompatErrorResponse fields say the same status
    # a route the model does not serve: TEI 424 Backend, vLLM's 400 unsupported_task
    assert predict.status_code == 424 and predict.json()["error_type"] == "Backend", predict.text
    assert "serves task 'embed'" in predict.json()["error"]
    for response in (classify, v1_classify):
        assert response.status_code == 400 and response.json()["error"]["code"] == "unsupported_task"


@pytest.mark.anyio
async def test_empty_inputs_answer_tei_400_empty(async_engine: AsyncLLMEngine) -> None:
    embed, similarity, rerank, cohere_body, root, tokenize, decode, openai, cohere = await _post_all(
        async_engine,
        [
            ("/embed", {"inputs": []}),
            ("/similarity", {"inputs": {"source_sentence": "a", "sentences": []}}),
            ("/rerank", {"query": "q", "texts": []}),
            ("/rerank", {"query": "q", "documents": []}),  # TEI's path: TEI's status, whichever body
            ("/", {"input": []}),  # POST / with the /v1/embeddings body
            ("/tokenize", {"inputs": []}),
            ("/decode", {"ids": []}),
            ("/v1/embeddings", {"input": []}),
            ("/v1/rerank", {"query": "q", "documents": []}),
        ],
    )
    tei = ((embed, "inputs"), (similarity, "inputs.sentences"), (rerank, "texts"), (cohere_body, "documents"))
    for response, field in (*tei, (root, "input"), (tokenize, "inputs"), (decode, "ids")):
        assert response.status_code == 400, response.text
        assert response.json() == {
            "error": f"{field} cannot be empty; pass at least one input",
            "error_type": "Empty",
        }
    assert openai.status_code == 422 and openai.json()["error"]["param"] == "input"
    assert cohere.status_code == 422 and cohere.json()["error"]["param"] == "documents"


@pytest.mark.anyio
async def test_openapi_documents_each_doors_statuses(async_engine: AsyncLLMEngine) -> None:
    async with asgi_client(async_engine) as (client, _):
        paths = (await client.get("/openapi.json")).json()["paths"]
    embed, openai = paths["/embed"]["post"]["responses"], paths["/v1/embeddings"]["post"]["responses"]
    assert {"400", "413", "424"} <= set(embed) and "empty" in embed["400"]["description"]
    assert "too long" in embed["413"]["description"] and "too long" not in embed["400"]["description"]
    assert "424" not in openai and "too long" in openai["400"]["description"]
    tokenize = paths["/tokenize"]["post"]["responses"]  # runs no model: no 424
    assert "424" not in tokenize and "empty" in tokenize["400"]["description"]
