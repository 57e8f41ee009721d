"""LLM / LLMEngine behaviour on the bundled model: options, bad input, executors, abort."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from wde import LLM, PoolingParams
from wde.outputs import EmbeddingOutput, ErrorOutput

TEXTS = ["hello world", "Debian package descriptions are short", "a", "x " * 600]
EXACT = 1e-6


def embeddings(outputs: list[EmbeddingOutput]) -> np.ndarray:
    return np.stack([out.embedding for out in outputs])


def test_outputs_are_float32_vectors_in_input_order(default_llm: LLM, default_model_path: str) -> None:
    from transformers import AutoTokenizer

    hf_tokenizer = AutoTokenizer.from_pretrained(default_model_path)
    expected_lens = [len(ids) for ids in hf_tokenizer(TEXTS, truncation=True, max_length=256)["input_ids"]]
    outputs = default_llm.encode(TEXTS)
    assert [out.embedding.shape for out in outputs] == [(384,)] * 4
    assert all(out.embedding.dtype == np.float32 for out in outputs)
    assert [out.num_tokens for out in outputs] == expected_lens
    assert expected_lens[-1] == 256
    assert np.allclose(np.linalg.norm(embeddings(outputs), axis=1), 1.0, atol=1e-5)


def test_normalize_false_and_matryoshka_dimensions(default_llm: LLM) -> None:
    full = default_llm.encode(TEXTS, normalize=False)
    norms = np.linalg.norm(embeddings(full), axis=1)
    assert not np.allclose(norms, 1.0)
    small = default_llm.encode(TEXTS, dimensions=64)
    expected = embeddings(full)[:, :64]
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    assert np.abs(embeddings(small) - expected).max() <= 1e-6
    raw_small = default_llm.encode(TEXTS, dimensions=64, normalize=False)
    assert np.abs(embeddings(raw_small) - embeddings(full)[:, :64]).max() <= EXACT


def test_prompt_inputs_and_token_ids_equal_plain_text(default_llm: LLM) -> None:
    plain = default_llm.encode(TEXTS[:2])
    prompts = default_llm.encode([{"prompt": TEXTS[0]}, {"prompt": TEXTS[1]}])
    ids = default_llm.engine.tokenizer.encode_batch(TEXTS[:2])
    tokens = default_llm.encode([{"prompt_token_ids": enc.token_ids} for enc in ids])
    assert np.abs(embeddings(plain) - embeddings(prompts)).max() <= EXACT
    assert np.abs(embeddings(plain) - embeddings(tokens)).max() <= EXACT


def test_batch_size_caps_sequences_per_forward(default_llm: LLM) -> None:
    expected = embeddings(default_llm.encode(TEXTS))
    assert np.abs(embeddings(default_llm.encode(TEXTS, batch_size=1)) - expected).max() <= 1e-5
    assert (
        default_llm.engine.scheduler.max_num_seqs
        == default_llm.engine.engine_config.scheduler_config.max_num_seqs
    )


@pytest.mark.parametrize(
    ("bad_input", "error", "message"),
    [
        (None, TypeError, "texts must be a str or a list"),
        ([None], TypeError, "inputs[0]: expected a str"),
        (["ok", 3], TypeError, "inputs[1]: expected a str"),
        (["ok", ["nested"]], TypeError, "nested lists are not inputs"),
        ([{"prompt": 5}], TypeError, "inputs[0].prompt: expected a str, got int"),
        ([{"text": "hi"}], TypeError, "dict with keys ['text']"),
        ([{"prompt_token_ids": [101, "7592", 102]}], TypeError, "prompt_token_ids[1]: expected an int"),
        ([{"prompt_token_ids": [101, 7592.0, 102]}], TypeError, "prompt_token_ids[1]: expected an int"),
        (
            [{"prompt_token_ids": [101, 30522]}],
            ValueError,
            "token id 30522 is outside the vocabulary [0, 30522)",
        ),
        ([{"prompt_token_ids": [-1]}], ValueError, "outside the vocabulary"),
        ([{"prompt_token_ids": []}], ValueError, "is empty"),
    ],
)
def test_bad_input_raises_and_engine_stays_usable(default_llm: LLM, bad_input, error, message) -> None:
    with pytest.raises(error) as excinfo:
        default_llm.encode(bad_input)
    assert message in str(excinfo.value)
    assert not default_llm.engine.has_unfinished_requests()
    assert default_llm.encode("still works")[0].embedding.shape == (384,)


def test_bad_options_raise(default_llm: LLM) -> None:
    with pytest.raises(ValueError, match=r"dimensions \(385\) must be between 1 and the model's hidden size"):
        default_llm.encode("hi", dimensions=385)
    with pytest.raises(ValueError, match="prompt_name 'query' is not a prompt of this model"):
        default_llm.encode("hi", prompt_name="query")
    with pytest.raises(TypeError, match="truncate must be a bool"):
        default_llm.encode("hi", truncate="yes")
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        default_llm.encode("hi", batch_size=0)


def test_too_long_without_truncation_fails_that_input_only(default_llm: LLM) -> None:
    with pytest.raises(
        ValueError, match=r"inputs\[1\]: input has \d+ tokens, more than max_model_len \(256\)"
    ):
        default_llm.encode(["fine", "word " * 300, "also fine"], truncate=False)
    assert not default_llm.engine.has_unfinished_requests()
    # Through the engine: the other requests of the same step get their embeddings.
    engine = default_llm.engine
    engine.add_requests(["a", "b", "c"], ["fine", "word " * 300, "also fine"], PoolingParams(truncate=False))
    outputs = {}
    while engine.has_unfinished_requests():
        outputs.update({out.request_id: out for out in engine.step()})
    assert isinstance(outputs["b"], ErrorOutput) and "more than max_model_len" in str(outputs["b"].error)
    assert isinstance(outputs["a"], EmbeddingOutput) and isinstance(outputs["c"], EmbeddingOutput)


def test_token_ids_too_long_without_truncation_fail_early(default_llm: LLM) -> None:
    with pytest.raises(ValueError, match=r"300 tokens is more than max_model_len \(256\)"):
        default_llm.encode([{"prompt_token_ids": [1000] * 300}], truncate=False)
    truncated = default_llm.encode([{"prompt_token_ids": [1000] * 300}])
    assert truncated[0].num_tokens == 256


def test_sync_and_async_executors_give_identical_embeddings(default_llm: LLM) -> None:
    from tests.tiny_models import training_texts

    docs = training_texts()
    sync_llm = LLM(executor="sync", max_num_batched_tokens=2048)
    async_llm = LLM(executor="async", max_num_batched_tokens=2048)
    sync_out = embeddings(sync_llm.encode(docs))
    async_out = embeddings(async_llm.encode(docs))
    assert np.array_equal(sync_out, async_out)


def test_tokenizer_threads_give_identical_embeddings_and_tokenize_each_text_once() -> None:
    """Texts tokenized ahead on the TokenizerPool's threads (while batches run) equal those tokenized on the
    engine thread (16 sequences a step: a lookahead of 32, chunks of 16 to the threads)."""
    from tests.tiny_models import training_texts

    docs = training_texts()
    inline = LLM(tokenizer_workers=0, max_num_batched_tokens=2048, max_num_seqs=16)
    threaded = LLM(tokenizer_workers=2, max_num_batched_tokens=2048, max_num_seqs=16)
    assert threaded.engine.request_processor.pool is not None and inline.engine.request_processor.pool is None
    calls = []
    encode_batch = threaded.engine.tokenizer.encode_batch
    threaded.engine.tokenizer.encode_batch = lambda texts, truncation=None: (  # type: ignore[method-assign]
        calls.append(len(texts)) or encode_batch(texts, truncation)
    )
    assert np.array_equal(embeddings(inline.encode(docs)), embeddings(threaded.encode(docs)))
    assert sum(calls) == len(docs)  # every text once
    threaded.engine.shutdown()


def test_tokenizer_processes_give_identical_embeddings_pairs_and_truncation_included(tmp_path: Path) -> None:
    """Texts tokenized in processes (ids back as arrays) equal those tokenized on the engine thread: texts,
    a cut text, and a text pair's reranking (type ids crossing as arrays)."""
    from tests.tiny_models import save_tiny_bert, training_texts

    docs = [*training_texts(), "long " * 600]
    inline = LLM(tokenizer_workers=0, max_num_batched_tokens=2048, max_num_seqs=16)
    processes = LLM(tokenizer_processes=2, max_num_batched_tokens=2048, max_num_seqs=16)
    try:
        pool = processes.engine.request_processor.pool
        assert type(pool).__name__ == "TokenizerProcesses"
        assert np.array_equal(embeddings(inline.encode(docs)), embeddings(processes.encode(docs)))
        query = "what is a fast file carver"
        inline_scores = [out.score for out in inline.score(query, docs)]
        assert [out.score for out in processes.score(query, docs)] == inline_scores
        cross = save_tiny_bert(tmp_path, seed=7, architecture="BertForSequenceClassification", num_labels=1)
        inline_cross = LLM(str(cross), tokenizer_workers=0, max_num_seqs=16)
        processes_cross = LLM(str(cross), tokenizer_processes=2, max_num_seqs=16)
        expected = [out.score for out in inline_cross.score(query, docs)]
        # the same tokens; the batches may be cut elsewhere (the processes answer later), so float32
        # sums may differ in the last bits: 1e-6, as batch against single elsewhere
        got = [out.score for out in processes_cross.score(query, docs)]
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
        processes_cross.engine.shutdown()
    finally:
        processes.engine.shutdown()


def test_engine_step_loop_and_abort(default_llm: LLM) -> None:
    engine = default_llm.engine
    engine.add_request("keep", "kept request")
    engine.add_request("drop", "aborted request")
    assert engine.abort_request("drop")
    assert not engine.abort_request("drop")
    with pytest.raises(ValueError, match="already in the engine"):
        engine.add_request("keep", "duplicate id")
    finished = []
    while engine.has_unfinished_requests():
        finished.extend(engine.step())
    assert [out.request_id for out in finished] == ["keep"]


def test_unknown_engine_argument_is_named() -> None:
    with pytest.raises(TypeError, match="unknown engine arguments \\['max_batch'\\]"):
        LLM(max_batch=3)


def test_non_local_model_path_says_what_to_do() -> None:
    # a path-like name that is not a folder (a repo id goes to the Hub: tests/models/test_hub.py)
    with pytest.raises(ValueError, match=r"not a local directory with a config\.json"):
        LLM("./no-such-model-folder")
