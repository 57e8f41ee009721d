"""The pooler of each task: a pooling method (or the model's own classifier pooling) times a head.

``POOLERS[task](model, model_config, device, dtype)`` builds it; the runner looks it up by the task and
knows nothing else about poolers. The embed task has one head per output kind the model serves
(``OUTPUT_HEADS``: dense pooling, SPLADE sparse), chosen per request.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from wde.config import ModelConfig
from wde.layers.pooler.dense_head import DenseStack
from wde.layers.pooler.embedding_pooler import EmbeddingPooler
from wde.layers.pooler.output_pooler import OutputHead, OutputPooler
from wde.layers.pooler.score_pooler import ScorePooler
from wde.layers.pooler.sparse_pooler import SparsePooler

Pooler = OutputPooler | ScorePooler
HeadBuilder = Callable[[torch.nn.Module, ModelConfig, torch.device, torch.dtype], OutputHead]


def dense_head(
    model: torch.nn.Module, model_config: ModelConfig, device: torch.device, dtype: torch.dtype
) -> EmbeddingPooler:
    """Pooling method (cls / mean / max / last) -> sentence-transformers Dense stack -> Matryoshka and
    normalization per request."""
    dense_layers = model_config.dense_layers
    dense = DenseStack.load(dense_layers, device, dtype) if dense_layers else None
    return EmbeddingPooler(model_config.pooling, dense)


def sparse_head(
    model: torch.nn.Module, model_config: ModelConfig, device: torch.device, dtype: torch.dtype
) -> SparsePooler:
    """The model's masked-LM logits -> SPLADE (log1p(relu), max / sum over tokens) -> top-k per request."""
    if model_config.sparse is None:
        raise ValueError(f"{model_config.model} has no SPLADE pooling configured")
    return SparsePooler(model, model_config.sparse, model_config.vocab_size)


# output kind -> its head ("multi_vector", per-token vectors, comes with ColBERT / BGE-M3)
OUTPUT_HEADS: dict[str, HeadBuilder] = {"dense": dense_head, "sparse": sparse_head}


def embedding_pooler(
    model: torch.nn.Module, model_config: ModelConfig, device: torch.device, dtype: torch.dtype
) -> OutputPooler:
    """One head per output kind the model serves; a request's kind picks its head."""
    missing = [kind for kind in model_config.outputs if kind not in OUTPUT_HEADS]
    if missing:
        raise ValueError(f"output kinds {missing} have no head yet; known: {sorted(OUTPUT_HEADS)}")
    heads = {kind: OUTPUT_HEADS[kind](model, model_config, device, dtype) for kind in model_config.outputs}
    return OutputPooler(heads, default=model_config.outputs[0])


def score_pooler(
    model: torch.nn.Module, model_config: ModelConfig, device: torch.device, dtype: torch.dtype
) -> ScorePooler:
    """The model's classifier (it pools as its family does) -> the score activation."""
    return ScorePooler(model, model_config.score_activation)


POOLERS: dict[str, Callable[[torch.nn.Module, ModelConfig, torch.device, torch.dtype], Pooler]] = {
    "embed": embedding_pooler,
    "score": score_pooler,
}
