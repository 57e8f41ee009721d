"""Score and rerank plumbing shared by ``LLM`` and ``AsyncLLMEngine``: pairing rules (1:1, 1:N, N:N as in
vLLM), rerank input checks and ranking, and scoring with an embedding model: the cosine of dense vectors, or
the dot product (or cosine) of sparse ones, as ``SparseEncoder.similarity``, or MaxSim of token vectors, as
``MultiVectorEncoder.similarity``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tokenizers

from wde.config import ModelConfig
from wde.inputs import TextPair
from wde.outputs import EmbeddingOutput, MultiVectorOutput, RerankResult, ScoreOutput, SparseEmbeddingOutput


def _as_text_list(name: str, value: Any) -> list[str]:
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, (list, tuple)):
        raise TypeError(f"{name} must be a str or a list of str, got {type(value).__name__}")
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"{name}[{index}]: expected a str, got {type(text).__name__}")
    if not texts:
        raise ValueError(f"{name} is empty; pass at least one text")
    return list(texts)


def make_pairs(text_1: str | Sequence[str], text_2: str | Sequence[str]) -> list[TextPair]:
    """One text_1 against every text_2 (1:N), or text_1[i] with text_2[i] (N:N)."""
    texts_1 = _as_text_list("text_1", text_1)
    texts_2 = _as_text_list("text_2", text_2)
    if len(texts_1) == 1:
        return [(texts_1[0], text) for text in texts_2]
    if len(texts_1) != len(texts_2):
        raise ValueError(
            f"text_1 has {len(texts_1)} texts and text_2 has {len(texts_2)}: pass one text_1 (scored "
            "against every text_2) or as many text_1 as text_2 (scored pairwise)"
        )
    return list(zip(texts_1, texts_2, strict=True))


def rerank_pairs(query: str, documents: Sequence[str]) -> list[TextPair]:
    if not isinstance(query, str):
        raise TypeError(f"query must be a str, got {type(query).__name__}")
    return [(query, document) for document in _as_text_list("documents", documents)]


def rerank_documents(
    query: str, documents: Sequence[str], top_n: int | None, model_config: ModelConfig
) -> list[str]:
    """Check a rerank call before anything runs; returns the documents to score against ``query``."""
    pairs = rerank_pairs(query, documents)
    if top_n is not None and (isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1):
        raise ValueError(f"top_n must be a positive int or None, got {top_n!r}")
    if model_config.task == "score" and model_config.num_labels != 1:
        raise ValueError(
            f"rerank needs one relevance score per pair; this model has {model_config.num_labels} labels"
        )
    return [document for _, document in pairs]


def needs_token_cap(max_tokens_per_doc: int | None, max_model_len: int) -> bool:
    """Whether Cohere's per-document cap changes anything: a cap of max_model_len or more does not (the pair
    is cut at max_model_len keeping prefixes anyway). Raises for a cap that is not a positive int."""
    if max_tokens_per_doc is None:
        return False
    if (
        isinstance(max_tokens_per_doc, bool)
        or not isinstance(max_tokens_per_doc, int)
        or max_tokens_per_doc < 1
    ):
        raise ValueError(f"max_tokens_per_doc must be a positive int or None, got {max_tokens_per_doc!r}")
    return max_tokens_per_doc < max_model_len


def cap_document_tokens(
    tokenizer: tokenizers.Tokenizer, documents: Sequence[str], max_tokens_per_doc: int
) -> list[str]:
    """Each document cut to its first ``max_tokens_per_doc`` tokens (Cohere's per-document cap), by the
    character offsets of an untruncated tokenizer without special tokens (a tokenizer pass over every
    document: ask ``needs_token_cap`` first)."""
    encodings = tokenizer.encode_batch(list(documents), add_special_tokens=False)
    return [
        document
        if len(encoding.offsets) <= max_tokens_per_doc
        else document[: encoding.offsets[max_tokens_per_doc - 1][1]]
        for document, encoding in zip(documents, encodings, strict=True)
    ]


def rank(
    scores: Sequence[ScoreOutput], documents: Sequence[str], top_n: int | None, return_documents: bool
) -> list[RerankResult]:
    """Sort by score, highest first (ties keep document order), keep ``top_n``."""
    values = [output.score for output in scores]
    order = sorted(range(len(values)), key=lambda index: -values[index])[:top_n]
    return [
        RerankResult(index, values[index], documents[index] if return_documents else None) for index in order
    ]


@dataclass
class CosinePlan:
    """Bi-encoder scoring: embed each distinct text once, then cosine per pair."""

    texts: list[str]
    pair_rows: list[tuple[int, int]]

    @classmethod
    def from_pairs(cls, pairs: Sequence[TextPair]) -> CosinePlan:
        rows: dict[str, int] = {}
        pair_rows = [(rows.setdefault(a, len(rows)), rows.setdefault(b, len(rows))) for a, b in pairs]
        return cls(list(rows), pair_rows)

    def scores(self, embeddings: Sequence[EmbeddingOutput], request_ids: Sequence[str]) -> list[ScoreOutput]:
        matrix = np.stack([output.embedding for output in embeddings])  # [num_texts, hidden], L2-normalized
        outputs = []
        for request_id, (row_a, row_b) in zip(request_ids, self.pair_rows, strict=True):
            cosine = np.dot(matrix[row_a], matrix[row_b]).astype(np.float32).reshape(1)
            num_tokens = embeddings[row_a].num_tokens + embeddings[row_b].num_tokens
            outputs.append(ScoreOutput(request_id, cosine, num_tokens))
        return outputs

    def sparse_scores(
        self, embeddings: Sequence[SparseEmbeddingOutput], request_ids: Sequence[str], similarity: str
    ) -> list[ScoreOutput]:
        """Per pair the dot product (or cosine) of the two texts' sparse vectors."""
        outputs = []
        for request_id, (row_a, row_b) in zip(request_ids, self.pair_rows, strict=True):
            a, b = embeddings[row_a], embeddings[row_b]
            value = sparse_dot(a, b)
            if similarity == "cosine":
                norms = float(np.linalg.norm(a.values)) * float(np.linalg.norm(b.values))
                value = value / norms if norms > 0 else 0.0
            num_tokens = a.num_tokens + b.num_tokens
            outputs.append(ScoreOutput(request_id, np.array([value], dtype=np.float32), num_tokens))
        return outputs


def sparse_dot(a: SparseEmbeddingOutput, b: SparseEmbeddingOutput) -> float:
    """The dot product of two sparse vectors (token ids ascending and unique in each)."""
    _, rows_a, rows_b = np.intersect1d(a.indices, b.indices, assume_unique=True, return_indices=True)
    return float(np.dot(a.values[rows_a].astype(np.float64), b.values[rows_b].astype(np.float64)))


@dataclass
class MaxSimPlan:
    """Late-interaction scoring: each distinct text_1 encoded once as a query and each distinct text_2 once
    as a document, then MaxSim per pair."""

    queries: list[str]
    documents: list[str]
    pair_rows: list[tuple[int, int]]

    @classmethod
    def from_pairs(cls, pairs: Sequence[TextPair]) -> MaxSimPlan:
        queries: dict[str, int] = {}
        documents: dict[str, int] = {}
        pair_rows = [
            (queries.setdefault(a, len(queries)), documents.setdefault(b, len(documents))) for a, b in pairs
        ]
        return cls(list(queries), list(documents), pair_rows)

    def scores(
        self,
        queries: Sequence[MultiVectorOutput],
        documents: Sequence[MultiVectorOutput],
        request_ids: Sequence[str],
        similarity: str,
    ) -> list[ScoreOutput]:
        outputs = []
        for request_id, (row_q, row_d) in zip(request_ids, self.pair_rows, strict=True):
            query, document = queries[row_q], documents[row_d]
            value = maxsim(query.vectors, document.vectors, mean=similarity == "meanmaxsim")
            num_tokens = query.num_tokens + document.num_tokens
            outputs.append(ScoreOutput(request_id, np.array([value], dtype=np.float32), num_tokens))
        return outputs


def maxsim(query: np.ndarray, document: np.ndarray, mean: bool = False) -> float:
    """ColBERT's late interaction: for each query vector the largest dot product with a document vector,
    summed (``mean``: averaged) over the query's vectors.
    query ``[num_q, dim]``, document ``[num_d, dim]``."""
    if query.shape[0] == 0 or document.shape[0] == 0:
        return 0.0
    best = (query.astype(np.float32) @ document.astype(np.float32).T).max(axis=1)  # [num_q]
    total = float(best.astype(np.float64).sum())
    return total / query.shape[0] if mean else total
