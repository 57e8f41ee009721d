"""BGE-M3's extra heads, as its published folder holds them beside an ``XLMRobertaModel`` checkpoint:
``sparse_linear.pt`` (``[1, hidden_size]`` + bias: a weight per token, the lexical weights) and
``colbert_linear.pt`` (``[colbert_dim, hidden_size]`` + bias: the ColBERT vectors). A folder with both
serves dense (its sentence-transformers pooling: [CLS], normalized), sparse and multi-vector output, any
subset of them from one forward pass, as FlagEmbedding's ``BGEM3FlagModel`` computes them.
"""

from __future__ import annotations

from pathlib import Path

from wde.config import DenseConfig, MultiVectorConfig, SparseConfig

SPARSE_FILE = "sparse_linear.pt"
COLBERT_FILE = "colbert_linear.pt"
# FlagEmbedding leaves these out of the lexical weights
SKIPPED_SPECIAL_TOKENS = ("cls_token", "eos_token", "pad_token", "unk_token")


def has_bge_m3_heads(model_dir: str | Path) -> bool:
    model_dir = Path(model_dir)
    return (model_dir / SPARSE_FILE).is_file() and (model_dir / COLBERT_FILE).is_file()


def read_bge_m3_heads(
    model_dir: str | Path, hidden_size: int, special_token_ids: list[int]
) -> tuple[SparseConfig, MultiVectorConfig]:
    """The sparse and multi-vector configurations of a BGE-M3 folder (``has_bge_m3_heads``)."""
    import torch

    model_dir = Path(model_dir)
    colbert = torch.load(model_dir / COLBERT_FILE, map_location="cpu", weights_only=True)
    weight = colbert.get("weight")
    if weight is None or weight.ndim != 2 or weight.shape[1] != hidden_size:
        shapes = {name: tuple(tensor.shape) for name, tensor in colbert.items()}
        raise ValueError(
            f"{model_dir / COLBERT_FILE} holds {shapes}; expected weight [colbert_dim, {hidden_size}] "
            "(+ bias) for this model's hidden size"
        )
    sparse = SparseConfig(
        method="token_weights",
        weights_path=str(model_dir / SPARSE_FILE),
        skip_token_ids=tuple(sorted(set(special_token_ids))),
    )
    projection = DenseConfig(
        path=str(model_dir / COLBERT_FILE),
        in_features=hidden_size,
        out_features=int(weight.shape[0]),
        bias="bias" in colbert,
        activation="identity",
    )
    return sparse, MultiVectorConfig(projection=projection, normalize=True, skip_first=True)
