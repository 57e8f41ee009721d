"""Gemma3 embedder (EmbeddingGemma: ``Gemma3TextModel`` with bidirectional attention, sliding and full layers)
against transformers and sentence-transformers, on tiny random checkpoints (tiny_gemma3.py): grouped-query
heads, ``head_dim`` != hidden / heads, ``query_pre_attn_scalar``, q/k norms, sandwich norms, scaled
embeddings, local and global RoPE bases, a window smaller than the longer sequences; saved by
sentence-transformers as EmbeddingGemma is (mean pooling, two Dense modules, Normalize, prompts)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import wde
from tests.models.family_checks import assert_close_to_sentence_transformers, hf_last_hidden
from tests.models.test_encoders import max_abs_diff, run_wde
from tests.models.tiny_gemma3 import (
    LAYER_TYPES,
    PROMPTS,
    SEED,
    SLIDING_WINDOW,
    save_embeddinggemma_like,
    save_tiny_gemma3,
)
from wde.layers.attention.layer import attention_specs
from wde.models.gemma3 import Gemma3TextModel, rope_theta

FP32_ATOL = 1e-5  # float32: ours vs transformers, batch vs single
MIN_WINDOW_EFFECT = 1e-2  # the sliding window must move outputs far past the tolerance
BACKEND_NAMES = ("naive", "torch_sdpa")
SEQ_LENS = (5, 1, 9, 2, 9, 40, 3, 17)  # mixed lengths, an equal pair, several past the window (3 each side)
MAX_SEQ_LENGTH = 48
PAD_ID, EOS_ID, BOS_ID = 0, 1, 2
FIRST_ID = 5  # random token ids start past the special tokens
TEXTS = [
    "Clam AntiVirus is an anti-virus toolkit for Unix, integrated with mail servers.",
    "a",
    "scalpel is a fast file carver that reads a database of header and footer definitions " * 3,
    "",
    "rust hash crate",
]


# ---- helpers -----------------------------------------------------------------------------------------------
def random_token_ids(path: Path, seed: int) -> list[list[int]]:
    """``<bos>`` + random tokens + ``<eos>``, as the Gemma tokenizer of EmbeddingGemma frames a text."""
    vocab_size = json.loads((path / "config.json").read_text())["vocab_size"]
    generator = torch.Generator().manual_seed(seed)
    token_ids = []
    for length in SEQ_LENS:
        middle = torch.randint(FIRST_ID, vocab_size, (max(length - 2, 0),), generator=generator).tolist()
        token_ids.append([BOS_ID, *middle, EOS_ID][:length] if length > 1 else [BOS_ID])
    return token_ids


def run_hf(path: Path, token_ids: list[list[int]]) -> torch.Tensor:
    return hf_last_hidden(path, token_ids, PAD_ID)


def embeddings(outputs: list) -> np.ndarray:
    return np.stack([output.embedding for output in outputs])


def assert_st_close(got: np.ndarray, expected: np.ndarray) -> None:
    assert_close_to_sentence_transformers(got, expected)


# ---- fixtures ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_gemma3(tmp_path_factory.mktemp("tiny-gemma3"))


@pytest.fixture(scope="module")
def token_ids(gemma_dir: Path) -> list[list[int]]:
    return random_token_ids(gemma_dir, SEED)


@pytest.fixture(scope="module")
def hf_hidden(gemma_dir: Path, token_ids: list[list[int]]) -> torch.Tensor:
    return run_hf(gemma_dir, token_ids)


@pytest.fixture(scope="module")
def st_dir(gemma_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_embeddinggemma_like(tmp_path_factory.mktemp("st-gemma3") / "model", gemma_dir, MAX_SEQ_LENGTH)


# ---- the model against transformers -----------------------------------------------------------------------
@pytest.mark.parametrize("backend_name", BACKEND_NAMES)
def test_hidden_state_equals_transformers(
    gemma_dir: Path, token_ids: list[list[int]], hf_hidden: torch.Tensor, backend_name: str
) -> None:
    ours, _ = run_wde(gemma_dir, token_ids, backend_name)
    assert ours.shape == hf_hidden.shape
    assert max_abs_diff(ours, hf_hidden) <= FP32_ATOL


def test_attention_specs_follow_the_config(gemma_dir: Path) -> None:
    """Sliding layers see sliding_window // 2 keys on either side (transformers keeps window // 2 + 1 as an
    exclusive bound); full layers the whole sequence; GQA heads and the query_pre_attn_scalar scale."""
    config = json.loads((gemma_dir / "config.json").read_text())
    with torch.device("meta"):
        specs = attention_specs(Gemma3TextModel(config))
    half = SLIDING_WINDOW // 2
    assert [spec.sliding_window for spec in specs] == [
        (half, half) if layer_type == "sliding_attention" else None for layer_type in LAYER_TYPES
    ]
    assert all(not spec.causal and spec.num_heads == 4 and spec.num_kv_heads == 2 for spec in specs)
    assert all(spec.head_size == 24 and spec.scale == pytest.approx(20**-0.5) for spec in specs)


def test_the_window_matters(
    gemma_dir: Path, token_ids: list[list[int]], hf_hidden: torch.Tensor, tmp_path: Path
) -> None:
    """The same weights with a window wider than every sequence give other outputs: the tests above see it."""
    wide_dir = save_tiny_gemma3(tmp_path / "wide", sliding_window=4 * max(SEQ_LENS))
    assert max_abs_diff(run_hf(wide_dir, token_ids), hf_hidden) > MIN_WINDOW_EFFECT


def test_causal_gemma3_equals_transformers(tmp_path: Path) -> None:
    """Without use_bidirectional_attention: causal, and a sliding layer sees the window - 1 keys before."""
    path = save_tiny_gemma3(tmp_path / "causal", seed=SEED + 1, use_bidirectional_attention=False)
    token_ids = random_token_ids(path, SEED + 1)
    ours, _ = run_wde(path, token_ids, "naive")
    assert max_abs_diff(ours, run_hf(path, token_ids)) <= FP32_ATOL


# ---- the engine ------------------------------------------------------------------------------------------
def test_batch_equals_single(gemma_dir: Path, token_ids: list[list[int]]) -> None:
    llm = wde.LLM(str(gemma_dir), device="cpu", attention_backend="torch_sdpa")
    prompts = [{"prompt_token_ids": ids} for ids in token_ids]
    batched = embeddings(llm.encode(prompts))
    single = np.concatenate([embeddings(llm.encode([prompt])) for prompt in prompts])
    assert max_abs_diff(batched, single) <= FP32_ATOL


@pytest.mark.parametrize("prompt_name", ["query", "document"])
def test_saved_like_embeddinggemma_equals_sentence_transformers(st_dir: Path, prompt_name: str) -> None:
    from sentence_transformers import SentenceTransformer

    modules = [m["type"].rsplit(".", 1)[-1] for m in json.loads((st_dir / "modules.json").read_text())]
    assert modules == ["Transformer", "Pooling", "Dense", "Dense", "Normalize"]
    reference = SentenceTransformer(str(st_dir), device="cpu")
    assert reference.prompts[prompt_name] == PROMPTS[prompt_name]
    expected = reference.encode(TEXTS, prompt_name=prompt_name)
    llm = wde.LLM(str(st_dir), device="cpu")
    assert llm.model_config.max_model_len == MAX_SEQ_LENGTH
    assert_st_close(embeddings(llm.encode(TEXTS, prompt_name=prompt_name)), expected)


def test_matryoshka_dimensions_after_dense(st_dir: Path) -> None:
    """EmbeddingGemma is used at 768 / 512 / 256 / 128 dimensions: truncate the Dense output, renormalize."""
    from sentence_transformers import SentenceTransformer

    dims = 16
    full = SentenceTransformer(str(st_dir), device="cpu").encode(TEXTS, prompt_name="query")
    expected = full[:, :dims] / np.linalg.norm(full[:, :dims], axis=1, keepdims=True)
    llm = wde.LLM(str(st_dir), device="cpu")
    assert_st_close(embeddings(llm.encode(TEXTS, prompt_name="query", dimensions=dims)), expected)


def test_rope_bases_from_legacy_keys() -> None:
    """Hub configs (EmbeddingGemma's) spell the bases rope_theta / rope_local_base_freq, rope_scaling null."""
    legacy = {"rope_theta": 1_000_000.0, "rope_local_base_freq": 10_000.0, "rope_scaling": None}
    assert rope_theta(legacy, "full_attention") == 1_000_000.0
    assert rope_theta(legacy, "sliding_attention") == 10_000.0
    with pytest.raises(ValueError, match="rope_type 'linear'"):
        rope_theta({"rope_scaling": {"rope_type": "linear", "factor": 8.0}}, "full_attention")
