"""benchmarks.quality on toy embeddings: cosine against a reference, the rerank set's deduplication, the
cosine ranking and its MRR@10 / recall@1, and the table cells."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.quality import (
    Quality,
    quality,
    quality_cells,
    rankings,
    rerank_scores,
    rerank_set,
    row_cosines,
)

RECORDS = [
    {"query": "q1", "documents": ["a", "b", "c"], "relevant": 1},
    {"query": "q2", "documents": ["c", "a", "d"], "relevant": 2},
]
# unit vectors on a circle: q1 is nearest b then a then c; q2 is nearest a then c then d
ANGLES = {"q1": 0.0, "a": 0.5, "b": 0.1, "c": 1.5, "q2": 3.0, "d": 0.0}


def embeddings_for(texts: list[str]) -> np.ndarray:
    angles = np.array([ANGLES[t] for t in texts])
    return np.stack([np.cos(angles), np.sin(angles)], axis=1) * 3.0  # any norm: cosine only


def test_rerank_set_embeds_each_distinct_text_once() -> None:
    rerank = rerank_set(RECORDS)
    assert rerank.texts == ["q1", "q2", "a", "b", "c", "d"]
    assert rerank.queries == [0, 1]
    assert rerank.candidates == [[2, 3, 4], [4, 2, 5]]
    assert rerank.relevant == [1, 2]


def test_rankings_and_scores_follow_the_cosine() -> None:
    rerank = rerank_set(RECORDS)
    embeddings = embeddings_for(rerank.texts)
    assert rankings(embeddings, rerank) == [[1, 0, 2], [0, 1, 2]]
    mrr, recall = rerank_scores(embeddings, rerank)
    assert mrr == pytest.approx((1.0 + 1.0 / 3.0) / 2)  # the relevant one first, then third
    assert recall == pytest.approx(0.5)


def test_rerank_scores_refuse_embeddings_of_other_texts() -> None:
    with pytest.raises(ValueError, match="rerank texts"):
        rerank_scores(np.ones((2, 2)), rerank_set(RECORDS))


def test_cosines_against_the_reference() -> None:
    reference = np.array([[1.0, 0.0], [0.0, 2.0]])
    ours = np.array([[2.0, 0.0], [1.0, 1.0]])
    np.testing.assert_allclose(row_cosines(ours, reference), [1.0, np.sqrt(0.5)], rtol=1e-6)
    value = quality(ours, reference)
    assert value.min_cosine == pytest.approx(np.sqrt(0.5), rel=1e-6)
    assert value.mean_cosine == pytest.approx((1 + np.sqrt(0.5)) / 2, rel=1e-6)
    assert value.mrr_at_10 is None
    with pytest.raises(ValueError, match="shape"):
        row_cosines(ours[:1], reference)


def test_quality_cells() -> None:
    assert quality_cells(Quality(0.5, 0.75, 0.25, 0.0), with_rerank=True) == [
        "0.500000", "0.750000", "0.2500", "0.0000"
    ]  # fmt: skip
    assert quality_cells(Quality(1.0, 1.0), with_rerank=False) == ["1.000000", "1.000000"]
    assert quality_cells(None, with_rerank=True) == ["—"] * 4
