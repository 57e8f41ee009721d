"""The result cache and in-batch dedupe (entrypoints/result_cache.py, result_reuse.py) through ``LLM``:
forward passes counted at the model runner, results against an engine without the cache; the cache's
memory bound over 100k distinct synthetic outputs, measured with tracemalloc."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.counted_forward import CountedForward
from wde import LLM, PoolingParams
from wde.entrypoints.result_cache import MIB, ResultCache
from wde.entrypoints.result_reuse import prompt_key
from wde.outputs import EmbeddingOutput, SparseEmbeddingOutput

TEXTS = ["What is Debian?", "A free operating system.", "a", "A pastry."]


@pytest.fixture(scope="module")
def model_with_prompts(tmp_path_factory: pytest.TempPathFactory, default_model_path: str) -> Path:
    """The bundled model with a saved prompt, as sentence-transformers writes one."""
    path = tmp_path_factory.mktemp("prompted")
    for item in Path(default_model_path).iterdir():
        (path / item.name).symlink_to(item)
    (path / "config_sentence_transformers.json").unlink()
    (path / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"query": "query: "}}))
    return path


@pytest.fixture(scope="module")
def cached(model_with_prompts: Path) -> Iterator[tuple[LLM, CountedForward]]:
    llm = LLM(str(model_with_prompts), cache_size=4)
    yield llm, CountedForward(llm.engine)


def embeddings(outputs: list[Any]) -> np.ndarray:
    return np.stack([output.embedding for output in outputs])


def test_the_same_request_twice_runs_one_forward_pass(cached, default_llm: LLM) -> None:
    llm, forward = cached
    forward.reset()
    first = llm.encode(TEXTS, dimensions=128)
    assert forward.batch_sizes == [len(TEXTS)]
    second = llm.encode(TEXTS, dimensions=128)
    assert forward.batch_sizes == [len(TEXTS)]  # no second forward pass
    np.testing.assert_array_equal(embeddings(first), embeddings(second))
    np.testing.assert_array_equal(embeddings(second), embeddings(default_llm.encode(TEXTS, dimensions=128)))
    assert all(output.metrics is None for output in second)  # answered from the cache: nothing ran
    assert [output.num_tokens for output in second] == [output.num_tokens for output in first]


@pytest.mark.parametrize(
    "options",
    [{"dimensions": 64}, {"normalize": False}, {"prompt_name": "query"}, {"truncate": False}, {}],
)
def test_what_changes_the_output_is_a_miss(cached, default_llm: LLM, options: dict[str, Any]) -> None:
    llm, forward = cached
    llm.encode(["a text about caching"], dimensions=32)  # cached under other options
    forward.reset()
    got = llm.encode(["a text about caching"], **options)
    assert forward.batch_sizes == [1]
    if "prompt_name" in options:  # the saved prompt is prepended: as the text with the prompt, uncached
        expected = default_llm.encode(["query: a text about caching"])
    else:
        expected = default_llm.encode(["a text about caching"], **options)
    np.testing.assert_allclose(embeddings(got), embeddings(expected), atol=1e-6)


def test_the_engines_defaults_spelled_out_are_the_same_entry(cached) -> None:
    llm, forward = cached
    llm.encode(["spelled out"])
    forward.reset()
    llm.encode(["spelled out"], normalize=True, truncate=True, output="dense")  # the model's defaults
    assert forward.batch_sizes == []
    llm.score("spelled out", ["another text"])  # cosine scoring embeds with the same defaults
    assert forward.batch_sizes == [1]


def test_in_batch_duplicates_are_computed_once(cached, default_llm: LLM) -> None:
    llm, forward = cached
    texts = ["dup one", "dup two", "dup one", {"prompt": "dup one"}, "dup two"]
    forward.reset()
    got = llm.encode(texts)
    assert forward.batch_sizes == [2]
    plain = ["dup one", "dup two", "dup one", "dup one", "dup two"]
    np.testing.assert_allclose(embeddings(got), embeddings(default_llm.encode(plain)), atol=1e-6)
    assert len({id(output.embedding) for output in got}) == len(texts)  # each its own array
    # token ids too, and pairs of a score request
    ids = llm.engine.tokenizer.backend.encode("dup three").ids
    forward.reset()
    llm.encode([{"prompt_token_ids": ids}, {"prompt_token_ids": list(ids)}, {"prompt_token_ids": ids[:-1]}])
    assert forward.batch_sizes == [2]


def test_outputs_are_copies_a_caller_cannot_corrupt_the_cache(cached) -> None:
    llm, _ = cached
    first = llm.encode(["mutable text", "mutable text"])
    expected = first[1].embedding.copy()
    first[0].embedding[:] = 0.0
    first[1].embedding *= 2.0
    again = llm.encode(["mutable text"])[0]
    again.embedding += 1.0
    np.testing.assert_array_equal(llm.encode(["mutable text"])[0].embedding, expected)


def test_errors_name_the_callers_positions_and_are_not_cached(cached) -> None:
    llm, _ = cached
    llm.encode(["known text"])
    num_hits = llm.result_reuse.stats().num_hits
    with pytest.raises(TypeError, match=r"inputs\[3\]"):
        llm.encode(["known text", "known text", "other", 5])
    assert llm.result_reuse.stats().num_hits == num_hits  # not looked up: the engine refused the call
    long_text = "word " * 400
    with pytest.raises(ValueError, match=r"inputs\[2\]: input has"):
        llm.encode(["known text", "known text", long_text], truncate=False)
    num_entries = len(llm.result_reuse.cache)
    with pytest.raises(ValueError, match=r"inputs\[0\]: input has"):
        llm.encode([long_text, "fresh text"], truncate=False)
    assert len(llm.result_reuse.cache) == num_entries + 1  # the text that ran, not the error


def test_the_cache_off_is_todays_engine(default_llm: LLM) -> None:
    assert default_llm.result_reuse is None
    forward = CountedForward(default_llm.engine)
    try:
        default_llm.encode(["same", "same"])
        assert forward.batch_sizes == [2]  # duplicates run as given
    finally:
        forward.uninstall()


def test_keys_tell_apart_what_the_engine_tells_apart() -> None:
    assert prompt_key("x") == prompt_key({"prompt": "x"})
    assert prompt_key(("q", "d")) != prompt_key(("d", "q"))
    assert prompt_key({"prompt_token_ids": [1, 2]}) == prompt_key({"prompt_token_ids": (1, 2)})
    assert prompt_key({"prompt_token_ids": [1, 2]}) != prompt_key(
        {"prompt_token_ids": [1, 2], "token_type_ids": [0, 0]}
    )
    for unkeyable in (
        5,
        ["x"],
        {"prompt_token_ids": [True, 2]},
        {"prompt_token_ids": [1.0]},
        {"prompt": "x", "y": 1},
    ):
        assert prompt_key(unkeyable) is None  # left to the engine's validation
    base = PoolingParams()
    assert (
        len(
            {
                base,
                PoolingParams(dimensions=64),
                PoolingParams(normalize=False),
                PoolingParams(prompt_name="q"),
            }
        )
        == 4
    )


def synthetic_output(index: int, rng: np.random.Generator) -> EmbeddingOutput | SparseEmbeddingOutput:
    if index % 10 == 0:  # a few sparse ones, of varying size
        num_active = 1 + index % 97
        indices = np.arange(num_active, dtype=np.int64)
        return SparseEmbeddingOutput(str(index), indices, np.ones(num_active, np.float32), 9)
    return EmbeddingOutput(str(index), rng.standard_normal(384).astype(np.float32), 12)


def test_memory_stays_under_the_limit_over_100k_distinct_inputs() -> None:
    max_bytes = 4 * MIB
    params_key = tuple(PoolingParams().__dict__.values())
    rng = np.random.default_rng(0)
    outputs = [synthetic_output(index, rng) for index in range(64)]
    cache = ResultCache(max_bytes)

    def put(index: int) -> None:
        key = ("model", params_key, f"distinct input number {index} " * (1 + index % 5))
        cache.put(key, outputs[index % len(outputs)])
        assert cache.num_bytes <= max_bytes

    for index in range(80_000):
        put(index)
    # the last 20k traced: by then every entry held was allocated while tracing (a full turnover), so the
    # traced memory is what the cache really holds
    tracemalloc.start()
    try:
        peak_held = 0
        for index in range(80_000, 100_000):
            put(index)
            if index % 2_000 == 1_999:
                peak_held = max(peak_held, tracemalloc.get_traced_memory()[0])
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert cache.num_evictions > 90_000 and len(cache) < 20_000  # turned over more than once while traced
    assert cache.num_bytes > 0.95 * max_bytes  # full, not just empty
    assert max(held, peak_held) <= max_bytes, (
        f"the cache holds {max(held, peak_held)} bytes, over {max_bytes}"
    )
    assert held > 0.7 * cache.num_bytes  # the accounting is the real size, not a wild overestimate
    assert ResultCache(max_bytes=1000).put("key", outputs[1]) is False  # larger than the whole cache
