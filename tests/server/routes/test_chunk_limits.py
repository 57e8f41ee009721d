"""long_input "chunk" has the bounded cost of every input: a text over the 1,000,000-character limit is a
422 before it is tokenized (before: it ran until the client left), and a request cut into more windows than
--long-input-max-windows is a 422 naming the flag, before any window runs."""

from __future__ import annotations

import dataclasses

import pytest

from tests.server.conftest import asgi_client
from wde.engine.input_processor import MAX_INPUT_CHARS
from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.entrypoints.long_inputs import Chunker

pytestmark = pytest.mark.anyio


async def test_a_chunked_text_over_the_character_limit_is_422(async_engine: AsyncLLMEngine) -> None:
    text = "debian " * 284_000  # 1.99 MB: under --payload-limit, over the character limit
    async with asgi_client(async_engine) as (client, _):
        tei = await client.post("/embed", json={"inputs": ["a", text], "long_input": "chunk"})
        openai = await client.post("/v1/embeddings", json={"input": text, "long_input": "chunk"})
    assert tei.status_code == 422, tei.text[:300]
    assert tei.json()["error"].startswith("inputs[1]: text has 1988000 characters")
    assert f"limit of {MAX_INPUT_CHARS}" in tei.json()["error"]
    assert openai.status_code == 422 and "limit of" in openai.json()["error"]["message"], openai.text[:300]


async def test_more_windows_than_the_limit_is_422_naming_the_flag(async_engine: AsyncLLMEngine) -> None:
    limit = async_engine.info.model_config.long_input_max_windows
    texts = ["word " * 140_000] * 2  # 700,000 characters each; ~551 windows of 254 tokens each
    async with asgi_client(async_engine) as (client, _):
        response = await client.post("/embed", json={"inputs": texts, "long_input": "chunk"})
        fits = await client.post("/embed", json={"inputs": ["word " * 600], "long_input": "chunk"})
    assert response.status_code == 422, response.text[:300]
    message = response.json()["error"]
    assert f"more than the limit of {limit} (--long-input-max-windows)" in message
    assert fits.status_code == 200 and len(fits.json()) == 1


def test_documents_are_capped_too(async_engine: AsyncLLMEngine) -> None:
    info = async_engine.info
    chunker = Chunker(info.tokenizer, dataclasses.replace(info.model_config, long_input_max_windows=3))
    assert len(chunker.document_windows("query", "word " * 500, 10)) == 3  # 500 tokens: 3 windows of 246
    with pytest.raises(ValueError, match=r"4 windows .* limit of 3 \(--long-input-max-windows\)"):
        chunker.document_windows("query", "word " * 800, 10)
    with pytest.raises(ValueError, match="documents: text has 1000001 characters"):
        chunker.document_windows("query", "x" * (MAX_INPUT_CHARS + 1), 10)
