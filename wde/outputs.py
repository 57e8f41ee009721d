"""What the engine hands back: one output per request."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class RequestMetrics:
    """Monotonic timestamps (seconds) of one request's life in the engine."""

    arrival_time: float
    scheduled_time: float | None
    finished_time: float

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
class ErrorOutput:
    """A request that was accepted but could not run (e.g. too long with truncation off)."""

    request_id: str
    error: Exception
    metrics: RequestMetrics | None = None


RequestOutput = EmbeddingOutput | ErrorOutput
