"""The load generator of ``benchmarks.server_load`` against a real uvicorn: every text is answered once, the
latencies and the generator's own CPU are recorded, and an error status is counted, not hidden."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from benchmarks.http_load import drive
from benchmarks.server_load import texts_with_words
from server.settings import ServerSettings
from tests.server.conftest import LiveServer, live_uvicorn
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

TEXTS = [f"query number {index} about debian packages" for index in range(40)]


@pytest.fixture(scope="module")
def live_server(async_engine: AsyncLLMEngine) -> Iterator[LiveServer]:
    with live_uvicorn(async_engine, ServerSettings()) as server:
        yield server


def test_drive_answers_every_text_once(live_server: LiveServer) -> None:
    result = asyncio.run(drive(live_server.url, TEXTS, concurrency=8))
    assert result.num_requests == len(TEXTS) and result.num_errors == 0
    assert len(result.latencies) == len(TEXTS) and min(result.latencies) > 0
    assert result.requests_per_s > 0 and result.client_cpu_s > 0
    assert 0 < result.percentile_ms(50) <= result.percentile_ms(99)


def test_drive_counts_error_statuses(live_server: LiveServer) -> None:
    # more inputs than --max-client-batch-size (2048) in one request is a 4xx: counted, the run goes on
    too_many = ["text"] * 2100
    result = asyncio.run(drive(live_server.url, ["fine", too_many, "also fine"], concurrency=1))
    assert result.num_requests == 3 and result.num_errors == 1


def test_texts_with_words() -> None:
    texts = ["one two three", "one two", "a b c"]
    assert texts_with_words(texts, 3) == ["one two three", "a b c"]
    assert texts_with_words(texts, None) == texts
