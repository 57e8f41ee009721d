"""Quality columns of ``benchmarks.offline``, the same for every row: cosine of each embedding against
sentence-transformers float32 (min and mean over the timed texts), and the ranking quality of the embeddings
on a labelled rerank set (queries and candidates embedded, candidates ranked by cosine): MRR@10 and recall@1.
An int8 or bfloat16 speed-up is thus always printed beside what it costs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from benchmarks.rerank_quality import mrr_at_10, recall_at_1


@dataclass(frozen=True)
class RerankSet:
    """A rerank set with each distinct text once: ``texts`` is what a system embeds, the other fields index
    it."""

    texts: list[str]
    queries: list[int]  # per record, the index of its query in texts
    candidates: list[list[int]]  # per record, the indices of its candidates in texts
    relevant: list[int]  # per record, the position of the relevant candidate among its candidates


@dataclass(frozen=True)
class Quality:
    min_cosine: float
    mean_cosine: float
    mrr_at_10: float | None = None  # None without a rerank set
    recall_at_1: float | None = None


def rerank_set(records: Sequence[dict]) -> RerankSet:
    """``rerank.jsonl`` records (``query``, ``documents``, ``relevant``) with their texts deduplicated."""
    index: dict[str, int] = {}

    def position(text: str) -> int:
        return index.setdefault(text, len(index))

    queries = [position(record["query"]) for record in records]
    candidates = [[position(text) for text in record["documents"]] for record in records]
    return RerankSet(list(index), queries, candidates, [int(record["relevant"]) for record in records])


def normalized(embeddings: np.ndarray) -> np.ndarray:
    embeddings = np.asarray(embeddings, dtype=np.float32)
    norms = np.linalg.norm(embeddings, axis=1, keepdims=True)
    return embeddings / np.maximum(norms, np.finfo(np.float32).tiny)


def row_cosines(ours: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Cosine of each row of ``ours`` with the same row of ``reference``."""
    if ours.shape != reference.shape:
        raise ValueError(f"embeddings of shape {ours.shape} against a reference of shape {reference.shape}")
    return (normalized(ours) * normalized(reference)).sum(axis=1)


def rankings(embeddings: np.ndarray, rerank: RerankSet) -> list[list[int]]:
    """Per record, its candidates' positions by descending cosine with the query (ties keep their order)."""
    unit = normalized(embeddings)
    ranked = []
    for query, candidates in zip(rerank.queries, rerank.candidates, strict=True):
        scores = unit[candidates] @ unit[query]
        ranked.append([int(i) for i in np.argsort(-scores, kind="stable")])
    return ranked


def rerank_scores(embeddings: np.ndarray, rerank: RerankSet) -> tuple[float, float]:
    """(MRR@10, recall@1) of the cosine ranking that ``embeddings`` (one per ``rerank.texts``) give."""
    if len(embeddings) != len(rerank.texts):
        raise ValueError(f"{len(embeddings)} embeddings for {len(rerank.texts)} rerank texts")
    ranked = rankings(embeddings, rerank)
    return mrr_at_10(ranked, rerank.relevant), recall_at_1(ranked, rerank.relevant)


def quality(
    embeddings: np.ndarray,
    reference: np.ndarray,
    rerank_embeddings: np.ndarray | None = None,
    rerank: RerankSet | None = None,
) -> Quality:
    cosines = row_cosines(embeddings, reference)
    if rerank is None or rerank_embeddings is None:
        return Quality(float(cosines.min()), float(cosines.mean()))
    mrr, recall = rerank_scores(rerank_embeddings, rerank)
    return Quality(float(cosines.min()), float(cosines.mean()), mrr, recall)


def quality_cells(value: Quality | None, with_rerank: bool) -> list[str]:
    """The table cells of one row: min cosine, mean cosine[, MRR@10, recall@1]; "—" where unknown."""
    if value is None:
        return ["—"] * (4 if with_rerank else 2)
    cells = [f"{value.min_cosine:.6f}", f"{value.mean_cosine:.6f}"]
    if with_rerank:
        cells += [
            "—" if value.mrr_at_10 is None else f"{value.mrr_at_10:.4f}",
            "—" if value.recall_at_1 is None else f"{value.recall_at_1:.4f}",
        ]
    return cells
