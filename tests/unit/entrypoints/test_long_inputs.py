"""Long inputs without a model: windows with overlap, text windows with the special tokens around each,
document windows at token boundaries, the token-weighted mean of window embeddings (the module's formula),
window scores combined by max / mean / first, and the mode each request resolves to."""

from __future__ import annotations

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from tests.unit.engine.conftest import make_model_config
from wde.entrypoints.long_inputs import (
    Chunker,
    aggregate_embeddings,
    aggregate_scores,
    long_input_mode,
    windows,
)
from wde.inputs import PoolingParams
from wde.outputs import EmbeddingOutput, ScoreOutput


def _word_tokenizer() -> Tokenizer:
    """One token per word (ids by first letter), [CLS] text [SEP] with special tokens."""
    vocabulary = {
        "[UNK]": 0,
        "[CLS]": 1,
        "[SEP]": 2,
        **{chr(c): c - 90 for c in range(ord("a"), ord("z") + 1)},
    }
    tokenizer = Tokenizer(models.WordLevel(vocabulary, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", 1), ("[SEP]", 2)]
    )
    return tokenizer


def test_windows_cover_every_token_with_the_overlap() -> None:
    assert windows(range(10), 4, 0) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert windows(range(10), 4, 1) == [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]]
    assert windows(range(3), 4, 2) == [[0, 1, 2]]
    assert windows([], 4, 0) == [[]]
    with pytest.raises(ValueError, match="overlap between 0 and 3"):
        windows(range(5), 4, 4)


def test_text_windows_carry_the_special_tokens_and_their_owner() -> None:
    config = make_model_config(max_model_len=5)  # 3 tokens of text per window
    chunker = Chunker(_word_tokenizer(), config)
    prompts, owners = chunker.text_windows(["a b c d e", "f"], prompt="")
    assert [p["prompt_token_ids"] for p in prompts] == [[1, 7, 8, 9, 2], [1, 10, 11, 2], [1, 12, 2]]
    assert owners == [0, 0, 1]


def test_document_windows_fit_beside_the_query() -> None:
    chunker = Chunker(_word_tokenizer(), make_model_config(max_model_len=6))
    assert chunker.document_windows("q", "a b c d e", pair_overhead=4) == ["a b", "c d", "e"]
    assert chunker.document_windows("q", "a", pair_overhead=4) == ["a"]
    with pytest.raises(ValueError, match="the query alone takes 6 of the 6 tokens"):
        chunker.document_windows("q", "a b", pair_overhead=6)


def test_the_embedding_is_the_token_weighted_mean_of_its_windows() -> None:
    e1, e2, e3 = (
        np.array([1.0, 0.0], np.float32),
        np.array([0.0, 1.0], np.float32),
        np.array([3.0, 4.0], np.float32),
    )
    outputs = [EmbeddingOutput("w0", e1, 3), EmbeddingOutput("w1", e2, 1), EmbeddingOutput("w2", e3, 2)]
    first, second = aggregate_embeddings(outputs, [0, 0, 1], 2, dimensions=None, normalize=False)
    np.testing.assert_allclose(first.embedding, (3 * e1 + 1 * e2) / 4, rtol=1e-7)
    assert first.num_tokens == 4 and first.request_id == "w0"
    np.testing.assert_allclose(second.embedding, e3)
    (normalized,) = aggregate_embeddings(outputs[2:], [0], 1, dimensions=1, normalize=True)
    np.testing.assert_allclose(normalized.embedding, [1.0])


@pytest.mark.parametrize(("how", "expected"), [("max", 0.9), ("mean", 0.5), ("first", 0.2)])
def test_window_scores_are_combined(how: str, expected: float) -> None:
    outputs = [ScoreOutput(str(i), np.array([s], np.float32), 2) for i, s in enumerate([0.2, 0.9, 0.4])]
    (combined,) = aggregate_scores(outputs, [0, 0, 0], 1, how)
    assert combined.score == pytest.approx(expected) and combined.num_tokens == 6


def test_the_mode_a_request_resolves_to() -> None:
    config = make_model_config()
    assert long_input_mode(PoolingParams(), config) == "truncate"
    assert long_input_mode(PoolingParams(truncate=False), config) == "error"
    assert long_input_mode(PoolingParams(long_input="chunk"), config) == "chunk"
