"""A real uvicorn on 127.0.0.1 (random free port, in a thread) over the session engine, with
--max-concurrent-requests 2: the official OpenAI SDK, bursts, hostile bodies, disconnecting clients."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from server.settings import ServerSettings
from tests.server.conftest import (
    LONG_TEXT,
    TEXTS,
    TOLERANCE,
    LiveServer,
    live_uvicorn,
    max_abs_diff,
    reference,
)
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
TIMEOUT = 60.0
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def live_server(async_engine: AsyncLLMEngine) -> Iterator[LiveServer]:
    with live_uvicorn(async_engine, ServerSettings(max_concurrent_requests=2)) as server:
        yield server


def scrape(url: str) -> dict[str, float]:
    """Samples of /metrics by sample name: unlabelled ones, and those labelled only by ``model`` summed over
    the models."""
    text = httpx.get(f"{url}/metrics", timeout=TIMEOUT).text
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if set(sample.labels) <= {"model"}:
                values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


def test_openai_sdk_float_and_base64_equal_llm_encode(live_server: LiveServer, default_llm) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{live_server.url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)
    expected = reference(default_llm, TEXTS)
    floats = client.embeddings.create(model=MODEL, input=TEXTS, encoding_format="float")
    packed = client.embeddings.create(model=MODEL, input=TEXTS, encoding_format="base64")
    default = client.embeddings.create(model=MODEL, input=TEXTS)  # the SDK asks for base64 and decodes it
    assert max_abs_diff([item.embedding for item in floats.data], expected) <= TOLERANCE
    decoded = [np.frombuffer(base64.b64decode(item.embedding), "<f4") for item in packed.data]
    assert max_abs_diff(decoded, expected) <= TOLERANCE
    assert max_abs_diff([item.embedding for item in default.data], expected) <= TOLERANCE
    assert floats.model == MODEL and floats.usage.prompt_tokens == floats.usage.total_tokens > 0
    assert [model.id for model in client.models.list()] == [MODEL]


def test_openai_sdk_sees_errors_as_exceptions(live_server: LiveServer) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)
    with pytest.raises(openai.NotFoundError) as not_found:
        client.with_options(base_url=f"{live_server.url}/v1/nope").embeddings.create(model=MODEL, input="x")
    assert not_found.value.code == "not_found"
    with pytest.raises(openai.UnprocessableEntityError) as invalid:
        client.embeddings.create(model=MODEL, input=[], encoding_format="float")
    assert invalid.value.param == "input"


def test_embed_and_metrics(live_server: LiveServer, default_llm) -> None:
    response = httpx.post(f"{live_server.url}/embed", json={"inputs": TEXTS}, timeout=TIMEOUT)
    assert response.status_code == 200
    assert np.asarray(response.json()).shape == (len(TEXTS), 384)
    assert max_abs_diff(response.json(), reference(default_llm, TEXTS)) <= TOLERANCE
    metrics = httpx.get(f"{live_server.url}/metrics", timeout=TIMEOUT)
    families = {family.name for family in text_string_to_metric_families(metrics.text)}
    assert {"wde_http_requests", "wde_queue_depth", "wde_batch_size_tokens"} <= families


def test_burst_over_the_concurrency_limit_gets_only_200_and_429(live_server: LiveServer, default_llm) -> None:
    texts = [LONG_TEXT] * 8  # a full 2048-token batch: each admitted request takes a while
    expected = reference(default_llm, texts)

    async def burst() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=60)
        async with httpx.AsyncClient(base_url=live_server.url, timeout=TIMEOUT, limits=limits) as client:
            return await asyncio.gather(*(client.post("/embed", json={"inputs": texts}) for _ in range(50)))

    responses = asyncio.run(asyncio.wait_for(burst(), TIMEOUT * 2))
    statuses = [response.status_code for response in responses]
    assert set(statuses) <= {200, 429}, statuses
    assert 200 in statuses and 429 in statuses
    for response in responses:
        if response.status_code == 200:
            assert max_abs_diff(response.json(), expected) <= TOLERANCE
        else:
            assert response.headers["retry-after"] == "1" and response.json()["error_type"] == "Overloaded"
    after = httpx.post(f"{live_server.url}/embed", json={"inputs": "still here"}, timeout=TIMEOUT)
    assert after.status_code == 200
    assert scrape(live_server.url)["wde_http_requests_in_flight"] == 0


@pytest.mark.parametrize(
    ("path", "content", "headers"),
    [
        ("/embed", b'{"inputs": ["a",', {"content-type": "application/json"}),
        ("/embed", b'{"inputs": {"a": 1}}', {"content-type": "application/json"}),
        ("/embed", b'{"inputs": []}', {"content-type": "application/json"}),
        ("/embed", b'{"inputs": "a", "normalize": "cls"}', {"content-type": "application/json"}),
        ("/embed", b'{"inputs": "a"}', {"content-type": "text/plain"}),
        ("/tokenize", b"null", {"content-type": "application/json"}),
        ("/v1/embeddings", b'{"input": [[]]}', {"content-type": "application/json"}),
        ("/v1/embeddings", b'{"input": [1.5]}', {"content-type": "application/json"}),
        ("/v1/embeddings", json.dumps({"input": ["x"] * 2100}).encode(), JSON),
        ("/embed", b"[" + b'"x",' * 100 + b'"x"]', {"content-type": "application/json"}),
    ],
)
def test_hostile_bodies_get_4xx_json_never_500(live_server: LiveServer, path, content, headers) -> None:
    response = httpx.post(f"{live_server.url}{path}", content=content, headers=headers, timeout=TIMEOUT)
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    body = response.json()
    assert "error" in body


def test_ten_megabyte_body_is_413(live_server: LiveServer) -> None:
    # Declared length over the limit: answered before the body is read (a raw socket, so the client
    # reads the answer instead of failing to push 10 MB into a closed connection).
    with socket.create_connection(("127.0.0.1", live_server.port), timeout=TIMEOUT) as sock:
        head = (
            "POST /embed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {10_000_000}\r\n\r\n"
        )
        sock.sendall(head.encode() + b'{"inputs": "' + b"x" * 65536)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    assert b" 413 " in status_line, answer[:200]
    body = json.loads(rest.partition(b"\r\n\r\n")[2])
    assert "--payload-limit" in body["error"]
    # Chunked upload without a length: counted as it arrives.
    chunks = (b"x" * 1_000_000 for _ in range(10))
    response = httpx.post(f"{live_server.url}/v1/embeddings", content=chunks, timeout=TIMEOUT)
    assert response.status_code == 413 and response.json()["error"]["code"] == "payload_too_large"


def test_client_disconnect_aborts_its_requests(live_server: LiveServer) -> None:
    before = scrape(live_server.url)
    # 256 full-length inputs: 32 forward passes of 2048 tokens, far longer than the client waits
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{live_server.url}/embed", json={"inputs": [LONG_TEXT] * 256}, timeout=httpx.Timeout(0.5))
    deadline = time.monotonic() + TIMEOUT
    while True:
        metrics = scrape(live_server.url)
        if metrics["wde_queue_depth"] == 0 and metrics["wde_engine_unfinished_requests"] == 0:
            break
        assert time.monotonic() < deadline, metrics
        time.sleep(0.05)
    assert metrics["wde_engine_aborted_requests_total"] > before["wde_engine_aborted_requests_total"]
    assert metrics["wde_http_requests_in_flight"] == 0
    after = httpx.post(f"{live_server.url}/embed", json={"inputs": "ok"}, timeout=TIMEOUT)
    assert after.status_code == 200
