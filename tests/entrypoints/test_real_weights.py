"""The bundled all-MiniLM-L6-v2 against sentence-transformers on 400 real documents (float32)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.shared_data import read_texts

pytestmark = [pytest.mark.slow, pytest.mark.shared_data]  # real weights on real data: tens of seconds

MIN_COSINE = 0.99999
MAX_ABS_DIFF = 1e-5
NUM_DOCS = 400
NUM_SINGLES = 100  # one request each: the slow way, on the first documents


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module")
def docs() -> list[str]:
    return read_texts("docs.jsonl", NUM_DOCS)


@pytest.fixture(scope="module")
def reference(docs: list[str], default_model_path: str) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(default_model_path, device="cpu")
    return model.encode(docs, batch_size=32, convert_to_numpy=True)


@pytest.fixture(scope="module")
def batched(default_llm, docs: list[str]) -> np.ndarray:
    return np.stack([out.embedding for out in default_llm.encode(docs)])


def test_matches_sentence_transformers(batched: np.ndarray, reference: np.ndarray) -> None:
    assert batched.shape == reference.shape == (NUM_DOCS, 384)
    assert batched.dtype == np.float32
    assert cosines(batched, reference).min() >= MIN_COSINE
    assert np.abs(batched - reference).max() <= MAX_ABS_DIFF


def test_one_at_a_time_equals_batched(default_llm, docs: list[str], batched: np.ndarray) -> None:
    singles = np.stack([default_llm.encode(doc)[0].embedding for doc in docs[:NUM_SINGLES]])
    assert cosines(singles, batched[:NUM_SINGLES]).min() >= MIN_COSINE
    assert np.abs(singles - batched[:NUM_SINGLES]).max() <= MAX_ABS_DIFF


def test_num_tokens_are_truncated_to_max_seq_length(default_llm, docs: list[str]) -> None:
    outputs = default_llm.encode(docs[:200])
    assert max(out.num_tokens for out in outputs) == 256  # sentence_bert_config.json max_seq_length
    assert default_llm.model_config.max_model_len == 256
