"""What the engine hands back: one output per request."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class EmbeddingOutput:
    request_id: str
    embedding: np.ndarray  # [hidden_size] or [dimensions], float32
    num_tokens: int

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


RequestOutput = EmbeddingOutput | ErrorOutput
