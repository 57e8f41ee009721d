"""Long inputs: ``long_input`` "truncate" (today's default), "error", and "chunk".

chunk, embeddings: a ~3,000-token document equals the documented aggregation (entrypoints/long_inputs.py) of
its windows' embeddings computed one by one (<= 1e-5), with and without overlap; its windows batch with the
short inputs of the same call. chunk, rerank: a cross-encoder scores a long document by its best window (or
the mean, or the first). Over HTTP: the request field on /embed and /rerank, and the --long-input default.
Real weights (the bundled all-MiniLM-L6-v2, max_model_len 256) on real text where it is embedded; a tiny
random cross-encoder (64 positions) for rerank.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import wde
from tests.tiny_models import SEED, save_tiny_bert, training_texts
from wde.engine.errors import InputTooLongError

ATOL = 1e-5


@pytest.fixture(scope="module")
def long_text() -> str:
    """About 3,000 tokens of real text (the shared Debian descriptions, else repeated inline sentences)."""
    corpus = training_texts()
    text, count = "", 0
    for document in corpus * 20:
        text += document + " "
        count += len(document.split())
        if count > 2_400:
            return text
    return text


def window_ids(llm: wde.LLM, text: str, overlap: int) -> list[list[int]]:
    """The documented windows, computed here on their own: the text's ids without special tokens, cut into
    max_model_len - 2 ([CLS], [SEP]) with ``overlap``, each wrapped in [CLS] ... [SEP]."""
    tokenizer = llm.engine.tokenizer.untruncated()
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    size = llm.model_config.max_model_len - 2
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    starts = range(0, max(len(ids) - overlap, 1), size - overlap)
    return [[cls_id, *ids[start : start + size], sep_id] for start in starts]


def documented_aggregation(
    llm: wde.LLM, text: str, overlap: int, dimensions: int | None = None
) -> np.ndarray:
    """sum_i n_i e_i / sum_i n_i over the windows embedded one at a time (unnormalized), then
    normalize(e[:dimensions])."""
    total, count = 0.0, 0
    for ids in window_ids(llm, text, overlap):
        output = llm.encode({"prompt_token_ids": ids}, normalize=False)[0]
        total = total + output.embedding.astype(np.float64) * len(ids)
        count += len(ids)
    vector = (total / count)[:dimensions]
    return vector / np.linalg.norm(vector)


def test_chunk_equals_the_documented_aggregation(default_llm: wde.LLM, long_text: str) -> None:
    num_tokens = len(default_llm.engine.tokenizer.untruncated().encode(long_text).ids)
    assert num_tokens >= 2_500, num_tokens
    got = default_llm.encode([long_text], long_input="chunk")[0]
    expected = documented_aggregation(default_llm, long_text, overlap=0)
    diff = float(np.abs(got.embedding - expected).max())
    print(
        f"{num_tokens} tokens, {len(window_ids(default_llm, long_text, 0))} windows: max abs diff {diff:.2e}"
    )
    assert diff <= ATOL
    assert got.num_tokens == sum(len(ids) for ids in window_ids(default_llm, long_text, 0))
    matryoshka = default_llm.encode([long_text], long_input="chunk", dimensions=64)[0].embedding
    assert float(np.abs(matryoshka - documented_aggregation(default_llm, long_text, 0, 64)).max()) <= ATOL


def test_overlap_from_the_engine(long_text: str) -> None:
    llm = wde.LLM(long_input="chunk", long_input_overlap=32)
    got = llm.encode(long_text)[0]  # chunk is this engine's default
    expected = documented_aggregation(llm, long_text, overlap=32)
    assert float(np.abs(got.embedding - expected).max()) <= ATOL
    assert len(window_ids(llm, long_text, 32)) > len(window_ids(llm, long_text, 0))


def test_short_inputs_are_unchanged_and_share_batches_with_windows(
    default_llm: wde.LLM, long_text: str
) -> None:
    shorts = ["What is Debian?", "a package manager"]
    runner = default_llm.engine.runner
    forward, batches = runner.execute_model, []

    def recorded(batch):
        batches.append(list(batch.attn_metadata.seq_lens))
        return forward(batch)

    runner.execute_model = recorded
    try:
        chunked = default_llm.encode([shorts[0], long_text, shorts[1]], long_input="chunk")
    finally:
        runner.execute_model = forward
    plain = default_llm.encode(shorts)
    for got, expected in zip([chunked[0], chunked[2]], plain, strict=True):
        assert float(np.abs(got.embedding - expected.embedding).max()) <= ATOL
    window_len = default_llm.model_config.max_model_len
    assert any(window_len in lens and min(lens) < 16 for lens in batches), batches  # windows + shorts


def test_truncate_and_error_keep_todays_behaviour(default_llm: wde.LLM, long_text: str) -> None:
    truncated = default_llm.encode(long_text, long_input="truncate")[0]
    assert np.array_equal(truncated.embedding, default_llm.encode(long_text)[0].embedding)
    assert truncated.num_tokens == default_llm.model_config.max_model_len
    with pytest.raises(ValueError, match="max_model_len"):
        default_llm.encode(long_text, long_input="error")
    with pytest.raises(ValueError, match="long_input 'split' is not one of"):
        default_llm.encode(long_text, long_input="split")
    with pytest.raises(ValueError, match="not token ids"):
        default_llm.encode({"prompt_token_ids": [101] * 300}, long_input="chunk")
    ids = default_llm.encode({"prompt_token_ids": [101, 7592, 102]}, long_input="chunk")[0].embedding
    plain = default_llm.encode({"prompt_token_ids": [101, 7592, 102]})[0].embedding
    assert float(np.abs(ids - plain).max()) <= ATOL  # one window: the usual embedding (float64 mean)


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> wde.LLM:
    path = save_tiny_bert(
        tmp_path_factory.mktemp("tiny-ce-long"),
        seed=SEED + 98,
        architecture="BertForSequenceClassification",
        num_labels=1,
    )
    return wde.LLM(str(path), device="cpu")


@pytest.mark.parametrize("how", ["max", "mean", "first"])
def test_rerank_scores_a_long_document_by_its_windows(
    cross_encoder: wde.LLM, long_text: str, how: str
) -> None:
    query = "free software for servers"
    document = long_text[:2_000]
    short = "a short document"
    results = cross_encoder.rerank(query, [short, document], long_input="chunk", chunk_score=how)
    by_index = {result.index: result.score for result in results}
    # the windows, scored one by one: the document's pieces that fit beside the query
    tokenizer = cross_encoder.engine.tokenizer.untruncated()
    overhead = len(tokenizer.encode(query, "").ids)
    size = cross_encoder.model_config.max_model_len - overhead
    offsets = tokenizer.encode(document, add_special_tokens=False).offsets
    pieces = [
        document[offsets[start][0] : offsets[min(start + size, len(offsets)) - 1][1]]
        for start in range(0, len(offsets), size)
    ]
    assert len(pieces) > 3
    scores = [output.score for output in cross_encoder.score(query, pieces)]
    expected = {"max": max(scores), "mean": float(np.mean(scores)), "first": scores[0]}[how]
    assert abs(by_index[1] - expected) <= ATOL
    assert abs(by_index[0] - cross_encoder.score(query, short)[0].score) <= ATOL
    truncated = cross_encoder.rerank(query, [document])[0].score
    assert abs(truncated - scores[0]) <= 1e-3  # truncation keeps the first window (cut a little differently)


def test_error_mode_on_rerank(cross_encoder: wde.LLM, long_text: str) -> None:
    with pytest.raises(InputTooLongError):
        cross_encoder.rerank("query", [long_text], long_input="error")


@pytest.mark.anyio
async def test_http_long_input(long_text: str) -> None:
    from tests.server.conftest import asgi_client
    from wde import EngineArgs
    from wde.entrypoints.async_llm_engine import AsyncLLMEngine

    expected = wde.LLM().encode(long_text, long_input="chunk")[0].embedding
    engine = AsyncLLMEngine(EngineArgs(long_input="chunk"))
    engine.start()
    engine.wait_until_ready(timeout=120)
    try:
        async with asgi_client(engine) as (client, _):
            default = await client.post("/embed", json={"inputs": long_text})  # the server's default: chunk
            truncated = await client.post("/embed", json={"inputs": long_text, "long_input": "truncate"})
            refused = await client.post("/v1/embeddings", json={"input": long_text, "long_input": "error"})
            rerank = await client.post(
                "/rerank", json={"query": "debian", "texts": [long_text, "x"], "long_input": "chunk"}
            )
            bad = await client.post("/rerank", json={"query": "q", "texts": ["x"], "chunk_score": "median"})
    finally:
        engine.shutdown(timeout=60)
    assert default.status_code == 200 and truncated.status_code == 200
    assert float(np.abs(np.asarray(default.json()[0]) - expected).max()) <= ATOL
    assert float(np.abs(np.asarray(truncated.json()[0]) - expected).max()) > 1e-3
    assert refused.status_code == 400 and "max_model_len" in refused.json()["error"]["message"]
    assert rerank.status_code == 200 and {rank["index"] for rank in rerank.json()} == {0, 1}
    assert bad.status_code == 422 and "chunk_score" in bad.json()["error"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_window_helper_edges() -> None:
    from wde.entrypoints.long_inputs import windows

    assert windows(list(range(5)), 4, 0) == [[0, 1, 2, 3], [4]]
    assert windows(list(range(6)), 4, 2) == [[0, 1, 2, 3], [2, 3, 4, 5]]
    assert windows([], 4, 0) == [[]]
    with pytest.raises(ValueError, match="overlap"):
        windows([1, 2], 4, 4)


def test_engine_rejects_a_bad_overlap(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="long_input_overlap"):
        wde.LLM(long_input_overlap=200)
