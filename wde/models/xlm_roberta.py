"""XLM-RoBERTa (and RoBERTa): BERT blocks; positions count from padding_idx + 1."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from wde.config import num_labels
from wde.layers.pooler.methods import PoolingMetadata, cls_pool
from wde.model_folder.position_tables import roberta_reserved_positions
from wde.models.bert import BertEmbeddings, BertModel
from wde.models.interface import WdeModel
from wde.models.weight_names import load_named_weights


class XLMRobertaModel(BertModel):
    weight_prefixes = ("roberta.", "model.")

    def _make_embeddings(self, config: dict[str, Any]) -> BertEmbeddings:
        return BertEmbeddings(config, position_offset=roberta_reserved_positions(config))


class ClassifierHead(nn.Module):
    """The classifier head of RoBERTa-style cross-encoders (XLM-RoBERTa, MPNet): dense -> tanh -> out_proj on
    the first token (<s>)."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.dense = nn.Linear(config["hidden_size"], config["hidden_size"])
        self.out_proj = nn.Linear(config["hidden_size"], num_labels(config))

    def forward(self, first_token_states: torch.Tensor) -> torch.Tensor:
        return self.out_proj(torch.tanh(self.dense(first_token_states)))


class XLMRobertaForSequenceClassification(WdeModel):
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.roberta = XLMRobertaModel(config)
        self.classifier = ClassifierHead(config)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.roberta(input_ids, positions, token_type_ids)

    def compute_logits(self, hidden_states: torch.Tensor, meta: PoolingMetadata) -> torch.Tensor:
        return self.classifier(cls_pool(hidden_states, meta))  # [num_seqs, num_labels]

    def compile_blocks(self) -> None:
        self.roberta.compile_blocks()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return load_named_weights(self, weights, (), self.config["hidden_size"])
