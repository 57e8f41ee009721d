"""The output kinds a model directory serves (the first is a request's default) and the configuration of
its sparse and multi-vector heads, from what the folder holds: BGE-M3's head files (dense + sparse +
multi-vector), a MultiVectorEncoder's modules (ColBERT: multi-vector), a SparseEncoder's ``SpladePooling``
(sparse), else what the class can (``ModelEntry.outputs``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wde.config import MultiVectorConfig, SparseConfig, config_value
from wde.model_folder.bge_m3 import SKIPPED_SPECIAL_TOKENS, has_bge_m3_heads, read_bge_m3_heads
from wde.model_folder.registry import ModelEntry
from wde.model_folder.st_metadata import SentenceTransformerMetadata


@dataclass
class ServedOutputs:
    kinds: tuple[str, ...]  # wde.output_kinds names; the first is a request's default
    sparse: SparseConfig | None = None
    multi_vector: MultiVectorConfig | None = None


def read_served_outputs(
    entry: ModelEntry,
    architecture: str,
    st_metadata: SentenceTransformerMetadata,
    hf_config: dict[str, Any],
    model_path: str,
    tokenizer_path: str,
) -> ServedOutputs:
    """BGE-M3's heads, else a ColBERT's modules, else SPLADE's or the class's own kinds."""
    hidden_size = int(config_value(hf_config, "hidden_size", "dim", "d_model"))
    if has_bge_m3_heads(model_path):
        from wde.tokenizer import special_token_ids

        special_ids = special_token_ids(tokenizer_path, SKIPPED_SPECIAL_TOKENS)
        sparse, multi_vector = read_bge_m3_heads(model_path, hidden_size, special_ids)
        return ServedOutputs(("dense", "sparse", "multi_vector"), sparse, multi_vector)
    if st_metadata.multi_vector is not None:
        return ServedOutputs(
            ("multi_vector",), None, _colbert_config(st_metadata, hidden_size, tokenizer_path)
        )
    return _splade_outputs(entry, architecture, st_metadata, hf_config, model_path)


def _colbert_config(
    st_metadata: SentenceTransformerMetadata, hidden_size: int, tokenizer_path: str
) -> MultiVectorConfig:
    """A MultiVectorEncoder's token vectors: its skiplist and expansion token as the tokenizer's ids."""
    from wde.tokenizer import token_ids_of_words

    multi_vector = st_metadata.multi_vector
    assert multi_vector is not None  # read_served_outputs checked
    multi_vector.skiplist_ids = tuple(token_ids_of_words(tokenizer_path, st_metadata.skiplist_words))
    if multi_vector.query_expansion_length is not None:
        multi_vector.query_expansion_token_id = _expansion_token_id(
            tokenizer_path, st_metadata.expansion_token
        )
    projection = multi_vector.projection
    if projection is not None and projection.in_features != hidden_size:
        raise ValueError(
            f"{projection.path}: Dense in_features ({projection.in_features}) does not match the model's "
            f"hidden size ({hidden_size}); the sentence-transformers modules do not fit this model"
        )
    return multi_vector


def _expansion_token_id(tokenizer_path: str, token: str | None) -> int:
    """ColBERT query expansion's token: the configured one, else the tokenizer's mask token, else its eos
    token (sentence-transformers' fallback chain)."""
    from wde.tokenizer import special_token_ids, token_ids_of_words

    ids = token_ids_of_words(tokenizer_path, [token]) if token else []
    for name in ("mask_token", "eos_token"):
        ids = ids or special_token_ids(tokenizer_path, (name,))
    if not ids:
        wanted = repr(token) if token else "a mask or eos token"
        raise ValueError(f"query_expansion needs {wanted} in the tokenizer of {tokenizer_path}")
    return ids[0]


def _splade_outputs(
    entry: ModelEntry,
    architecture: str,
    st_metadata: SentenceTransformerMetadata,
    hf_config: dict[str, Any],
    model_path: str,
) -> ServedOutputs:
    """A SparseEncoder's SpladePooling (sparse output, a masked-LM class), else the class's own kinds."""
    supported = entry.outputs
    kinds = st_metadata.outputs or supported
    missing = [kind for kind in kinds if kind not in supported]
    if missing:
        raise ValueError(
            f"{model_path}/modules.json asks for {', '.join(missing)} output, which {architecture} cannot "
            f"produce (it serves {', '.join(supported)}); SPLADE needs a masked-LM checkpoint "
            "(BertForMaskedLM, DistilBertForMaskedLM in config.json architectures)"
        )
    if "sparse" not in kinds:
        return ServedOutputs(kinds)
    sparse = st_metadata.sparse or SparseConfig()
    dimension, vocab_size = st_metadata.sparse_dimension, int(hf_config["vocab_size"])
    if dimension is not None and dimension != vocab_size:
        raise ValueError(
            f"{model_path}: SpladePooling's embedding_dimension ({dimension}) is not the vocabulary size in "
            f"config.json ({vocab_size}); the modules do not belong to this checkpoint"
        )
    return ServedOutputs(kinds, sparse)
