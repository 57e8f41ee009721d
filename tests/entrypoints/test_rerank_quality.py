"""LLM.rerank with the bundled embedding model (cosine) reproduces sentence-transformers' ranking exactly.

The full 200-query figures (MRR@10, recall@1) come from ``python -m benchmarks.rerank_quality``; the suite
checks the first NUM_QUERIES queries to stay fast.
"""

from __future__ import annotations

import pytest

from benchmarks.rerank_quality import mrr_at_10, recall_at_1, reference_rankings
from tests.shared_data import read_rerank

pytestmark = [pytest.mark.slow, pytest.mark.shared_data]  # real weights on real data: tens of seconds

NUM_QUERIES = 12


def test_cosine_rerank_equals_sentence_transformers_ranking(default_llm, default_model_path: str) -> None:
    records = read_rerank(NUM_QUERIES)
    ours = [[r.index for r in default_llm.rerank(rec["query"], rec["documents"])] for rec in records]
    reference = reference_rankings(default_model_path, records)
    assert ours == reference
    relevant = [rec["relevant"] for rec in records]
    assert mrr_at_10(ours, relevant) == mrr_at_10(reference, relevant)
    assert 0.0 <= recall_at_1(ours, relevant) <= 1.0


def test_rerank_top_n_and_documents(default_llm) -> None:
    record = read_rerank(1)[0]
    full = default_llm.rerank(record["query"], record["documents"])
    top = default_llm.rerank(record["query"], record["documents"], top_n=3, return_documents=True)
    assert [r.index for r in top] == [r.index for r in full[:3]]
    assert [r.document for r in top] == [record["documents"][r.index] for r in top]
    cosines = default_llm.score(record["query"], record["documents"])
    assert [r.score for r in full] == sorted((c.score for c in cosines), reverse=True)
