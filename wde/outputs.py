"""What the engine hands back: one output per request."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# (start, end) of the batched tokenizer call that tokenized one input, monotonic seconds
TokenizeSpan = tuple[float, float]


@dataclass
class RequestMetrics:
    """Monotonic timestamps (seconds) of one request's life in the engine."""

    arrival_time: float
    scheduled_time: float | None
    finished_time: float
    tokenize_span: TokenizeSpan | None = None  # its tokenizer call; None: token-id input, or failed before

    @property
    def queue_seconds(self) -> float:
        """Waiting before the batch that ran it was formed (includes its tokenization)."""
        return (self.scheduled_time or self.finished_time) - self.arrival_time

    @property
    def inference_seconds(self) -> float:
        return self.finished_time - (self.scheduled_time or self.finished_time)


@dataclass
class EmbeddingOutput:
    request_id: str
    embedding: np.ndarray  # [hidden_size] or [dimensions], float32
    num_tokens: int
    metrics: RequestMetrics | None = None

    def __repr__(self) -> str:
        return (
            f"EmbeddingOutput(request_id={self.request_id!r}, num_tokens={self.num_tokens}, "
            f"embedding=<float32[{self.embedding.shape[0]}]>)"
        )


@dataclass
class SparseVector:
    """One text's non-zero vocabulary weights (SPLADE), in ascending token-id order: what the sparse pooler
    hands the engine for each text."""

    indices: np.ndarray  # [num_active] int64 token ids
    values: np.ndarray  # [num_active] float32 weights, > 0


@dataclass
class SparseEmbeddingOutput:
    """A text's sparse embedding: the non-zero (token id, weight) pairs, ascending by token id.
    ``tokens`` (the token strings of ``indices``) is filled when decoding was asked for."""

    request_id: str
    indices: np.ndarray  # [num_active] int64
    values: np.ndarray  # [num_active] float32
    num_tokens: int
    metrics: RequestMetrics | None = None
    tokens: list[str] | None = None

    def to_dict(self) -> dict[int, float]:
        """``{token_id: weight}``."""
        return dict(zip(self.indices.tolist(), self.values.tolist(), strict=True))

    def decoded(self) -> list[tuple[str, float]]:
        """(token, weight) pairs by descending weight, as ``SparseEncoder.decode``; needs ``tokens``
        (``LLM.encode(..., decode=True)``)."""
        if self.tokens is None:
            raise ValueError("this output has no tokens; encode with decode=True")
        order = np.argsort(-self.values, kind="stable")
        return [(self.tokens[i], float(self.values[i])) for i in order]

    def __repr__(self) -> str:
        return (
            f"SparseEmbeddingOutput(request_id={self.request_id!r}, num_tokens={self.num_tokens}, "
            f"num_active={self.indices.shape[0]})"
        )


@dataclass
class TokenVectors:
    """One text's scored token vectors: what the multi-vector pooler hands the engine for each text."""

    vectors: np.ndarray  # [num_vectors, vector_size] float32


@dataclass
class MultiVectorOutput:
    """A text's token vectors (late interaction: ColBERT, BGE-M3's ColBERT vectors), one row per scored
    token, L2-normalized; compare two texts with MaxSim (``wde.entrypoints.scoring.maxsim``)."""

    request_id: str
    vectors: np.ndarray  # [num_vectors, vector_size] float32
    num_tokens: int
    metrics: RequestMetrics | None = None

    def __repr__(self) -> str:
        rows, size = self.vectors.shape
        return (
            f"MultiVectorOutput(request_id={self.request_id!r}, num_tokens={self.num_tokens}, "
            f"vectors=<float32[{rows}, {size}]>)"
        )


SingleKindOutput = EmbeddingOutput | SparseEmbeddingOutput | MultiVectorOutput


@dataclass
class CombinedEmbeddingOutput:
    """The outputs of several kinds for one text, from one forward pass (``output=("dense", "sparse",
    "multi_vector")`` on BGE-M3): ``outputs[kind]``, or ``.dense`` / ``.sparse`` / ``.multi_vector``."""

    request_id: str
    outputs: dict[str, SingleKindOutput]
    num_tokens: int
    metrics: RequestMetrics | None = None

    @property
    def dense(self) -> EmbeddingOutput | None:
        return self.outputs.get("dense")  # type: ignore[return-value]

    @property
    def sparse(self) -> SparseEmbeddingOutput | None:
        return self.outputs.get("sparse")  # type: ignore[return-value]

    @property
    def multi_vector(self) -> MultiVectorOutput | None:
        return self.outputs.get("multi_vector")  # type: ignore[return-value]

    def __repr__(self) -> str:
        return (
            f"CombinedEmbeddingOutput(request_id={self.request_id!r}, num_tokens={self.num_tokens}, "
            f"kinds={list(self.outputs)})"
        )


@dataclass
class ScoreOutput:
    """A (text_1, text_2) pair's score: the classifier's activated logits (all labels), or cosine similarity
    for an embedding model."""

    request_id: str
    scores: np.ndarray  # [num_labels] float32
    num_tokens: int
    metrics: RequestMetrics | None = None

    @property
    def score(self) -> float:
        if self.scores.shape[0] != 1:
            raise ValueError(f"the model has {self.scores.shape[0]} labels; read .scores for all of them")
        return float(self.scores[0])

    def __repr__(self) -> str:
        return f"ScoreOutput(request_id={self.request_id!r}, scores={self.scores.tolist()})"


@dataclass
class RerankResult:
    index: int  # position of the document in the request
    score: float
    document: str | None = None


@dataclass
class ErrorOutput:
    """A request that was accepted but could not run (e.g. too long with truncation off)."""

    request_id: str
    error: Exception
    metrics: RequestMetrics | None = None
    # True when the request's own input is at fault (too long, refused by the tokenizer): the caller's
    # to fix (HTTP 4xx); False when running it failed (HTTP 5xx).
    is_input_error: bool = True


RequestOutput = (
    EmbeddingOutput
    | SparseEmbeddingOutput
    | MultiVectorOutput
    | CombinedEmbeddingOutput
    | ScoreOutput
    | ErrorOutput
)
