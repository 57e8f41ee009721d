"""The pooler of each task: a pooling method (or the model's own classifier pooling) times a head.

``POOLERS[task](model, model_config, device, dtype)`` builds it; the runner looks it up by the task and
knows nothing else about poolers. The embed task has one head per output kind the model serves, built by
that kind's ``OUTPUT_HEADS`` entry (the kinds themselves are ``wde.output_kinds.OUTPUT_KINDS``); each
request picks its kinds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch

from wde.config import ModelConfig
from wde.layers.pooler.embedding_pooler import build_dense_head
from wde.layers.pooler.multi_vector_pooler import build_multi_vector_head
from wde.layers.pooler.output_pooler import OutputHead, OutputPooler
from wde.layers.pooler.score_pooler import Classifier, ScorePooler
from wde.layers.pooler.sparse_pooler import build_sparse_head

Pooler = OutputPooler | ScorePooler
HeadBuilder = Callable[[torch.nn.Module, ModelConfig, torch.device, torch.dtype], OutputHead]

# output kind (wde.output_kinds.OUTPUT_KINDS) -> the builder of its head
OUTPUT_HEADS: dict[str, HeadBuilder] = {
    "dense": build_dense_head,
    "sparse": build_sparse_head,
    "multi_vector": build_multi_vector_head,
}


def embedding_pooler(
    model: torch.nn.Module, model_config: ModelConfig, device: torch.device, dtype: torch.dtype
) -> OutputPooler:
    """One head per output kind the model serves; a request's kinds pick its heads."""
    heads = {kind: OUTPUT_HEADS[kind](model, model_config, device, dtype) for kind in model_config.outputs}
    return OutputPooler(heads, default=model_config.outputs[0])


def score_pooler(
    model: torch.nn.Module, model_config: ModelConfig, device: torch.device, dtype: torch.dtype
) -> ScorePooler:
    """The model's classifier (it pools as its family does) -> the score activation."""
    # a model serving 'score' has a classifier (tests/unit/models/test_interface.py checks every family)
    return ScorePooler(cast(Classifier, model), model_config.score_activation)


POOLERS: dict[str, Callable[[torch.nn.Module, ModelConfig, torch.device, torch.dtype], Pooler]] = {
    "embed": embedding_pooler,
    "score": score_pooler,
}
