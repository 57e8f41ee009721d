"""What every family's tests compare against: transformers' last hidden state on a right-padded batch, and
sentence-transformers' embeddings (min cosine and max abs diff); which CPU attention backends can run a
model (the selector's reason where one cannot)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

MIN_COSINE = 0.99999  # float32, same weights
ST_ATOL = 1e-4
CPU_BACKEND_NAMES = ("naive", "torch_sdpa", "varlen_cpu")  # every attention backend a CPU can have


@torch.inference_mode()
def hf_last_hidden(
    path: Path,
    token_ids: list[list[int]],
    pad_id: int,
    prepare: Callable[[torch.nn.Module], None] | None = None,
) -> torch.Tensor:
    """transformers' ``AutoModel`` (eager, float32) on the right-padded batch: the last hidden state of the
    real tokens, ``[num_tokens, hidden_size]`` in the flat order wde uses. ``prepare`` changes the loaded
    model first (e.g. a remote code's RoPE that transformers lacks)."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(path), attn_implementation="eager", dtype=torch.float32).eval()
    if prepare is not None:
        prepare(model)
    max_len = max(map(len, token_ids))
    input_ids = torch.full((len(token_ids), max_len), pad_id, dtype=torch.long)
    mask = torch.zeros_like(input_ids, dtype=torch.bool)
    for row, ids in enumerate(token_ids):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        mask[row, : len(ids)] = True
    hidden = model(input_ids=input_ids, attention_mask=mask.long()).last_hidden_state
    return hidden[mask]


def assert_close_to_sentence_transformers(got: np.ndarray, expected: np.ndarray) -> None:
    """``[num_texts, dim]`` embeddings: every row's cosine >= MIN_COSINE and every value within ST_ATOL."""
    got, expected = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    cosine = np.sum(got * expected, axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
    assert cosine.min() >= MIN_COSINE, f"min cosine {cosine.min():.7f}"
    assert np.abs(got - expected).max() <= ST_ATOL, f"max abs diff {np.abs(got - expected).max():.2e}"


def backend_refusal(path: Path, backend_name: str) -> str | None:
    """The selector's reason why ``backend_name`` cannot run this model's attention layers here (float32,
    CPU), or None when it can."""
    from wde.layers.attention.layer import attention_specs
    from wde.layers.attention.selector import select_attention_backend
    from wde.model_folder.registry import resolve_architecture
    from wde.platforms.cpu import CpuPlatform
    from wde.worker.model_loader import model_class

    hf_config = json.loads((path / "config.json").read_text())
    _, entry = resolve_architecture(hf_config.get("architectures"), str(path), hf_config)
    with torch.device("meta"):
        specs = attention_specs(model_class(entry)(entry.standard_config(hf_config)))  # as read_model_info
    try:
        select_attention_backend(backend_name, CpuPlatform(), torch.float32, specs)
    except ValueError as error:
        return str(error)
    return None


def save_last_token_st(hf_dir: Path, path: Path, prompts: dict[str, str]) -> Path:
    """Saved by sentence-transformers as decoder embedders are (Qwen3-Embedding, gte-Qwen2, e5-mistral):
    Transformer -> Pooling(lasttoken) -> Normalize, with ``prompts``."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    transformer = Transformer(str(hf_dir))
    pooling = Pooling(transformer.get_embedding_dimension(), "lasttoken")
    SentenceTransformer(modules=[transformer, pooling, Normalize()], prompts=prompts).save(str(path))
    return path


@contextmanager
def config_changed(path: Path, **changes: object) -> Iterator[None]:
    """The model folder's config.json with ``changes`` inside the block, restored afterwards (a window, the
    causal mask: the same weights run the other way)."""
    config_path = path / "config.json"
    original = config_path.read_text()
    config_path.write_text(json.dumps({**json.loads(original), **changes}))
    try:
        yield
    finally:
        config_path.write_text(original)
