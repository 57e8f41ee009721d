"""The score task's pooler: the model's classifier head (``compute_logits(hidden, meta)``: it pools as its
family does, e.g. the first token, the mean, or the last token), then the activation
(sigmoid / softmax / identity, as sentence-transformers' CrossEncoder resolves it) unless raw scores
were asked for."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np
import torch

from wde.inputs import PoolingParams
from wde.layers.pooler.methods import PoolingMetadata

SCORE_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sigmoid": torch.sigmoid,
    "softmax": lambda logits: torch.softmax(logits, dim=-1),
    "tanh": torch.tanh,
    "identity": lambda logits: logits,
}


class Classifier(Protocol):
    """What the score pooler needs of a model (``WdeModel.compute_logits``; layers do not import models)."""

    def compute_logits(self, hidden_states: torch.Tensor, meta: PoolingMetadata) -> torch.Tensor: ...


class ScorePooler:
    def __init__(self, model: Classifier, activation: str) -> None:
        if activation not in SCORE_ACTIVATIONS:
            raise ValueError(f"score activation {activation!r} is not one of {sorted(SCORE_ACTIVATIONS)}")
        self.model = model
        self.activation = SCORE_ACTIVATIONS[activation]

    def __call__(
        self, hidden: torch.Tensor, meta: PoolingMetadata, params: list[PoolingParams]
    ) -> list[np.ndarray]:
        logits = self.model.compute_logits(hidden, meta).float()  # [num_seqs, num_labels]
        activated = self.activation(logits)
        raw = torch.tensor([p.raw_scores for p in params], device=logits.device)
        scores = torch.where(raw.unsqueeze(1), logits, activated)
        return list(scores.cpu().numpy())
