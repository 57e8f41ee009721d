"""The benchmark's useful-FLOP count equals what torch's FlopCounterMode counts in a real forward."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.flops import encoder_flops, matmul_peak_gflops
from wde import LLM
from wde.layers.packed_linear import GEMM_ENV


@pytest.fixture(autouse=True)
def aten_gemm(monkeypatch: pytest.MonkeyPatch) -> None:
    """FlopCounterMode counts aten's matmuls; oneDNN's packed linear, which the load-time measurement may
    pick on some CPUs (an AVX-512 bf16 EPYC picked it for the tiny decoder in the full suite), is opaque
    to it. The FLOPs are the same on either GEMM."""
    monkeypatch.setenv(GEMM_ENV, "aten")


def assert_useful_flops_are_counted_flops(path: Path) -> None:
    # naive attention runs exactly one QK^T and one PV matmul per sequence (no padding), so every counted
    # FLOP is useful; the poolings and normalisation add no matmuls.
    llm = LLM(str(path), attention_backend="naive", dtype="float32")
    texts = ["a b c", "the quick brown fox jumps over the lazy dog", "x"]
    seq_lens = [output.num_tokens for output in llm.encode(texts)]
    with FlopCounterMode(display=False) as counter:
        llm.encode(texts)
    hf_config = json.loads((path / "config.json").read_text())
    assert counter.get_total_flops() == encoder_flops(hf_config, seq_lens)


def test_encoder_flops_equal_counted_flops(bert_dir: Path) -> None:
    assert_useful_flops_are_counted_flops(bert_dir)


def test_matmul_peak_is_positive_and_finite() -> None:
    hf_config = {"hidden_size": 32, "intermediate_size": 64}
    peak = matmul_peak_gflops(hf_config, torch.float32, num_tokens=64, min_seconds=0.01)
    assert 0 < peak < float("inf")


def test_decoder_flops_equal_counted_flops(tmp_path: Path) -> None:
    """A decoder embedder: grouped-query heads whose width (heads x head_dim = 128) is not the hidden size
    (64), and a gated MLP (three matrices), as in benchmarks.shapes' Qwen3 / EmbeddingGemma rows."""
    from benchmarks.random_decoder import write_random_decoder
    from wde.engine_args import default_model_path

    assert_useful_flops_are_counted_flops(
        write_random_decoder(tmp_path / "qwen3", "qwen3-tiny", Path(default_model_path()))
    )
