"""Every route through httpx.ASGITransport over the session engine: numbers, shapes, errors, limits."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from server.app import create_app
from server.settings import ServerSettings
from tests.server.conftest import LONG_TEXT, TEXTS, TOLERANCE, asgi_client, max_abs_diff, reference, wait_for
from wde import EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

pytestmark = pytest.mark.anyio
MODEL = "sentence-transformers/all-MiniLM-L6-v2"


# ---- TEI /embed ------------------------------------------------------------------------------------
async def test_embed_equals_llm_encode(async_engine: AsyncLLMEngine, default_llm) -> None:
    async with asgi_client(async_engine) as (client, _):
        response = await client.post("/embed", json={"inputs": TEXTS})
        single = await client.post("/embed", json={"inputs": "hello world"})
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    assert max_abs_diff(response.json(), reference(default_llm, TEXTS)) <= TOLERANCE
    assert np.asarray(single.json()).shape == (1, 384)


async def test_embed_options(async_engine: AsyncLLMEngine, default_llm) -> None:
    token_ids = async_engine.info.tokenizer.encode("hello world").ids
    async with asgi_client(async_engine) as (client, _):
        raw = await client.post("/embed", json={"inputs": TEXTS[:2], "normalize": False})
        small = await client.post("/embed", json={"inputs": TEXTS[:2], "dimensions": 64})
        ids = await client.post("/embed", json={"inputs": [token_ids, "hello world"]})
        single_ids = await client.post("/embed", json={"inputs": token_ids})
        truncated = await client.post("/embed", json={"inputs": [LONG_TEXT], "truncate": True})
    assert max_abs_diff(raw.json(), reference(default_llm, TEXTS[:2], normalize=False)) <= TOLERANCE
    assert max_abs_diff(small.json(), reference(default_llm, TEXTS[:2], dimensions=64)) <= TOLERANCE
    assert max_abs_diff(ids.json()[0], np.asarray(ids.json()[1])) <= TOLERANCE
    assert max_abs_diff(single_ids.json()[0], np.asarray(ids.json()[1])) <= TOLERANCE
    assert truncated.status_code == 200


async def test_embed_too_long_without_truncation_is_413(async_engine: AsyncLLMEngine) -> None:
    async with asgi_client(async_engine) as (client, _):
        text = await client.post("/embed", json={"inputs": ["ok", LONG_TEXT], "truncate": False})
        ids = await client.post("/embed", json={"inputs": [[101] * 300], "truncate": False})
        openai = await client.post("/v1/embeddings", json={"input": [[101] * 300, "x " * 400]})
    assert text.status_code == 413, text.text  # TEI's status for its ErrorType Validation
    assert text.json()["error_type"] == "Validation" and "inputs[1]" in text.json()["error"]
    assert "max_model_len (256)" in text.json()["error"]
    assert ids.status_code == 413 and "max_model_len" in ids.json()["error"]
    assert openai.status_code == 200  # truncation is the server default


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "inputs"),
        ({"inputs": 5}, "inputs"),
        ({"inputs": [None]}, "inputs"),
        ({"inputs": [{"prompt": "x"}]}, "inputs"),
        ({"inputs": [[101, "a"]]}, "inputs[0]"),
        ({"inputs": [[10**9]]}, "inputs[0]"),
        ({"inputs": "x", "normalize": "yes"}, "normalize"),
        ({"inputs": "x", "truncate": 1}, "truncate"),
        ({"inputs": "x", "dimensions": 0}, "dimensions"),
        ({"inputs": "x", "dimensions": 1000}, "dimensions"),
        ({"inputs": "x", "dimensions": 1.5}, "dimensions"),
        ({"inputs": "x", "prompt_name": "nope"}, "prompt_name"),
        ({"inputs": "x", "truncation_direction": "middle"}, "truncation_direction"),
        ([1, 2], "JSON object"),
    ],
)
async def test_embed_bad_input_is_422_naming_the_field(
    async_engine: AsyncLLMEngine, body, field: str
) -> None:
    async with asgi_client(async_engine) as (client, _):
        response = await client.post("/embed", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error_type"] == "Validation"
    assert field in response.json()["error"]


@pytest.mark.parametrize(
    ("content", "headers", "needle"),
    [
        (b'{"inputs": ', {"content-type": "application/json"}, "not valid JSON"),
        (b"inputs=hello", {"content-type": "application/x-www-form-urlencoded"}, "JSON object"),
        (b"", {"content-type": "application/json"}, "body is missing"),
        (b"\xff\xfe", {"content-type": "application/json"}, "JSON"),
    ],
)
async def test_malformed_bodies_are_422(async_engine: AsyncLLMEngine, content, headers, needle) -> None:
    async with asgi_client(async_engine) as (client, _):
        response = await client.post("/embed", content=content, headers=headers)
        openai = await client.post("/v1/embeddings", content=content, headers=headers)
    assert response.status_code == 422 and needle in response.json()["error"], response.text
    assert openai.status_code == 422 and needle in openai.json()["error"]["message"], openai.text


# ---- TEI /tokenize, /info, /health -----------------------------------------------------------------
async def test_tokenize_returns_tokens_with_offsets(async_engine: AsyncLLMEngine) -> None:
    text = "Hello wörld, Debian!"
    async with asgi_client(async_engine) as (client, _):
        response = await client.post("/tokenize", json={"inputs": [text, "a"]})
        plain = await client.post("/tokenize", json={"inputs": text, "add_special_tokens": False})
        bad = await client.post("/tokenize", json={"inputs": [[101]]})
    tokens = response.json()[0]
    assert tokens[0] == {"id": 101, "text": "[CLS]", "special": True, "start": None, "stop": None}
    assert tokens[-1]["special"] and tokens[-1]["text"] == "[SEP]"
    for token in tokens[1:-1]:
        assert not token["special"] and text[token["start"] : token["stop"]] == token["text"]
    assert [t["id"] for t in tokens] == async_engine.info.tokenizer.encode(text).ids
    assert len(response.json()) == 2 and plain.json()[0] == tokens[1:-1]
    assert bad.status_code == 422 and "token ids" in bad.json()["error"]


async def test_info_and_health(async_engine: AsyncLLMEngine) -> None:
    async with asgi_client(async_engine, max_client_batch_size=7) as (client, _):
        info = (await client.get("/info")).json()
        health = await client.get("/health")
    assert health.status_code == 200
    assert info["model_id"] == info["served_model_name"] == MODEL and info["model_dtype"] == "float32"
    assert info["model_type"] == {"embedding": {"pooling": "mean"}}
    assert info["model_architecture"] == "BertModel"
    assert info["max_input_length"] == 256 and info["max_batch_tokens"] == 2048
    assert info["max_client_batch_size"] == 7 and info["max_concurrent_requests"] == 512
    assert info["attention_backend"] in ("varlen_cpu", "torch_sdpa") and info["version"]  # varlen_cpu: AVX2


async def test_loading_engine_answers_503() -> None:
    engine = AsyncLLMEngine(EngineArgs())  # never started: "loading" for the server
    async with asgi_client(engine) as (client, _):
        health = await client.get("/health")
        embed = await client.post("/embed", json={"inputs": "x"})
        info = await client.get("/info")
        openai = await client.post("/v1/embeddings", json={"input": "x"})
    assert health.status_code == embed.status_code == info.status_code == openai.status_code == 503
    assert embed.json()["error_type"] == "Unhealthy" and "loading" in embed.json()["error"]
    assert "loading" in health.json()["error"]
    assert openai.json()["error"]["type"] == "server_error"
    engine.shutdown()


async def test_draining_server_answers_503(async_engine: AsyncLLMEngine) -> None:
    async with asgi_client(async_engine) as (client, state):
        state.begin_drain()
        health = await client.get("/health")
        embed = await client.post("/embed", json={"inputs": "x"})
        metrics = await client.get("/metrics")
    assert health.status_code == 503 and embed.status_code == 503
    assert embed.headers["retry-after"] == "1" and "shutting down" in embed.json()["error"]
    assert metrics.status_code == 200


# ---- OpenAI ----------------------------------------------------------------------------------------
async def test_openai_embeddings_float_and_base64(async_engine: AsyncLLMEngine, default_llm) -> None:
    expected = reference(default_llm, TEXTS)
    async with asgi_client(async_engine) as (client, _):
        floats = (await client.post("/v1/embeddings", json={"input": TEXTS, "model": MODEL})).json()
        packed = (
            await client.post(
                "/v1/embeddings", json={"input": TEXTS, "encoding_format": "base64", "user": "u"}
            )
        ).json()
    assert floats["object"] == "list" and floats["model"] == MODEL
    assert [item["index"] for item in floats["data"]] == [0, 1, 2, 3]
    assert all(item["object"] == "embedding" for item in floats["data"])
    assert max_abs_diff([item["embedding"] for item in floats["data"]], expected) <= TOLERANCE
    decoded = [np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4") for item in packed["data"]]
    assert max_abs_diff(decoded, expected) <= TOLERANCE
    num_tokens = sum(output.num_tokens for output in default_llm.encode(TEXTS))
    assert floats["usage"] == {"prompt_tokens": num_tokens, "total_tokens": num_tokens}


async def test_openai_token_inputs_and_dimensions(async_engine: AsyncLLMEngine, default_llm) -> None:
    ids = async_engine.info.tokenizer.encode("hello world").ids
    async with asgi_client(async_engine) as (client, _):
        one = (await client.post("/v1/embeddings", json={"input": ids})).json()
        many = (await client.post("/v1/embeddings", json={"input": [ids, ids]})).json()
        small = (await client.post("/v1/embeddings", json={"input": "hello world", "dimensions": 32})).json()
    expected = reference(default_llm, ["hello world"])
    assert max_abs_diff([one["data"][0]["embedding"]], expected) <= TOLERANCE
    assert len(many["data"]) == 2 and many["usage"]["prompt_tokens"] == 2 * len(ids)
    assert (
        max_abs_diff([small["data"][0]["embedding"]], reference(default_llm, ["hello world"], dimensions=32))
        <= TOLERANCE
    )


@pytest.mark.parametrize(
    ("body", "status", "param", "code"),
    [
        ({"input": []}, 422, "input", None),  # OpenAI's door: a validation error (TEI's routes: 400 Empty)
        ({"input": [[1, "a"]]}, 422, "input", None),
        ({"input": "x", "encoding_format": "int8"}, 422, "encoding_format", None),
        ({"input": "x", "dimensions": 10_000}, 422, "dimensions", None),
        ({"model": MODEL}, 422, "input", None),
    ],
)
async def test_openai_errors_have_openai_shape(
    async_engine: AsyncLLMEngine, body, status, param, code
) -> None:
    async with asgi_client(async_engine) as (client, _):
        response = await client.post("/v1/embeddings", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["param"] == param and error["code"] == code
    assert "inputs" not in error["message"]


async def test_model_names_any_by_default_strict_on_request(async_engine: AsyncLLMEngine) -> None:
    """One model is served: a client's default model name reaches it (the answer names the served model);
    --strict-model-name answers 404 as vLLM does."""
    async with asgi_client(async_engine) as (client, _):
        response = await client.post("/v1/embeddings", json={"input": "x", "model": "text-embedding-3-small"})
        rerank = await client.post(
            "/v1/rerank", json={"query": "q", "documents": ["d"], "model": "rerank-v3.5"}
        )
    assert response.status_code == 200 and response.json()["model"] == MODEL
    assert rerank.status_code == 200 and rerank.json()["model"] == MODEL
    async with asgi_client(async_engine, strict_model_name=True) as (client, _):
        for path, body in [
            ("/v1/embeddings", {"input": "x", "model": "gpt-4"}),
            ("/v1/rerank", {"query": "q", "documents": ["d"], "model": "rerank-v3.5"}),
        ]:
            response = await client.post(path, json=body)
            assert response.status_code == 404, response.text
            assert response.json()["error"]["code"] == "model_not_found"
            assert "--strict-model-name" in response.json()["error"]["message"]
        served = await client.post("/v1/embeddings", json={"input": "x", "model": MODEL})
    assert served.status_code == 200


async def test_openai_models(async_engine: AsyncLLMEngine) -> None:
    async with asgi_client(async_engine) as (client, _):
        models = (await client.get("/v1/models")).json()
        missing = await client.get("/v1/nope")
    assert models["object"] == "list" and [card["id"] for card in models["data"]] == [MODEL]
    assert models["data"][0]["object"] == "model"
    assert missing.status_code == 404 and "message" in missing.json()["error"]


# ---- limits, auth, admission -----------------------------------------------------------------------
async def test_too_many_inputs_and_too_large_bodies_are_413(async_engine: AsyncLLMEngine) -> None:
    async with asgi_client(async_engine, max_client_batch_size=2, payload_limit=1000) as (client, _):
        many = await client.post("/embed", json={"inputs": ["a", "b", "c"]})
        declared = await client.post("/embed", json={"inputs": "x" * 2000})

        async def chunks():
            yield b'{"inputs": "'
            for _ in range(10):
                yield b"x" * 200
            yield b'"}'

        streamed = await client.post(
            "/v1/embeddings", content=chunks(), headers={"content-type": "application/json"}
        )
        fits = await client.post("/embed", json={"inputs": ["a", "b"]})
    assert many.status_code == 413 and "--max-client-batch-size (2)" in many.json()["error"]
    assert declared.status_code == 413 and "--payload-limit (1000 bytes)" in declared.json()["error"]
    assert streamed.status_code == 413 and streamed.json()["error"]["code"] == "payload_too_large"
    assert fits.status_code == 200


async def test_api_key(async_engine: AsyncLLMEngine) -> None:
    async with asgi_client(async_engine, api_key="s3cret") as (client, _):
        before = http_counts((await client.get("/metrics")).text)
        missing = await client.post("/embed", json={"inputs": "x"})
        wrong = await client.post(
            "/v1/embeddings", json={"input": "x"}, headers={"authorization": "Bearer nope"}
        )
        right = await client.post("/embed", json={"inputs": "x"}, headers={"authorization": "Bearer s3cret"})
        health = await client.get("/health")
        metrics = (await client.get("/metrics")).text
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    # answered before routing, still counted under the route's template (a linked engine's apps share one
    # registry, where other tests' 401s are counted too: the count this test added)
    added = http_counts(metrics).get(("", "/embed", "401"), 0.0) - before.get(("", "/embed", "401"), 0.0)
    assert 'wde_http_requests_total{method="POST",model="",route="/embed",status="401"}' in metrics
    assert added == 1.0
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    assert right.status_code == 200 and health.status_code == 200


async def test_over_max_concurrent_requests_is_429_at_once(async_engine: AsyncLLMEngine) -> None:
    async with asgi_client(async_engine, max_concurrent_requests=1, retry_after_seconds=2) as (client, state):
        # 32 full-length inputs: the first request stays in flight while the others arrive
        slow = asyncio.create_task(client.post("/embed", json={"inputs": [LONG_TEXT] * 32}))
        await wait_for(lambda: state.num_in_flight == 1, what="the first request admitted")
        rejected = await client.post("/embed", json={"inputs": "x"})
        rejected_openai = await client.post("/v1/embeddings", json={"input": "x"})
        info = await client.get("/info")  # read-only routes are not limited
        assert (await slow).status_code == 200
        after = await client.post("/embed", json={"inputs": "x"})
    assert rejected.status_code == 429 and rejected.headers["retry-after"] == "2"
    assert rejected.json()["error_type"] == "Overloaded"
    assert (
        rejected_openai.status_code == 429
        and rejected_openai.json()["error"]["code"] == "rate_limit_exceeded"
    )
    assert info.status_code == 200 and after.status_code == 200 and state.num_in_flight == 0


async def test_cancelled_request_is_aborted_in_the_engine(async_engine: AsyncLLMEngine) -> None:
    async with asgi_client(async_engine) as (client, state):
        aborted_before = await metric_total(client, "wde_engine_aborted_requests_total")
        request = asyncio.create_task(client.post("/embed", json={"inputs": [LONG_TEXT] * 64}))
        await wait_for(lambda: async_engine.num_waiting >= 32, what="requests queued in the engine")
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
        await wait_for(lambda: async_engine.num_unfinished == 0, what="the engine to be empty")
        assert await metric_total(client, "wde_engine_aborted_requests_total") > aborted_before
        assert state.num_in_flight == 0


def http_counts(text: str) -> dict[tuple[str, str, str], float]:
    """wde_http_requests_total by (model, route, status), summed over methods (the apps of a linked engine
    share one registry: tests count what they add)."""
    counts: dict[tuple[str, str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "wde_http_requests_total":
                key = (sample.labels["model"], sample.labels["route"], sample.labels["status"])
                counts[key] = counts.get(key, 0.0) + sample.value
    return counts


async def metric_total(client: Any, sample_name: str) -> float:
    """The sum of a /metrics sample over its labels."""
    text = (await client.get("/metrics")).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == sample_name
    )


# ---- /metrics --------------------------------------------------------------------------------------
async def test_metrics_parse_and_count(async_engine: AsyncLLMEngine) -> None:
    async with asgi_client(async_engine) as (client, _):
        before = http_counts((await client.get("/metrics")).text)
        await client.post("/embed", json={"inputs": TEXTS})
        await client.post("/embed", json={"inputs": []})
        await client.get("/nothing/here")
        model = (await client.get("/v1/models")).json()["data"][0]["id"]
        response = await client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    families = {family.name: family for family in text_string_to_metric_families(response.text)}
    for name in (
        "wde_http_requests",
        "wde_http_request_duration_seconds",
        "wde_http_requests_in_flight",
        "wde_queue_depth",
        "wde_batch_size_tokens",
        "wde_batch_size_sequences",
        "wde_tokenization_duration_seconds",
        "wde_batch_inference_duration_seconds",
        "wde_request_queue_duration_seconds",
        "wde_request_inference_duration_seconds",
    ):
        assert name in families, name
    after = http_counts(response.text)
    counts = {key: value - before.get(key, 0.0) for key, value in after.items()}
    # the model label: the served name a request reached, "" for one refused before its handler ran
    assert counts[(model, "/embed", "200")] == 1 and counts[("", "/embed", "400")] == 1
    assert counts[("", "unmatched", "404")] == 1
    batch_counts = [
        s.value for s in families["wde_batch_size_sequences"].samples if s.name.endswith("_count")
    ]
    assert batch_counts and batch_counts[0] >= 1
    # the GPU time of the batches: none on CPU (tests/gpu/ checks it on a GPU)
    device_seconds = [
        s.value
        for s in families["wde_device_busy_seconds"].samples
        if s.name == "wde_device_busy_seconds_total"
    ]
    assert device_seconds == [0.0]


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="max_concurrent_requests"):
        create_app(AsyncLLMEngine(EngineArgs()), ServerSettings(max_concurrent_requests=0))


async def test_a_task_on_a_model_without_task_adapters_is_refused(async_engine: AsyncLLMEngine) -> None:
    async with asgi_client(async_engine) as (client, _):
        response = await client.post("/v1/embeddings", json={"input": "x", "task": "retrieval.query"})
    assert response.status_code == 422, response.text
    assert "this model has no task adapters" in response.json()["error"]["message"]
