"""The pooler of each task: a pooling method (or the model's own classifier pooling) times a head.

``POOLERS[task](model, model_config, device, dtype)`` builds it; the runner looks it up by the task and
knows nothing else about poolers.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from wde.config import ModelConfig
from wde.layers.pooler.dense_head import DenseStack
from wde.layers.pooler.embedding_pooler import EmbeddingPooler
from wde.layers.pooler.score_pooler import ScorePooler

Pooler = EmbeddingPooler | ScorePooler


def embedding_pooler(
    model: torch.nn.Module, model_config: ModelConfig, device: torch.device, dtype: torch.dtype
) -> EmbeddingPooler:
    """Pooling method (cls / mean / max / last) -> sentence-transformers Dense stack -> Matryoshka and
    normalization per request."""
    dense_layers = model_config.dense_layers
    dense = DenseStack.load(dense_layers, device, dtype) if dense_layers else None
    return EmbeddingPooler(model_config.pooling, dense)


def score_pooler(
    model: torch.nn.Module, model_config: ModelConfig, device: torch.device, dtype: torch.dtype
) -> ScorePooler:
    """The model's classifier (it pools as its family does) -> the score activation."""
    return ScorePooler(model, model_config.score_activation)


POOLERS: dict[str, Callable[[torch.nn.Module, ModelConfig, torch.device, torch.dtype], Pooler]] = {
    "embed": embedding_pooler,
    "score": score_pooler,
}
