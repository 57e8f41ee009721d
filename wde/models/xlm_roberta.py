"""XLM-RoBERTa (and RoBERTa): BERT blocks; positions count from padding_idx + 1."""

from __future__ import annotations

from typing import Any

from wde.models.bert import BertEmbeddings, BertModel


class XLMRobertaModel(BertModel):
    weight_prefixes = ("roberta.", "model.")

    def _make_embeddings(self, config: dict[str, Any]) -> BertEmbeddings:
        return BertEmbeddings(config, position_offset=int(config.get("pad_token_id", 1)) + 1)
