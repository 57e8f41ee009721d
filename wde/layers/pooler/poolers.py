"""The pooler of each task: a pooling method (or the model's own classifier pooling) times a head.

``POOLERS[task](model, model_config, device, dtype)`` builds it; the runner looks it up by the task and
knows nothing else about poolers. The embed task has one head per output kind the model serves, built by
that kind's entry in ``wde.output_kinds.OUTPUT_KINDS``; each request picks its kinds.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import torch

from wde.config import ModelConfig
from wde.layers.pooler.output_pooler import OutputHead, OutputPooler
from wde.layers.pooler.score_pooler import ScorePooler
from wde.output_kinds import OUTPUT_KINDS

Pooler = OutputPooler | ScorePooler
HeadBuilder = Callable[[torch.nn.Module, ModelConfig, torch.device, torch.dtype], OutputHead]


def head_builder(kind: str) -> HeadBuilder:
    """The builder named by the kind's ``head`` ("module:function")."""
    module_name, function_name = OUTPUT_KINDS[kind].head.split(":")
    return getattr(importlib.import_module(module_name), function_name)


def embedding_pooler(
    model: torch.nn.Module, model_config: ModelConfig, device: torch.device, dtype: torch.dtype
) -> OutputPooler:
    """One head per output kind the model serves; a request's kinds pick its heads."""
    heads = {kind: head_builder(kind)(model, model_config, device, dtype) for kind in model_config.outputs}
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
