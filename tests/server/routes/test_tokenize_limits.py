"""/tokenize has the bounded cost of every route: the per-text character limit of ``InputProcessor`` (422
before any tokenizer work), a tokens-per-request bound (--max-tokenize-tokens, 422 naming the flag), and an
answer streamed a slice at a time that equals the per-token answer of the tokenizer."""

from __future__ import annotations

from threading import current_thread, main_thread

import pytest

import server.routes.tokenize as tokenize_route
from server.settings import ServerSettings
from tests.server.conftest import asgi_client
from wde.engine.input_processor import MAX_INPUT_CHARS
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

pytestmark = pytest.mark.anyio


async def test_a_text_over_the_character_limit_is_422(async_engine: AsyncLLMEngine) -> None:
    async with asgi_client(async_engine) as (client, _):
        response = await client.post("/tokenize", json={"inputs": ["a", "x" * (MAX_INPUT_CHARS + 1)]})
    assert response.status_code == 422, response.text[:200]
    message = response.json()["error"]
    assert message.startswith("inputs[1]:") and f"limit of {MAX_INPUT_CHARS}" in message


async def test_tokens_past_the_request_bound_are_422(
    async_engine: AsyncLLMEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    trims: list[str] = []  # the heap walks, by the thread that ran them
    monkeypatch.setattr(tokenize_route, "release_freed_memory", lambda: trims.append(current_thread().name))
    async with asgi_client(async_engine, max_tokenize_tokens=12) as (client, _):
        fits = await client.post("/tokenize", json={"inputs": ["hello world"] * 3})  # 4 tokens each
        over = await client.post("/tokenize", json={"inputs": ["hello world"] * 4})
        one_text = await client.post("/tokenize", json={"inputs": "word " * 20, "add_special_tokens": False})
        assert trims == []  # short inputs are refused on the event loop: no heap walk there
        long_text = await client.post("/tokenize", json={"inputs": "word " * 500})  # past MAX_INLINE_CHARS
    assert fits.status_code == 200 and len(fits.json()) == 3
    assert over.status_code == 422, over.text
    assert "--max-tokenize-tokens (12)" in over.json()["error"] and "inputs[3]" in over.json()["error"]
    assert one_text.status_code == 422
    assert long_text.status_code == 422 and "--max-tokenize-tokens (12)" in long_text.json()["error"]
    assert len(trims) == 1 and trims[0] != main_thread().name  # the long one's, in the threadpool


def test_the_bound_is_a_positive_setting() -> None:
    assert ServerSettings().max_tokenize_tokens >= 100_000
    with pytest.raises(ValueError, match="max_tokenize_tokens"):
        ServerSettings(max_tokenize_tokens=0).verify()


@pytest.mark.parametrize("way", ["streamed", "inline"])
async def test_the_answer_equals_the_tokenizer_across_chunks(
    way: str, async_engine: AsyncLLMEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # streamed: every input the long way (several chunks per input); inline: short inputs, one body
    monkeypatch.setattr(tokenize_route, "TOKENS_PER_CHUNK", 3)
    if way == "streamed":
        monkeypatch.setattr(tokenize_route, "MAX_INLINE_CHARS", 0)
    texts = ["Hello wörld, Debian packages are short!", "", "a b c d e f g"]
    async with asgi_client(async_engine) as (client, _):
        response = await client.post("/tokenize", json={"inputs": texts})
        plain = await client.post("/tokenize", json={"inputs": texts, "add_special_tokens": False})
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    # a streamed answer has no length up front; the inline one is one body
    assert ("content-length" in response.headers) == (way == "inline")
    tokenizer = async_engine.info.tokenizer
    for answer, special in ((response.json(), True), (plain.json(), False)):
        assert len(answer) == len(texts)
        for text, tokens in zip(texts, answer, strict=True):
            encoding = tokenizer.encode(text, add_special_tokens=special)
            expected = [
                {"id": i, "text": t, "special": True, "start": None, "stop": None}
                if mask
                else {"id": i, "text": text[s:e], "special": False, "start": s, "stop": e}
                for i, t, (s, e), mask in zip(
                    encoding.ids, encoding.tokens, encoding.offsets, encoding.special_tokens_mask, strict=True
                )
            ]
            assert tokens == expected


async def test_inline_and_streamed_answers_are_the_same_bytes(
    async_engine: AsyncLLMEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = ["Hello wörld, Debian packages are short!", "", "\u00e9t\u00e9 \U0001f600 tabs\tand  spaces"]
    answers = []
    for max_inline in (tokenize_route.MAX_INLINE_CHARS, 0):
        monkeypatch.setattr(tokenize_route, "MAX_INLINE_CHARS", max_inline)
        async with asgi_client(async_engine) as (client, _):
            for special in (True, False):
                response = await client.post(
                    "/tokenize", json={"inputs": texts, "add_special_tokens": special}
                )
                answers.append((response.status_code, response.content))
    assert answers[:2] == answers[2:]
