"""Rows of a position table no token can use (``ModelEntry.reserved_positions``): RoBERTa-style models number
positions from ``padding_idx + 1``, so ``max_position_embeddings`` minus these rows is the longest input."""

from __future__ import annotations

from typing import Any

# transformers' MPNetEmbeddings fixes padding_idx at 1 whatever config.json says: positions start at 2.
MPNET_PADDING_IDX = 1


def no_reserved_positions(hf_config: dict[str, Any]) -> int:
    """Positions from 0 (BERT, the decoders, the RoPE encoders)."""
    return 0


def roberta_reserved_positions(hf_config: dict[str, Any]) -> int:
    """XLM-RoBERTa, RoBERTa, CamemBERT: positions count from config.json's ``pad_token_id`` + 1."""
    return int(hf_config.get("pad_token_id", 1)) + 1


def mpnet_reserved_positions(hf_config: dict[str, Any]) -> int:
    """MPNet: positions count from ``MPNET_PADDING_IDX`` + 1, as in RoBERTa."""
    return MPNET_PADDING_IDX + 1
